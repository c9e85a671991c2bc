//! `POST /threads/{id}/compact`: a compaction asked for by a user or a UI, through the
//! router on SQLite. Owner-scoped, refused while a run is active, and effective: the
//! next turn is sent `[summary, *recent]` although the thread is under its trigger.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use common::{ALICE, BOB, call, json, two_owner_router};
use keel_core::message::Message;
use keel_store::Store;
use keel_testkit::ScriptedModel;
use serde_json::json;

/// A trigger no short thread reaches: only a compaction asked for compacts.
const STACK: &str = r#"
name: agent
model: offline
middleware:
  - summarization:
      enabled: true
      model_name: null
      trigger:
        - type: tokens
          value: 100000
      keep:
        type: messages
        value: 2
"#;

async fn server() -> (Router, Arc<ScriptedModel>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("keel.db").display());
    let store = Store::connect(&url).await.unwrap();
    let model = ScriptedModel::from_fn(|request| {
        if request.internal {
            return Ok(Message::ai("- SUMMARY-OF-THE-THREAD"));
        }
        let said = request
            .messages
            .last()
            .map(|m| m.text().into_owned())
            .unwrap_or_default();
        Ok(Message::ai(format!("noted: {said}")))
    })
    .shared();
    (
        two_owner_router(STACK, store, model.clone()).await,
        model,
        dir,
    )
}

async fn say(app: &Router, thread: &str, text: &str) {
    let (status, body) = call(
        app,
        "POST",
        &format!("/threads/{thread}/runs/wait"),
        Some(ALICE),
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": text}]}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_asked_for_compacts_every_later_turn_for_its_owner_only() {
    let (app, model, _dir) = server().await;
    let (status, body) = call(
        &app,
        "POST",
        "/threads",
        Some(ALICE),
        Some(json!({"thread_id": "t1"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Before its first run there is nothing to compact.
    let (status, body) = call(&app, "POST", "/threads/t1/compact", Some(ALICE), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    for i in 0..4 {
        say(&app, "t1", &format!("message number {i}")).await;
    }
    // Another owner neither sees nor compacts it.
    let (status, _) = call(&app, "POST", "/threads/t1/compact", Some(BOB), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        model.requests().iter().all(|r| !r.internal),
        "no summary so far"
    );

    let (status, body) = call(&app, "POST", "/threads/t1/compact", Some(ALICE), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = json(&body);
    assert_eq!(done["compacted"], true, "{done}");
    let report = &done["reports"]["SummarizationMiddleware"];
    assert_eq!(report["action"], "compacted", "{report}");
    assert!(done["checkpoint"]["checkpoint_id"].is_string(), "{done}");
    assert_eq!(model.requests().iter().filter(|r| r.internal).count(), 1);

    // The state keeps every message and records the compaction.
    let (_, body) = call(&app, "GET", "/threads/t1/state", Some(ALICE), None).await;
    let state = json(&body);
    assert_eq!(
        state["values"]["messages"].as_array().unwrap().len(),
        8,
        "{state}"
    );
    assert_eq!(state["values"]["compacted_through"]["count"], 8, "{state}");

    // The next turn is sent compacted, from the summary written on request.
    let seen = model.requests().len();
    say(&app, "t1", "and one more").await;
    let requests = model.requests();
    let turn = requests[seen..].iter().find(|r| !r.internal).unwrap();
    assert_eq!(
        turn.messages[0].name(),
        Some("summary"),
        "{:?}",
        turn.messages[0]
    );
    assert!(turn.messages[0].text().contains("SUMMARY-OF-THE-THREAD"));
    assert!(
        turn.messages.len() < 9,
        "sent {} messages",
        turn.messages.len()
    );
    assert_eq!(
        requests.iter().filter(|r| r.internal).count(),
        1,
        "no new summary"
    );
}
