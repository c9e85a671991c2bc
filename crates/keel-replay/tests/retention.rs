//! What the offline summarizer keeps. Sessions with planted facts of every
//! kind (keel-testkit's `planted` generator: decisions, rules, requirements, identifiers,
//! versions, hashes, quantities, dates, paths, URLs, names, error codes, addresses, tool
//! outcomes) among tool loops, long logs and chit-chat are replayed with the bundled
//! `examples/summarization.yaml` and the built-in extractive summarizer; the last request
//! of each replay must still carry at least 95 % of the planted facts, with summarization
//! alone and with session memory (`--memory session --n-messages 10`) in front of it.
//!
//! `cargo test` runs the full size, 20 sessions of 319 messages with 20 planted facts
//! each (about 15 s in debug); `KEEL_RETENTION_SESSIONS=N` runs another number, and
//! `KEEL_RETENTION_DUMP=1` prints each last request. The figures in
//! docs/summarization.md come from:
//!
//! ```text
//! cargo test -p keel-replay --test retention -- --nocapture --test-threads 1
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::PathBuf;

use keel_core::message::Message;
use keel_replay::{MemoryOptions, Quiet, ReplayOptions, prepare};
use keel_testkit::planted::{PlantedSession, SessionShape, generate};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Everything the model reads in a request: message text and tool-call arguments.
fn request_text(system: Option<&Message>, messages: &[Message]) -> String {
    let mut out = String::new();
    for m in system.into_iter().chain(messages) {
        out.push_str(&m.text());
        out.push('\n');
        for c in m.tool_calls() {
            out.push_str(&c.args.to_string());
            out.push('\n');
        }
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Summarization,
    SessionMemory,
}

/// Planted facts kept by the last request of a replay of `session`.
async fn kept(session: &PlantedSession, mode: Mode, dir: &std::path::Path) -> usize {
    let path = dir.join("session.jsonl");
    std::fs::write(&path, session.to_jsonl().unwrap()).unwrap();
    let mut options = ReplayOptions {
        config: Some(root().join("examples/summarization.yaml")),
        ..ReplayOptions::default()
    };
    if let Mode::SessionMemory = mode {
        options.memory = Some(MemoryOptions {
            n_messages: Some(10),
            pinned_keys: Vec::new(),
        });
        options.db = Some("sqlite::memory:".into());
    }
    let prepared = prepare(&path, &options).await.unwrap();
    let replay = prepared.run(&mut Quiet).await.unwrap();
    let last = replay.requests.iter().flatten().last().unwrap();
    let text = request_text(last.system.as_ref(), &last.messages);
    let kept = session.kept_in(&text);
    if std::env::var_os("KEEL_RETENTION_DUMP").is_some() {
        eprintln!("--- last request of {mode:?}:\n{text}\n---");
    }
    for f in &session.facts {
        if !kept.contains(&f) {
            eprintln!(
                "{mode:?}: lost {} {:?} (message {})",
                f.kind.as_str(),
                f.needle,
                f.message_index
            );
        }
    }
    kept.len()
}

fn sessions() -> u64 {
    std::env::var("KEEL_RETENTION_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

async fn retention(mode: Mode) -> (usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let (mut kept_total, mut planted) = (0, 0);
    for seed in 0..sessions() {
        let session = generate(seed, &SessionShape::default());
        let k = kept(&session, mode, dir.path()).await;
        eprintln!("{mode:?} seed {seed}: {k}/{}", session.facts.len());
        kept_total += k;
        planted += session.facts.len();
    }
    eprintln!(
        "{mode:?}: kept {kept_total} of {planted} planted facts ({:.1} %)",
        100.0 * kept_total as f64 / planted as f64
    );
    (kept_total, planted)
}

#[tokio::test]
async fn summarization_keeps_the_planted_facts() {
    let (kept, planted) = retention(Mode::Summarization).await;
    assert!(kept * 100 >= planted * 95, "kept {kept} of {planted}");
}

#[tokio::test]
async fn session_memory_keeps_the_planted_facts() {
    let (kept, planted) = retention(Mode::SessionMemory).await;
    assert!(kept * 100 >= planted * 95, "kept {kept} of {planted}");
}
