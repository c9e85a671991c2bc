//! Issue 17: an extractive fold fills the pinned keys the conversation states
//! recognisably (newest value wins) and leaves the others empty, with no model call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use common::*;
use keel_core::message::Message;
use keel_core::store::{ChatHistoryStore, StoredMessage};
use keel_memory::{FoldEngine, SessionCompressor, SessionMemorySettings};
use keel_store::memory::MemoryStore;
use keel_testkit::ScriptedModel;

#[tokio::test]
async fn extractive_folds_fill_stated_pinned_keys() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "pinned");
    // Message 0 says "project PRJ-123 on the EU cluster"; a later one moves the cluster.
    seed(store.as_ref(), &s, 0..30).await;
    let moved = StoredMessage {
        timestamp_ms: 1_700_000_000_000 + 30,
        message: Message::human("We moved: cluster: US-2 from now on.").with_id("m00030"),
    };
    store.append(&s, &[moved]).await.unwrap();
    seed(store.as_ref(), &s, 31..50).await;
    let settings = SessionMemorySettings::for_scope(s.clone()).with_pinned_keys([
        "project_id",
        "cluster",
        "customer",
    ]);
    let c = SessionCompressor::new(settings, store.clone(), store.clone())
        .unwrap()
        .with_engine(FoldEngine::Extractive);
    let model = Arc::new(ScriptedModel::new([]));
    let events = Events::new();
    let turn = c
        .prepare(&s, &input(), &dyn_model(&model), &events.writer)
        .await
        .unwrap();
    assert_eq!(model.calls(), 0);
    let pinned = &turn.state.pinned;
    assert_eq!(pinned["project_id"], "PRJ-123");
    assert_eq!(pinned["cluster"], "US-2", "newest value wins: {pinned:?}");
    assert!(!pinned.contains_key("customer"), "never stated: {pinned:?}");
    let folded = of_type(&events.custom(), "session_memory_folded")
        .last()
        .map(|e| e["pinned_keys"].clone())
        .unwrap();
    assert_eq!(folded, serde_json::json!(["project_id", "cluster"]));
}
