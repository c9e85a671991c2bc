//! One run whose input carries N messages, on a SQLite file, while another client keeps
//! creating threads: how long the run takes, and what the other client sees meanwhile
//! (every `POST /threads` should answer 200, none 500).
//!
//! ```sh
//! cargo run --release -p keel-server --example large_input -- 10000
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a measuring tool: fail loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_server::Registry;
use keel_server::{ServerOptions, router_with};
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn post(app: &axum::Router, path: &str, body: &Value) -> (u16, Duration) {
    let start = Instant::now();
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let _ = axum::body::to_bytes(response.into_body(), 1 << 26).await;
    (status, start.elapsed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(10_000, |a| a.parse().unwrap());
    let path = std::env::temp_dir().join(format!("keel-large-{}.db", std::process::id()));
    let url = format!("sqlite://{}", path.display());
    let store = keel_store::Store::connect(&url).await.unwrap();
    let registry = Registry::for_store(&store).await.unwrap();
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
            max_body_bytes: 64 * 1024 * 1024,
            max_input_messages: n.max(1),
            ..ServerOptions::default()
        },
    );
    let messages: Vec<Value> = (0..n)
        .map(|i| json!({"role": "user", "content": format!("message {i} of a long imported conversation")}))
        .collect();
    let body = json!({"assistant_id": "agent", "input": {"messages": messages}});
    let other = app.clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    let creator = tokio::spawn(async move {
        let mut seen = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            seen.push(post(&other, "/threads", &json!({})).await);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        seen
    });
    let (status, took) = post(&app, "/runs/wait", &body).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = creator.await.unwrap();
    let slowest = seen.iter().map(|(_, d)| *d).max().unwrap_or_default();
    let failed: Vec<u16> = seen.iter().map(|(s, _)| *s).filter(|s| *s != 200).collect();
    println!(
        "run with {n} input messages: {status} in {:.0} ms; meanwhile {} POST /threads, slowest {:.0} ms, non-200: {failed:?}",
        took.as_secs_f64() * 1000.0,
        seen.len(),
        slowest.as_secs_f64() * 1000.0
    );
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
