//! Time and peak memory of reading one checkpoint of a long thread on SQLite: the whole
//! history (what serving `POST /history {"limit": 1}` used to read) against
//! `history_page` and `checkpoint_at`, which read only what they return.
//!
//! ```text
//! cargo run --release -p keel-store --example history_read -- history 600
//! cargo run --release -p keel-store --example history_read -- page 600
//! cargo run --release -p keel-store --example history_read -- at 600
//! cargo run --release -p keel-store --example history_read -- input 10000
//! scripts/postgres.sh -- sh -c 'KEEL_HISTORY_URL=$KEEL_TEST_POSTGRES_URL \
//!     cargo run --release -p keel-store --features postgres --example history_read -- page 600'
//! ```
//!
//! Builds a thread of N steps of one message each (about 300 bytes of JSON per message)
//! in a temporary SQLite file, then reads it once the chosen way and prints the time and
//! the process's peak resident memory before and after the read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a measuring tool: fail loudly

use std::time::Instant;

use keel_core::message::{Message, ToolCall};
use keel_core::state::StateUpdate;
use keel_core::store::{CheckpointWrite, Checkpointer};
use keel_store::Store;
use serde_json::json;

fn message(i: usize) -> Message {
    match i % 2 {
        0 => Message::human(format!(
            "step {i}: please look at src/module_{i}.rs and fix the failing test in it"
        )),
        _ => Message::ai("Reading the file first.").with_tool_calls(vec![ToolCall::new(
            format!("c{i}"),
            "read_file",
            json!({"path": format!("src/module_{i}.rs")}),
        )]),
    }
    .with_id(format!("m{i}"))
}

/// Peak resident memory of this process, in MiB (Linux).
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "page".into());
    let n: usize = args.next().map_or(600, |a| a.parse().unwrap());
    let path = std::env::temp_dir().join(format!("keel-history-{}.db", std::process::id()));
    // KEEL_HISTORY_URL measures another database (postgres://...) instead.
    let url = std::env::var("KEEL_HISTORY_URL")
        .unwrap_or_else(|_| format!("sqlite://{}", path.display()));
    let store = Store::connect(&url).await.unwrap();
    let t = format!("t-{}", std::process::id());
    let t = t.as_str();
    if mode == "input" {
        // One step carrying n messages: how long its write transaction holds the lock.
        let start = Instant::now();
        store
            .put(
                t,
                CheckpointWrite {
                    parent: None,
                    run_id: "r".into(),
                    node: "input".into(),
                    update: StateUpdate::messages((0..n).map(message)),
                    created_at_ms: 0,
                },
            )
            .await
            .unwrap();
        println!(
            "input of {n} messages written in {:.1} ms",
            start.elapsed().as_secs_f64() * 1000.0
        );
        store.delete_thread(t).await.unwrap();
        drop(store);
        remove(&path);
        return;
    }
    for i in 0..n {
        store
            .put(
                t,
                CheckpointWrite {
                    parent: i.checked_sub(1).map(|p| p as u64),
                    run_id: "r".into(),
                    node: "model".into(),
                    update: StateUpdate::messages([message(i)]),
                    created_at_ms: 0,
                },
            )
            .await
            .unwrap();
    }
    let before = peak_mib();
    let start = Instant::now();
    let (seq, messages) = match mode.as_str() {
        "history" => {
            let all = store.history(t).await.unwrap();
            let cp = all.into_iter().next_back().unwrap();
            (cp.seq, cp.messages.len())
        }
        "page" => {
            let cp = store.history_page(t, None, 1).await.unwrap().remove(0);
            (cp.seq, cp.messages.len())
        }
        "at" => {
            let cp = store.checkpoint_at(t, n as u64 / 2).await.unwrap().unwrap();
            (cp.seq, cp.messages.len())
        }
        other => panic!("unknown mode {other:?}: history, page, at or input"),
    };
    let took = start.elapsed();
    println!(
        "{mode} on {n} steps: seq {seq} ({messages} messages) in {:.1} ms; peak RSS {:.1} MiB before the read, {:.1} MiB after",
        took.as_secs_f64() * 1000.0,
        before,
        peak_mib()
    );
    store.delete_thread(t).await.unwrap();
    drop(store);
    remove(&path);
}

fn remove(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
