//! What keeps one request from stalling the server: the cap on the messages one run
//! input may carry, and a busy database answered as a retryable 503.

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

/// Another connection holding SQLite's write lock makes `POST /threads` wait (the busy
/// timeout) rather than fail; held past that wait, the answer is a 503 with
/// `Retry-After`, never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_makes_writers_wait_then_answers_503() {
    use sqlx::Connection as _;
    let path = std::env::temp_dir().join(format!("keel-busy-{}.db", uuid::Uuid::new_v4()));
    let url = format!("sqlite://{}", path.display());
    let store = keel_store::Store::connect(&url).await.unwrap();
    let registry = keel_server::Registry::for_store(&store).await.unwrap();
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("ok")));
    let agent = Agent::builder()
        .model(Arc::new(model))
        .checkpointer(Arc::new(store))
        .build()
        .unwrap();
    let app = router_with(
        agent,
        ServerOptions {
            registry: Some(Arc::new(registry)),
            ..ServerOptions::default()
        },
    );
    let mut locker = sqlx::SqliteConnection::connect(&url).await.unwrap();

    // Held for half a second: the request waits for the lock and succeeds.
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut locker)
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        sqlx::query("COMMIT").execute(&mut locker).await.unwrap();
        locker
    });
    let (status, text) = call(&app, "POST", "/threads", None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let mut locker = release.await.unwrap();

    // Held past the busy timeout: 503 with Retry-After and a detail.
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut locker)
        .await
        .unwrap();
    let request = axum::http::Request::post("/threads")
        .header("content-type", "application/json")
        .body(axum::body::Body::from("{}"))
        .unwrap();
    let response = tower::ServiceExt::oneshot(app.clone(), request)
        .await
        .unwrap();
    let status = response.status();
    let retry_after = response.headers().get("retry-after").cloned();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(retry_after.is_some(), "{text}");
    assert!(
        json(&text)["detail"].as_str().unwrap().contains("busy"),
        "{text}"
    );
    sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();

    let (status, text) = call(&app, "POST", "/threads", None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    drop(locker);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
