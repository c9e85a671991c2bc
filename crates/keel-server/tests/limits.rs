//! Limits that keep one request from stalling the server: the cap on the messages one
//! run input may carry.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::sync::Arc;

use axum::http::StatusCode;
use common::{call, json};
use keel_agent::Agent;
use keel_core::message::Message;
use keel_server::{ServerOptions, router_with};
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};

fn agent() -> Agent {
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("ok")));
    Agent::builder().model(Arc::new(model)).build().unwrap()
}

fn messages(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"role": "user", "content": format!("m{i}")}))
            .collect(),
    )
}

/// One message over the cap is a 422 whose detail names the field, the count and the
/// limit; exactly the cap runs.
#[tokio::test]
async fn an_input_over_max_input_messages_is_refused_with_422() {
    let app = router_with(
        agent(),
        ServerOptions {
            max_input_messages: 5,
            ..ServerOptions::default()
        },
    );
    let (_, body) = call(&app, "POST", "/threads", None, Some(json!({}))).await;
    let thread = json(&body)["thread_id"].as_str().unwrap().to_owned();
    let wait = format!("/threads/{thread}/runs/wait");
    let (status, text) = call(
        &app,
        "POST",
        &wait,
        None,
        Some(json!({"assistant_id": "agent", "input": {"messages": messages(6)}})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    let detail = json(&text)["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("input.messages"), "{detail}");
    assert!(detail.contains(" 6 "), "{detail}");
    assert!(detail.contains("at most 5"), "{detail}");
    // Nothing was written.
    let (_, text) = call(&app, "GET", &format!("/threads/{thread}/state"), None, None).await;
    assert!(
        json(&text)["values"]["messages"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{text}"
    );

    let (status, text) = call(
        &app,
        "POST",
        &wait,
        None,
        Some(json!({"assistant_id": "agent", "input": {"messages": messages(5)}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        json(&text)["messages"].as_array().unwrap().len(),
        6,
        "{text}"
    );
}

/// The default cap admits a large conversation and refuses the next message.
#[tokio::test]
async fn the_default_cap_is_ten_thousand_messages() {
    assert_eq!(ServerOptions::default().max_input_messages, 10_000);
    let app = router_with(
        agent(),
        ServerOptions {
            max_body_bytes: 8 * 1024 * 1024,
            ..ServerOptions::default()
        },
    );
    let (status, text) = call(
        &app,
        "POST",
        "/runs/wait",
        None,
        Some(json!({"assistant_id": "agent", "input": {"messages": messages(10_001)}})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(text.contains("10001"), "{text}");
}
