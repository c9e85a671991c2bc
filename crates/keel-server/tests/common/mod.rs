//! Helpers shared by the in-process router tests: one request, JSON, SSE parsing.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

/// Sends one request (with `x-api-key` when given) and returns the status and body.
pub async fn call(
    app: &Router,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, String) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    let body = match body {
        Some(v) => {
            request = request.header("content-type", "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    let response = app
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// Parses JSON, loudly.
pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// `(event, id, data)` of an SSE body.
pub fn events(body: &str) -> Vec<(String, u64, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut event = None;
            let mut id = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse().ok();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            Some((event?, id?, serde_json::from_str(&data).ok()?))
        })
        .collect()
}

/// Alice's and Bob's API keys in [`two_owner_router`].
pub const ALICE: &str = "alice-key-0001";
/// Bob's key.
pub const BOB: &str = "bob-key-00002";

/// A router serving the agent of `stack` (a keel.yaml) on `store`, answered by `model`,
/// for the owners `alice` and `bob` (keys [`ALICE`], [`BOB`]).
pub async fn two_owner_router(
    stack: &str,
    store: keel_store::Store,
    model: Arc<keel_testkit::ScriptedModel>,
) -> Router {
    let registry = keel_server::Registry::for_store(&store).await.unwrap();
    let agent = keel_server::config::StackConfig::from_yaml_str(stack)
        .unwrap()
        .build_with_model(Arc::new(store), model, false)
        .unwrap();
    let options = keel_server::ServerOptions {
        api_keys: keel_server::ApiKeys::new(HashMap::from([
            (ALICE.to_owned(), "alice".to_owned()),
            (BOB.to_owned(), "bob".to_owned()),
        ])),
        registry: Some(Arc::new(registry)),
        ..keel_server::ServerOptions::default()
    };
    keel_server::router_with(agent, options)
}
