//! `keel_replay::eval`: questions asked after the whole transcript, each on its own, on
//! generated sessions of every style (reporting seeds), with summarization alone and
//! with session memory in front of it. Prints, per style and mode, the share of probes
//! whose evidence the request holds and the requests presenting a stale value as
//! current; the stale count must be 0. The figures in docs/memory-eval.md come from:
//!
//! ```text
//! KEEL_STYLES_SEEDS=8 cargo test -p keel-replay --test eval -- --nocapture --test-threads 1
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::PathBuf;

use keel_replay::eval::{Probe, request_text};
use keel_replay::{MemoryOptions, Quiet, ReplayOptions, evaluate, prepare};
use keel_testkit::styles::{REPORTING_SEEDS, Style, generate};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn options(memory: bool) -> ReplayOptions {
    let mut options = ReplayOptions {
        config: Some(root().join("examples/summarization.yaml")),
        ..ReplayOptions::default()
    };
    if memory {
        options.memory = Some(MemoryOptions {
            n_messages: Some(10),
            pinned_keys: Vec::new(),
        });
        options.db = Some("sqlite::memory:".into());
    }
    options
}

fn probes(session: &keel_testkit::styles::StyledSession) -> Vec<Probe> {
    session
        .probes
        .iter()
        .map(|p| Probe::parse(&p.to_json().to_string()).unwrap())
        .collect()
}

/// Asking questions changes nothing the replay reports, and no question sees another:
/// each request ends with its own question and holds no other.
#[tokio::test]
async fn questions_are_asked_on_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let session = generate(Style::Corrected, *REPORTING_SEEDS.start());
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, session.to_jsonl().unwrap()).unwrap();
    let questions: Vec<String> = session.probes.iter().map(|p| p.question.clone()).collect();
    for memory in [false, true] {
        let plain = prepare(&path, &options(memory)).await.unwrap();
        let alone = plain.run(&mut Quiet).await.unwrap();
        let asked = prepare(&path, &options(memory)).await.unwrap();
        let (replay, requests) = asked
            .engine()
            .run_with_questions(&asked.transcript, &questions, &mut Quiet)
            .await
            .unwrap();
        assert_eq!(replay.report.totals, alone.report.totals, "memory {memory}");
        assert_eq!(requests.len(), questions.len());
        for (i, request) in requests.iter().enumerate() {
            let request = request.as_ref().unwrap();
            assert_eq!(request.index, i + 1);
            assert_eq!(request.messages.last().unwrap().text(), questions[i]);
            let text = request_text(request);
            for (j, other) in questions.iter().enumerate() {
                let in_transcript = session
                    .messages
                    .iter()
                    .any(|m| m.text().contains(other.as_str()));
                if j != i && !in_transcript && !questions[i].contains(other.as_str()) {
                    assert!(
                        !text.contains(other.as_str()),
                        "memory {memory}: question {j} leaked into {i}"
                    );
                }
            }
        }
    }
}

/// `KEEL_STYLES_FROM` (default 1000, the reporting seeds; 1 for the tuning seeds) and
/// `KEEL_STYLES_SEEDS` (default 2).
fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let from = var("KEEL_STYLES_FROM", *REPORTING_SEEDS.start());
    from..from + var("KEEL_STYLES_SEEDS", 2)
}

#[tokio::test]
async fn no_request_presents_a_corrected_value_as_current() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    for style in Style::ALL {
        for memory in [false, true] {
            let (mut found, mut total, mut stale, mut with_stale) = (0, 0, 0, 0);
            let (mut sent, mut baseline) = (0, 0);
            for seed in seeds() {
                let session = generate(style, seed);
                std::fs::write(&path, session.to_jsonl().unwrap()).unwrap();
                let prepared = prepare(&path, &options(memory)).await.unwrap();
                let report = evaluate(&prepared, &probes(&session), None).await.unwrap();
                found += report.totals.found;
                total += report.totals.probes;
                stale += report.totals.stale_as_current;
                with_stale += report.totals.with_stale;
                sent += report.totals.sent_tokens;
                baseline += report.totals.baseline_last100_tokens;
            }
            eprintln!(
                "{:<12} {:<13} seeds {}..{}: evidence {found}/{total} ({:.1} %), stale as current {stale} of {with_stale}, tokens {:.1} % of the last 100",
                style.as_str(),
                if memory {
                    "session-memory"
                } else {
                    "summarization"
                },
                seeds().start,
                seeds().end - 1,
                100.0 * found as f64 / total as f64,
                100.0 * sent as f64 / baseline as f64,
            );
            assert_eq!(stale, 0, "{style:?} memory={memory}");
        }
    }
}
