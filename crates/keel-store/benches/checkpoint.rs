//! One agent step's checkpoint (`put` of one new message after the head) on a thread of
//! 10 messages and on one of 10,000, for every checkpointer: the in-memory ones, SQLite
//! (WAL file) and PostgreSQL. A step stores what it changed, so the two sizes should
//! cost about the same (the goal: within 2x).
//!
//! ```text
//! cargo bench -p keel-store --bench checkpoint                              # memory, SQLite
//! scripts/postgres.sh -- cargo bench -p keel-store --features postgres --bench checkpoint
//! ```
//!
//! Built with `--features postgres` and without `KEEL_TEST_POSTGRES_URL`, PostgreSQL is
//! skipped with a note (scripts/postgres.sh provides a throwaway server), so that
//! `cargo test --workspace --all-targets` passes with no database.
#![allow(missing_docs)] // criterion's macros generate undocumented items
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code: fail loudly

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keel_agent::InMemoryCheckpointer;
use keel_core::message::{Message, ToolCall, new_id};
use keel_core::state::StateUpdate;
use keel_core::store::{CheckpointWrite, Checkpointer, PutOutcome};
use keel_store::Store;
use serde_json::json;

const SIZES: [usize; 2] = [10, 10_000];

/// A message of a coding-agent thread: about 300 bytes of JSON.
fn message(i: usize) -> Message {
    match i % 3 {
        0 => Message::human(format!(
            "step {i}: please look at src/module_{i}.rs and fix it"
        )),
        1 => Message::ai("Reading the file first.").with_tool_calls(vec![ToolCall::new(
            format!("c{i}"),
            "read_file",
            json!({"path": format!("src/module_{i}.rs")}),
        )]),
        _ => Message::tool(
            format!("c{}", i - 1),
            "fn main() { println!(\"hello\"); } // 40 lines",
        ),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn write(parent: Option<u64>, update: StateUpdate) -> CheckpointWrite {
    CheckpointWrite {
        parent,
        run_id: "bench".into(),
        node: "model".into(),
        update,
        created_at_ms: 0,
    }
}

/// Fills a fresh thread with `n` messages in one step; returns it and its head.
async fn thread_of(store: &dyn Checkpointer, n: usize) -> (String, u64) {
    let thread = format!("bench-{}", new_id());
    let out = store
        .put(
            &thread,
            write(None, StateUpdate::messages((0..n).map(message))),
        )
        .await
        .unwrap();
    let PutOutcome::Saved { seq } = out else {
        panic!("{out:?}")
    };
    (thread, seq)
}

fn step(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: Arc<dyn Checkpointer>) {
    let mut group = c.benchmark_group("checkpoint_step");
    group.sample_size(50);
    group.measurement_time(Duration::from_secs(5));
    for n in SIZES {
        let (thread, head) = rt.block_on(thread_of(&*store, n));
        let head = AtomicU64::new(head);
        group.bench_function(BenchmarkId::new(name, n), |b| {
            b.to_async(rt).iter(|| async {
                let parent = head.load(Ordering::SeqCst);
                let answer = Message::ai("Fixed: the loop bound was off by one.").with_id(new_id());
                let out = store
                    .put(
                        &thread,
                        write(Some(parent), StateUpdate::messages([answer])),
                    )
                    .await
                    .unwrap();
                assert_eq!(out, PutOutcome::Saved { seq: parent + 1 });
                head.store(parent + 1, Ordering::SeqCst);
            });
        });
    }
    group.finish();
}

fn memory(c: &mut Criterion) {
    let rt = runtime();
    step(
        c,
        &rt,
        "in_memory_checkpointer",
        Arc::new(InMemoryCheckpointer::new()),
    );
    step(c, &rt, "memory_store", Arc::new(Store::memory()));
}

fn sqlite(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let store = rt.block_on(Store::connect(&url)).unwrap();
    step(c, &rt, "sqlite", Arc::new(store));
}

#[cfg(feature = "postgres")]
fn postgres(c: &mut Criterion) {
    let rt = runtime();
    let Ok(url) = std::env::var("KEEL_TEST_POSTGRES_URL") else {
        println!("checkpoint/postgres: skipped, KEEL_TEST_POSTGRES_URL is not set");
        return;
    };
    let store = rt.block_on(Store::connect(&url)).unwrap();
    step(c, &rt, "postgres", Arc::new(store));
}

#[cfg(not(feature = "postgres"))]
fn postgres(_: &mut Criterion) {}

criterion_group!(benches, memory, sqlite, postgres);
criterion_main!(benches);
