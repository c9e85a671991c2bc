//! The accept loop of `keel serve` on 127.0.0.1: slow or half-sent requests are cut off
//! and cannot starve the others, and a stop has a deadline even while a run waits on a
//! model that never answers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile};
use keel_server::registry::{Registry, RunStatus};
use keel_server::serve::{ConnectionLimits, bind, serve_app};
use keel_server::{ServerOptions, router, router_parts};
use keel_testkit::ScriptedModel;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Long enough for anything here to happen on a loaded machine; a hang fails instead.
const PATIENCE: Duration = Duration::from_secs(30);

fn echo_agent() -> Agent {
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("ok")));
    Agent::builder().model(Arc::new(model)).build().unwrap()
}

/// A model that never answers, like a provider gone silent.
struct Silent(ModelProfile);

#[async_trait]
impl ChatModel for Silent {
    fn profile(&self) -> &ModelProfile {
        &self.0
    }

    async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
        std::future::pending().await
    }
}

/// Serves `app` on a free port of 127.0.0.1 until the sender is used.
async fn start(
    app: axum::Router,
    runs: Option<Arc<keel_server::RunManager>>,
    limits: ConnectionLimits,
) -> (SocketAddr, oneshot::Sender<()>, JoinHandle<()>) {
    let listener = bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        serve_app(listener, app, runs, &limits, async {
            let _ = stopped.await;
        })
        .await;
    });
    (addr, stop, task)
}

/// Reads until the peer closes (or resets) the connection.
async fn read_to_end(stream: &mut TcpStream) -> String {
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

/// One request on its own connection (`Connection: close`), and the whole answer.
async fn exchange(addr: SocketAddr, method: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    read_to_end(&mut stream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed_and_do_not_starve_the_health_check() {
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_millis(500),
        max_connections: 64,
        ..ConnectionLimits::default()
    };
    let (addr, stop, task) = start(router(echo_agent()), None, limits).await;
    // 200 requests whose headers never end, and 20 connections that send nothing
    // (more than 3 times the cap). At CI size; the same holds with a thousand against
    // a 1,024-descriptor limit, since the cap keeps the rest in the backlog.
    let mut held = Vec::new();
    for i in 0..220 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        if i < 200 {
            stream
                .write_all(b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await
                .unwrap();
        }
        held.push(stream);
    }
    let answer = tokio::time::timeout(PATIENCE, exchange(addr, "GET", "/ok", ""))
        .await
        .expect("GET /ok answered while half-sent requests are held");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Every held connection was closed by the server, with no answer.
    let closed = futures::future::join_all(held.iter_mut().map(read_to_end));
    let answers = tokio::time::timeout(PATIENCE, closed)
        .await
        .expect("the server closes idle and half-sent connections");
    assert!(answers.iter().all(|a| !a.contains("200 OK")), "{answers:?}");
    stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_arriving_fails_its_request_after_the_body_timeout() {
    let limits = ConnectionLimits {
        body_read_timeout: Duration::from_millis(300),
        ..ConnectionLimits::default()
    };
    let (addr, stop, task) = start(router(echo_agent()), None, limits).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"POST /threads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"metadata\":")
        .await
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(PATIENCE, stream.read(&mut answer))
        .await
        .expect("answered once the body timeout passed")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
    stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_cancels_a_run_stuck_on_a_silent_model_at_the_deadline() {
    let registry = Arc::new(Registry::memory());
    let agent = Agent::builder()
        .model(Arc::new(Silent(ModelProfile::new("silent", "scripted"))))
        .build()
        .unwrap();
    let (app, runs) = router_parts(
        agent,
        ServerOptions {
            registry: Some(registry.clone()),
            ..ServerOptions::default()
        },
    );
    let limits = ConnectionLimits {
        shutdown_deadline: Duration::from_millis(300),
        ..ConnectionLimits::default()
    };
    let (addr, stop, task) = start(app, Some(runs), limits).await;
    let created = exchange(addr, "POST", "/threads", "{}").await;
    let body = created.split("\r\n\r\n").nth(1).unwrap();
    let thread: serde_json::Value = serde_json::from_str(body).unwrap();
    let thread = thread["thread_id"].as_str().unwrap().to_owned();

    // A streamed run, waiting on the model.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let run =
        r#"{"assistant_id":"agent","input":{"messages":[{"role":"user","content":"hello?"}]}}"#;
    let request = format!(
        "POST /threads/{thread}/runs/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{run}",
        run.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = String::new();
    let mut buffer = vec![0u8; 4096];
    while !seen.contains("event: metadata") {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "{seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }

    stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the server stops at its deadline")
        .unwrap();
    seen.push_str(&read_to_end(&mut stream).await);
    assert!(
        seen.contains("event: end") && seen.contains("\"interrupted\""),
        "{seen}"
    );
    let records = registry.runs(&thread, None, 0, 10).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, RunStatus::Interrupted);
}
