//! Session-memory state: load and compare-and-swap save latency on SQLite (WAL file) and
//! PostgreSQL, the cost of recording one chat message (`append_stamped`), and saves per second with 32 concurrent sessions on PostgreSQL.
//!
//! ```text
//! cargo bench -p keel-store --bench state                                   # SQLite only
//! scripts/postgres.sh -- cargo bench -p keel-store --features postgres --bench state
//! ```
//!
//! Built with `--features postgres` and without `KEEL_TEST_POSTGRES_URL`, PostgreSQL is
//! skipped with a note (scripts/postgres.sh provides a throwaway server), so that
//! `cargo test --workspace --all-targets` passes with no database.
#![allow(missing_docs)] // criterion's macros generate undocumented items
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code: fail loudly

#[cfg(feature = "postgres")]
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[cfg(feature = "postgres")]
use criterion::Throughput;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keel_core::message::Message;
use keel_core::store::{
    ChatHistoryStore, Cursor, SaveOutcome, SessionMemoryState, SessionMemoryStore, SessionScope,
};
use keel_store::Store;
use serde_json::json;

/// A state the size a real fold leaves: a 300-word summary and a few pinned keys.
fn realistic_state() -> SessionMemoryState {
    let mut state = SessionMemoryState {
        summary: "- the user works on project PRJ-123 on the EU cluster; ".repeat(30),
        covered_until: Some(Cursor {
            timestamp_ms: 1_700_000_000_000,
            message_id: "0193a0c4-7e4b-7d2e-9c1f-3b5d2a8e6f10".into(),
        }),
        absorbed_count: 120,
        summary_model: Some("gpt-4o-mini".into()),
        ..Default::default()
    };
    state.pinned.insert("project_id".into(), json!("PRJ-123"));
    state.pinned.insert("cluster".into(), json!("EU"));
    state.pinned.insert("customer".into(), json!("ACME GmbH"));
    state
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Load and save latency of one scope on one store.
fn load_and_save(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: Store) {
    let scope = SessionScope::new("bench", "user", keel_core::message::new_id(), "");
    let state = realistic_state();
    let version = AtomicU64::new(0);
    rt.block_on(async {
        assert_eq!(
            store.save_state(&scope, &state, 0).await.unwrap(),
            SaveOutcome::Saved { version: 1 }
        );
    });
    version.store(1, Ordering::SeqCst);

    let mut group = c.benchmark_group("state");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(5));
    group.bench_function(BenchmarkId::new("load", name), |b| {
        b.to_async(rt)
            .iter(|| async { store.get_state(&scope).await.unwrap().unwrap() });
    });
    group.bench_function(BenchmarkId::new("save", name), |b| {
        b.to_async(rt).iter(|| async {
            let v = version.load(Ordering::SeqCst);
            let out = store.save_state(&scope, &state, v).await.unwrap();
            assert_eq!(out, SaveOutcome::Saved { version: v + 1 });
            version.store(v + 1, Ordering::SeqCst);
        });
    });
    // What session memory pays to record a turn: one message appended (stamped by the
    // store after its newest row), on a history that grows as the bench runs.
    let history = SessionScope::new("bench", "user", keel_core::message::new_id(), "");
    let next = AtomicU64::new(0);
    group.bench_function(BenchmarkId::new("record_one", name), |b| {
        b.to_async(rt).iter(|| async {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let m = Message::ai("The pods restarted after the config change; the job is green.")
                .with_id(format!("m{i:08}"));
            let stored = store.append_stamped(&history, &[m], 0).await.unwrap();
            assert_eq!(stored.len(), 1);
        });
    });
    group.finish();
}

fn sqlite(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    );
    let store = rt.block_on(Store::connect(&url)).unwrap();
    load_and_save(c, &rt, "sqlite_file_wal", store);
}

#[cfg(feature = "postgres")]
fn postgres(c: &mut Criterion) {
    let Ok(url) = std::env::var("KEEL_TEST_POSTGRES_URL") else {
        println!(
            "state/postgres: skipped, KEEL_TEST_POSTGRES_URL is not set (run `scripts/postgres.sh \
             -- cargo bench -p keel-store --features postgres --bench state`)"
        );
        return;
    };
    let rt = runtime();
    let store = rt.block_on(Store::connect(&url)).unwrap();
    load_and_save(c, &rt, "postgres", store.clone());

    // 32 sessions, each a task doing load -> CAS save: one iteration = 32 saves, so
    // criterion's throughput line reads as saves per second.
    const SESSIONS: usize = 32;
    let store = Arc::new(store);
    let scopes: Arc<Vec<SessionScope>> = Arc::new(
        (0..SESSIONS)
            .map(|i| {
                SessionScope::new(
                    "bench-32",
                    "user",
                    format!("{}-{i}", keel_core::message::new_id()),
                    "",
                )
            })
            .collect(),
    );
    let mut group = c.benchmark_group("concurrent_sessions");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(SESSIONS as u64));
    group.bench_function(BenchmarkId::new("load_then_save", "postgres_32"), |b| {
        b.to_async(&rt).iter(|| {
            let store = Arc::clone(&store);
            let scopes = Arc::clone(&scopes);
            async move {
                let mut tasks = Vec::with_capacity(SESSIONS);
                for i in 0..SESSIONS {
                    let store = Arc::clone(&store);
                    let scopes = Arc::clone(&scopes);
                    tasks.push(tokio::spawn(async move {
                        let scope = &scopes[i];
                        let current = store.get_state(scope).await.unwrap().unwrap_or_default();
                        let next = SessionMemoryState {
                            absorbed_count: current.absorbed_count + 1,
                            ..realistic_state()
                        };
                        let out = store
                            .save_state(scope, &next, current.version)
                            .await
                            .unwrap();
                        assert_ne!(out, SaveOutcome::Conflict, "one writer per session");
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            }
        });
    });
    group.finish();
}

#[cfg(not(feature = "postgres"))]
fn postgres(_: &mut Criterion) {
    eprintln!(
        "PostgreSQL benches are compiled out; run `scripts/postgres.sh -- cargo bench -p \
         keel-store --features postgres --bench state`"
    );
}

criterion_group!(benches, sqlite, postgres);
criterion_main!(benches);
