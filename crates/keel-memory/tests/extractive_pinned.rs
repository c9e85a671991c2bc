//! An extractive fold fills the pinned keys the conversation states recognisably
//! (newest value wins, whatever the wording of the correction) and leaves the others
//! empty, with no model call.
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

/// A later fold's correction that names no key ("eu-central-1 instead") replaces the
/// pinned value of the same shape; a region is read from an ordinary sentence.
#[tokio::test]
async fn a_correction_in_a_later_fold_replaces_a_pinned_value() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "pinned-correction");
    let say = |i: usize, text: &str| StoredMessage {
        timestamp_ms: 1_700_000_000_000 + i as i64,
        message: Message::human(text).with_id(format!("m{i:05}")),
    };
    seed(store.as_ref(), &s, 0..30).await;
    store
        .append(&s, &[say(30, "We moved to eu-west-1 last week.")])
        .await
        .unwrap();
    seed(store.as_ref(), &s, 31..50).await;
    let settings =
        SessionMemorySettings::for_scope(s.clone()).with_pinned_keys(["region", "cluster"]);
    let c = SessionCompressor::new(settings, store.clone(), store.clone())
        .unwrap()
        .with_engine(FoldEngine::Extractive);
    let model = Arc::new(ScriptedModel::new([]));
    let events = Events::new();
    let turn = c
        .prepare(&s, &input(), &dyn_model(&model), &events.writer)
        .await
        .unwrap();
    assert_eq!(
        turn.state.pinned["region"], "eu-west-1",
        "{:?}",
        turn.state.pinned
    );
    store
        .append(&s, &[say(50, "Change of plan: eu-central-1 instead.")])
        .await
        .unwrap();
    seed(store.as_ref(), &s, 51..100).await;
    let turn = c
        .prepare(&s, &input(), &dyn_model(&model), &events.writer)
        .await
        .unwrap();
    assert_eq!(model.calls(), 0);
    let pinned = &turn.state.pinned;
    assert_eq!(pinned["region"], "eu-central-1", "{pinned:?}");
    assert_eq!(pinned["cluster"], "EU", "{pinned:?}");
}
