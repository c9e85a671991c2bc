//! 64 concurrent agent runs on one thread under each multitask strategy, on the
//! in-memory checkpointers and SQLite (PostgreSQL: `tests/postgres.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use keel_agent::InMemoryCheckpointer;
use keel_store::memory::MemoryStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_strategy_keeps_every_message_in_memory() {
    common::race_every_strategy(Arc::new(InMemoryCheckpointer::with_limits(0, 16))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_strategy_keeps_every_message_in_the_memory_store() {
    common::race_every_strategy(Arc::new(MemoryStore::new())).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_strategy_keeps_every_message_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("keel.db").display());
    let store = keel_store::sqlite::SqliteStore::connect(&url)
        .await
        .unwrap();
    common::race_every_strategy(Arc::new(store)).await;
}
