//! What a hostile page or client sends, answered with a clear 4xx: cross-origin and
//! DNS-rebinding requests to a server without keys, bodies that are not JSON objects,
//! ids no backend can store, oversized metadata, event ids without a successor.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::{call, json};
use keel_agent::Agent;
use keel_core::message::Message;
use keel_server::ApiKeys;
use keel_server::origin::OriginPolicy;
use keel_server::{ServerOptions, router, router_with};
use keel_testkit::ScriptedModel;
use serde_json::json;
use tower::ServiceExt;

fn agent() -> Agent {
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("ok")));
    Agent::builder().model(Arc::new(model)).build().unwrap()
}

/// Sends a raw request and returns the status, headers and body.
async fn raw(app: &Router, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 24).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

fn post(path: &str, content_type: Option<&str>, body: &str) -> Request<Body> {
    let mut request = Request::post(path).header(header::HOST, "127.0.0.1:2024");
    if let Some(t) = content_type {
        request = request.header(header::CONTENT_TYPE, t);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}

#[tokio::test]
async fn without_keys_foreign_origins_and_hosts_are_refused() {
    let app = router(agent());
    // A page on another site: refused before anything runs, preflight or not.
    let mut request = post("/threads", Some("application/json"), "{}");
    request
        .headers_mut()
        .insert(header::ORIGIN, "https://evil.example".parse().unwrap());
    let (status, _, body) = raw(&app, request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("--cors-origin"), "{body}");
    let preflight = Request::builder()
        .method("OPTIONS")
        .uri("/threads")
        .header(header::HOST, "127.0.0.1:2024")
        .header(header::ORIGIN, "https://evil.example")
        .header("access-control-request-method", "POST")
        .body(Body::empty())
        .unwrap();
    let (_, headers, _) = raw(&app, preflight).await;
    assert!(headers.get("access-control-allow-origin").is_none());
    // DNS rebinding: the attacker's name resolved to 127.0.0.1.
    let request = Request::get("/threads/search")
        .header(header::HOST, "rebind.evil.example:2024")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = raw(&app, request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("--allowed-hosts"), "{body}");
    // A text/plain form post needs no preflight, so it must not start anything.
    let (status, _, body) = raw(
        &app,
        post(
            "/runs/wait",
            Some("text/plain"),
            r#"{"assistant_id":"agent","input":{"messages":[]}}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    let (status, _, body) = raw(&app, post("/threads", None, "{}")).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    // Loopback pages and hosts work, and the answer carries their origin.
    let mut request = post("/threads", Some("application/json; charset=utf-8"), "{}");
    request
        .headers_mut()
        .insert(header::ORIGIN, "http://localhost:5173".parse().unwrap());
    let (status, headers, body) = raw(&app, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://localhost:5173"
    );
}

#[tokio::test]
async fn flags_widen_the_policy_and_keys_open_origins() {
    let widened = router_with(
        agent(),
        ServerOptions {
            origins: OriginPolicy {
                cors_origins: vec!["https://ui.example".into()],
                allowed_hosts: vec!["agents.internal".into()],
            },
            ..ServerOptions::default()
        },
    );
    let mut request = post("/threads", Some("application/json"), "{}");
    request
        .headers_mut()
        .insert(header::ORIGIN, "https://ui.example".parse().unwrap());
    request
        .headers_mut()
        .insert(header::HOST, "agents.internal:2024".parse().unwrap());
    let (status, _, body) = raw(&widened, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let keyed = router_with(
        agent(),
        ServerOptions {
            api_keys: ApiKeys::new(HashMap::from([("alice-key-0001".into(), "alice".into())])),
            ..ServerOptions::default()
        },
    );
    let mut request = post("/threads", Some("application/json"), "{}");
    request
        .headers_mut()
        .insert(header::ORIGIN, "https://anywhere.example".parse().unwrap());
    request
        .headers_mut()
        .insert(header::HOST, "agents.example".parse().unwrap());
    request
        .headers_mut()
        .insert("x-api-key", "alice-key-0001".parse().unwrap());
    let (status, _, body) = raw(&keyed, request).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "with keys any origin may call: {body}"
    );
}

#[tokio::test]
async fn the_chat_page_cannot_be_framed() {
    let app = router(agent());
    let request = Request::get("/")
        .header(header::HOST, "127.0.0.1:2024")
        .body(Body::empty())
        .unwrap();
    let (status, headers, _) = raw(&app, request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-frame-options"], "DENY");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
}

#[tokio::test]
async fn bodies_ids_metadata_and_event_ids_out_of_range_get_422() {
    let app = router(agent());
    // A JSON array reads as a struct's fields to serde: refused.
    let (status, _, body) = raw(
        &app,
        post("/threads", Some("application/json"), r#"[null, {"a": 1}]"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("JSON object"), "{body}");
    // NUL (and any control character) in a thread id: refused on create and on read,
    // never stored to answer 500 later.
    let (status, body) = call(
        &app,
        "POST",
        "/threads",
        None,
        Some(json!({"thread_id": "a\u{0}b"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("U+0000"), "{body}");
    let (status, body) = call(&app, "GET", "/threads/a%00b", None, None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // Metadata over 64 KiB, on create and by a patch that would grow it past the cap.
    let big = "m".repeat(70 * 1024);
    let (status, body) = call(
        &app,
        "POST",
        "/threads",
        None,
        Some(json!({"metadata": {"blob": big}})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("65536"), "{body}");
    let half = "m".repeat(40 * 1024);
    let (status, body) = call(
        &app,
        "POST",
        "/threads",
        None,
        Some(json!({"thread_id": "meta", "metadata": {"a": half}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(
        &app,
        "PATCH",
        "/threads/meta",
        None,
        Some(json!({"metadata": {"b": half}})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // The largest event id has no successor: 422, not a wrap to a full replay.
    let (status, _) = call(
        &app,
        "POST",
        "/threads/meta/runs/wait",
        None,
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = call(&app, "GET", "/threads/meta/runs", None, None).await;
    let run = json(&body)[0]["run_id"].as_str().unwrap().to_owned();
    let request = Request::get(format!("/threads/meta/runs/{run}/stream"))
        .header(header::HOST, "127.0.0.1:2024")
        .header("last-event-id", u64::MAX.to_string())
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = raw(&app, request).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}
