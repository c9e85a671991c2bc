//! `history` and `state/{checkpoint_id}` read only the checkpoints they answer with,
//! through `Checkpointer::history_page` / `checkpoint_at`, never the whole history.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use axum::Router;
use axum::http::StatusCode;
use common::{call, json};
use keel_agent::{Agent, InMemoryCheckpointer};
use keel_core::message::Message;
use keel_core::store::{Checkpoint, CheckpointWrite, Checkpointer, PutOutcome, StoreError};
use keel_server::router;
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};

/// A checkpointer whose whole-history read fails, counting what the pages read.
struct NoWholeHistory {
    inner: InMemoryCheckpointer,
    materialised: AtomicUsize,
}

#[async_trait]
impl Checkpointer for NoWholeHistory {
    async fn put(&self, t: &str, w: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        self.inner.put(t, w).await
    }
    async fn latest(&self, t: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.inner.latest(t).await
    }
    async fn history(&self, _: &str) -> Result<Vec<Checkpoint>, StoreError> {
        Err(StoreError::Backend("the whole history was read".into()))
    }
    async fn history_page(
        &self,
        t: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let page = self.inner.history_page(t, before, limit).await?;
        self.materialised.fetch_add(page.len(), Ordering::Relaxed);
        Ok(page)
    }
    async fn checkpoint_at(&self, t: &str, seq: u64) -> Result<Option<Checkpoint>, StoreError> {
        let cp = self.inner.checkpoint_at(t, seq).await?;
        self.materialised
            .fetch_add(usize::from(cp.is_some()), Ordering::Relaxed);
        Ok(cp)
    }
    async fn delete_thread(&self, t: &str) -> Result<u64, StoreError> {
        self.inner.delete_thread(t).await
    }
}

/// A thread of `runs` runs (two checkpoints each: `input`, `model`).
async fn thread_with_runs(runs: usize) -> (Router, String, Arc<NoWholeHistory>) {
    let checkpointer = Arc::new(NoWholeHistory {
        inner: InMemoryCheckpointer::with_limits(0, 16),
        materialised: AtomicUsize::new(0),
    });
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("ok")));
    let agent = Agent::builder()
        .model(Arc::new(model))
        .checkpointer(checkpointer.clone())
        .build()
        .unwrap();
    let app = router(agent);
    let (_, body) = call(&app, "POST", "/threads", None, Some(json!({}))).await;
    let thread = json(&body)["thread_id"].as_str().unwrap().to_owned();
    for i in 0..runs {
        let (status, text) = call(
            &app,
            "POST",
            &format!("/threads/{thread}/runs/wait"),
            None,
            Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": format!("q{i}")}]}})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
    }
    (app, thread, checkpointer)
}

fn steps(states: &Value) -> Vec<i64> {
    states
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["metadata"]["step"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn history_reads_only_the_page_it_returns() {
    let (app, thread, checkpointer) = thread_with_runs(25).await;
    let history = format!("/threads/{thread}/history");
    checkpointer.materialised.store(0, Ordering::Relaxed);
    let (status, text) = call(&app, "POST", &history, None, Some(json!({"limit": 1}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(steps(&json(&text)), [49]);
    assert_eq!(checkpointer.materialised.load(Ordering::Relaxed), 1);

    let before = json(&text)[0]["checkpoint"]["checkpoint_id"].clone();
    let (_, text) = call(
        &app,
        "POST",
        &history,
        None,
        Some(json!({"limit": 3, "before": before})),
    )
    .await;
    assert_eq!(steps(&json(&text)), [48, 47, 46]);
    let (_, text) = call(
        &app,
        "GET",
        &format!("{history}?limit=2&before=1"),
        None,
        None,
    )
    .await;
    // The thread's first checkpoint is the empty step -1.
    assert_eq!(steps(&json(&text)), [-1]);

    // A metadata filter pages through the history until enough match (inputs are the
    // even steps), across more than one page.
    let (_, text) = call(
        &app,
        "POST",
        &history,
        None,
        Some(json!({"limit": 20, "metadata": {"source": "input"}})),
    )
    .await;
    let want: Vec<i64> = (0..25).rev().map(|i| 2 * i).take(20).collect();
    assert_eq!(steps(&json(&text)), want);
    let (_, text) = call(
        &app,
        "POST",
        &history,
        None,
        Some(json!({"limit": 100, "metadata": {"source": "input"}})),
    )
    .await;
    // Every run's input, and the empty first checkpoint.
    assert_eq!(steps(&json(&text)).len(), 26);
    let (_, text) = call(
        &app,
        "POST",
        &history,
        None,
        Some(json!({"limit": 5, "metadata": {"source": "nothing"}})),
    )
    .await;
    assert_eq!(json(&text), json!([]));
}

#[tokio::test]
async fn state_at_a_checkpoint_reads_that_checkpoint_only() {
    let (app, thread, checkpointer) = thread_with_runs(3).await;
    checkpointer.materialised.store(0, Ordering::Relaxed);
    let id = "00000000-0000-4000-8000-000000000003";
    let (status, text) = call(
        &app,
        "GET",
        &format!("/threads/{thread}/state/{id}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let state = json(&text);
    assert_eq!(state["checkpoint"]["checkpoint_id"], id);
    // Seq 3 (after the empty first checkpoint) is the second run's input: q0, its
    // answer, q1.
    assert_eq!(state["values"]["messages"].as_array().unwrap().len(), 3);
    assert_eq!(checkpointer.materialised.load(Ordering::Relaxed), 1);
    let (status, _) = call(
        &app,
        "GET",
        &format!("/threads/{thread}/state/00000000-0000-4000-8000-000000000099"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
