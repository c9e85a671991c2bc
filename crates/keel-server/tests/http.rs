//! The router in process (tower's `oneshot`, no socket), with keel-testkit's scripted
//! model: the protocol's shapes, streaming, reconnecting, auth scoping and error shapes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{call, events, json};
use keel_agent::Agent;
use keel_core::message::Message;
use keel_server::ApiKeys;
use keel_server::{ServerOptions, router, router_with};
use keel_testkit::ScriptedModel;
use serde_json::json;
use tower::ServiceExt;

fn agent() -> Agent {
    let model = ScriptedModel::from_fn(|request| {
        let said = request
            .messages
            .last()
            .map(|m| m.text().into_owned())
            .unwrap_or_default();
        Ok(Message::ai(format!("echo: {said}")))
    });
    Agent::builder().model(Arc::new(model)).build().unwrap()
}

#[tokio::test]
async fn a_streamed_run_sends_metadata_values_and_end_then_state_has_the_answer() {
    let app = router(agent());
    let (status, body) = call(&app, "POST", "/threads", None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let thread = json(&body)["thread_id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{thread}/runs/stream"),
        None,
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "ping"}]}, "stream_mode": ["values", "updates"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let events = events(&body);
    let names: Vec<&str> = events.iter().map(|(e, _, _)| e.as_str()).collect();
    assert_eq!(names, ["metadata", "values", "updates", "values", "end"]);
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, (_, id, _))| *id == i as u64)
    );
    assert_eq!(events[2].2["model"]["messages"][0]["content"], "echo: ping");
    assert_eq!(events[4].2["status"], "success");

    let (_, body) = call(&app, "GET", &format!("/threads/{thread}/state"), None, None).await;
    let state = json(&body);
    let kinds: Vec<&str> = state["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["human", "ai"]);

    // Reconnecting with Last-Event-ID replays only what follows.
    let run_id = events[0].2["run_id"].as_str().unwrap();
    let request = Request::get(format!("/threads/{thread}/runs/{run_id}/stream"))
        .header("last-event-id", "2")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .unwrap();
    let replay = self::events(std::str::from_utf8(&bytes).unwrap());
    assert_eq!(
        replay.iter().map(|(_, id, _)| *id).collect::<Vec<_>>(),
        [3, 4]
    );
}

#[tokio::test]
async fn bad_input_is_answered_in_the_error_shape() {
    let app = router(agent());
    let (_, body) = call(&app, "POST", "/threads", None, Some(json!({}))).await;
    let thread = json(&body)["thread_id"].as_str().unwrap().to_owned();
    let runs = format!("/threads/{thread}/runs");
    for (body, status) in [
        (json!({"input": {}}), StatusCode::UNPROCESSABLE_ENTITY),
        (
            json!({"assistant_id": "agent", "input": {"messages": [{"role": "robot"}]}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"assistant_id": "agent", "input": {"todo": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"assistant_id": "agent", "multitask_strategy": "sometimes"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        // langgraph-api answers 422 to an assistant_id that is neither a UUID nor a
        // graph, 404 to a UUID of no assistant.
        (
            json!({"assistant_id": "other"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"assistant_id": "5f1a0c39-9bd5-4c3e-9d55-0c8cc2d6a7e1"}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"assistant_id": "agent", "command": {"resume": 1}}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (got, text) = call(&app, "POST", &runs, None, Some(body.clone())).await;
        assert_eq!(got, status, "{body} -> {text}");
        assert!(json(&text)["detail"].is_string(), "{text}");
    }
    let (status, text) = call(&app, "GET", "/threads/nope/state", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(json(&text)["detail"], "Thread nope not found");
    let (status, text) = call(&app, "GET", "/no/such/route", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(json(&text)["detail"].is_string());
}

#[tokio::test]
async fn an_owner_never_sees_another_owners_threads() {
    let keys = ApiKeys::new(HashMap::from([
        ("alice-key-1".to_owned(), "alice".to_owned()),
        ("bob-key-22".to_owned(), "bob".to_owned()),
    ]));
    let app = router_with(
        agent(),
        ServerOptions {
            api_keys: keys,
            ..ServerOptions::default()
        },
    );
    let (status, _) = call(&app, "POST", "/threads", None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = call(&app, "GET", "/ok", None, None).await;
    assert_eq!(status, StatusCode::OK, "health stays open");
    let (_, body) = call(
        &app,
        "POST",
        "/threads",
        Some("alice-key-1"),
        Some(json!({})),
    )
    .await;
    let thread = json(&body)["thread_id"].as_str().unwrap().to_owned();
    for (method, path) in [
        ("GET", format!("/threads/{thread}")),
        ("GET", format!("/threads/{thread}/state")),
        ("GET", format!("/threads/{thread}/runs")),
        ("DELETE", format!("/threads/{thread}")),
    ] {
        let (status, _) = call(&app, method, &path, Some("bob-key-22"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
    }
    let (_, body) = call(
        &app,
        "POST",
        "/threads/search",
        Some("bob-key-22"),
        Some(json!({})),
    )
    .await;
    assert_eq!(json(&body), json!([]));
    let (status, _) = call(
        &app,
        "GET",
        &format!("/threads/{thread}"),
        Some("alice-key-1"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_body_over_the_cap_is_refused_with_413() {
    let app = router_with(
        agent(),
        ServerOptions {
            max_body_bytes: 1024,
            ..ServerOptions::default()
        },
    );
    let big = json!({"metadata": {"x": "y".repeat(4096)}});
    let (status, text) = call(&app, "POST", "/threads", None, Some(big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    assert!(json(&text)["detail"].as_str().unwrap().contains("1024"));
}
