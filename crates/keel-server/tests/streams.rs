//! Streams under load, in process: many full-speed readers of one big streamed answer,
//! rejoining after the log dropped its start, frames shared between readers, and a
//! reader that stops reading.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use common::{call, events, json};
use http_body_util::BodyExt;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_server::RunLimits;
use keel_server::{ServerOptions, router_with};
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};
use tower::ServiceExt;

/// An agent answering `size` bytes of text, streamed in pieces of `chunk` characters.
fn agent(size: usize, chunk: usize) -> Agent {
    let text: String = (0..size)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let model = ScriptedModel::from_fn(move |_| Ok(Message::ai(text.clone()))).streaming_in(chunk);
    Agent::builder().model(Arc::new(model)).build().unwrap()
}

fn app(agent: Agent, runs: RunLimits) -> Router {
    router_with(
        agent,
        ServerOptions {
            runs,
            ..ServerOptions::default()
        },
    )
}

async fn thread(app: &Router) -> String {
    let (status, body) = call(app, "POST", "/threads", None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    json(&body)["thread_id"].as_str().unwrap().to_owned()
}

/// Starts a background run; returns its id.
async fn start(app: &Router, thread: &str, modes: Value) -> String {
    let (status, body) = call(
        app,
        "POST",
        &format!("/threads/{thread}/runs"),
        None,
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "go"}]}, "stream_mode": modes})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    json(&body)["run_id"].as_str().unwrap().to_owned()
}

async fn join_stream(app: &Router, path: &str) -> Body {
    let response = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body()
}

/// The body's frames as the server handed them over (an event, or a piece of a big one).
async fn frames(mut body: Body) -> Vec<Bytes> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            out.push(data);
        }
    }
    out
}

fn text(frames: &[Bytes]) -> String {
    frames
        .iter()
        .map(|f| std::str::from_utf8(f).unwrap())
        .collect()
}

/// 260 readers join one run streaming its answer in `messages` and `messages-tuple` at
/// full speed; every one gets the whole answer, in deltas and in the last partial, and
/// its `end`, none an `EventsLost` error. The answer is `KEEL_STREAM_TEST_BYTES` bytes
/// (60 kB here; the reported case is 600 kB, `KEEL_STREAM_TEST_BYTES=600000`) in 100
/// byte chunks: its partials alone, one per chunk, were 18 MB of log, past the 8 MiB cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_full_speed_readers_of_a_big_answer_all_get_it_whole() {
    let size: usize = std::env::var("KEEL_STREAM_TEST_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60_000);
    let app = app(agent(size, 100), RunLimits::default());
    let thread = thread(&app).await;
    let run = start(&app, &thread, json!(["messages", "messages-tuple"])).await;
    let path = format!("/threads/{thread}/runs/{run}/stream");
    let readers: Vec<_> = (0..260)
        .map(|_| {
            let (app, path) = (app.clone(), path.clone());
            tokio::spawn(async move { text(&frames(join_stream(&app, &path).await).await) })
        })
        .collect();
    let expected: String = (0..size)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    for reader in readers {
        let body = reader.await.unwrap();
        assert!(
            !body.contains("event: error"),
            "{}",
            &body[..body.len().min(400)]
        );
        let events = events(&body);
        let names: Vec<&str> = events.iter().map(|(e, _, _)| e.as_str()).collect();
        assert_eq!(names.last(), Some(&"end"));
        let deltas: String = events
            .iter()
            .filter(|(e, _, d)| e == "messages" && d[0]["type"] == "AIMessageChunk")
            .map(|(_, _, d)| d[0]["content"].as_str().unwrap())
            .collect();
        assert_eq!(deltas.len(), size);
        assert!(deltas == expected, "the deltas add up to the answer");
        let complete = events
            .iter()
            .rfind(|(e, _, _)| e == "messages/complete")
            .unwrap();
        assert!(complete.2[0]["content"] == expected.as_str());
        let partial = events
            .iter()
            .rfind(|(e, _, _)| e == "messages/partial")
            .unwrap();
        let so_far = partial.2[0]["content"].as_str().unwrap();
        assert!(expected.starts_with(so_far) && so_far.len() * 32 >= size * 31);
    }
}

/// A join without `Last-Event-ID` after the log dropped its first events (the cap
/// here is tiny) starts at the oldest event kept, and ends; with an id that is gone it
/// says so.
#[tokio::test]
async fn a_rejoin_without_an_id_starts_at_the_oldest_kept_event() {
    let app = app(
        agent(2_000, 100),
        RunLimits {
            max_log_bytes: 4_000,
            ..RunLimits::default()
        },
    );
    let thread = thread(&app).await;
    let run = start(&app, &thread, json!(["messages-tuple", "values"])).await;
    let path = format!("/threads/{thread}/runs/{run}/stream");
    let (_, body) = call(
        &app,
        "GET",
        &format!("/threads/{thread}/runs/{run}/join"),
        None,
        None,
    )
    .await;
    assert_eq!(
        json(&body)["messages"][1]["content"]
            .as_str()
            .unwrap()
            .len(),
        2_000
    );
    for _ in 0..2 {
        let body = text(&frames(join_stream(&app, &path).await).await);
        assert!(!body.contains("event: error"), "{body}");
        let events = events(&body);
        let names: Vec<&str> = events.iter().map(|(e, _, _)| e.as_str()).collect();
        assert!(events[0].1 > 0, "the first events were dropped");
        assert_eq!(names.last(), Some(&"end"));
    }
    let response = app
        .clone()
        .oneshot(
            Request::get(&path)
                .header("last-event-id", "0")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = text(&frames(response.into_body()).await);
    assert!(body.contains("EventsLost"), "{body}");
}

/// Two readers of one run get the very same buffers for its events (no copy per
/// reader), so a reader holding events it has not sent holds no memory of its own.
#[tokio::test]
async fn readers_share_the_event_buffers() {
    let app = app(agent(200_000, 200_000), RunLimits::default());
    let thread = thread(&app).await;
    let run = start(&app, &thread, json!(["values"])).await;
    let path = format!("/threads/{thread}/runs/{run}/stream");
    let a = frames(join_stream(&app, &path).await).await;
    let b = frames(join_stream(&app, &path).await).await;
    assert_eq!(a.len(), b.len());
    // The values after the answer go out in pieces of the same size for both readers.
    let big: Vec<(&Bytes, &Bytes)> = a
        .iter()
        .zip(&b)
        .filter(|(x, _)| x.len() >= 60_000)
        .collect();
    assert!(big.len() >= 3, "the values after the answer are big");
    for (x, y) in big {
        assert_eq!(x, y);
        assert_eq!(x.as_ptr(), y.as_ptr(), "one buffer for both readers");
    }
}

/// A client that stops taking the stream is dropped after the write timeout: its next
/// read fails instead of going on. The run itself finishes.
#[tokio::test]
async fn a_reader_that_stops_reading_is_dropped_after_the_write_timeout() {
    let app = app(
        agent(1_000, 10),
        RunLimits {
            write_timeout: Duration::from_millis(200),
            ..RunLimits::default()
        },
    );
    let thread = thread(&app).await;
    let response = app
        .clone()
        .oneshot(
            Request::post(format!("/threads/{thread}/runs/stream"))
                .header("content-type", "application/json")
                .body(Body::from(
                    json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "go"}]}, "stream_mode": ["messages-tuple"]})
                        .to_string(),
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"event: metadata"));
    tokio::time::sleep(Duration::from_millis(700)).await;
    let next = body.frame().await;
    assert!(
        matches!(next, Some(Err(_))),
        "the stalled stream was dropped, not resumed: {next:?}"
    );
    let run = std::str::from_utf8(&first).unwrap();
    let run_id = run
        .split("\"run_id\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let (_, body) = call(
        &app,
        "GET",
        &format!("/threads/{thread}/runs/{run_id}/join"),
        None,
        None,
    )
    .await;
    assert_eq!(
        json(&body)["messages"][1]["content"]
            .as_str()
            .unwrap()
            .len(),
        1_000
    );
}

/// A finished run whose log went to stay under the finished-logs budget (here every
/// one goes) still answers: `join` with the thread's final values, its stream with its
/// `end`.
#[tokio::test]
async fn a_run_whose_log_was_dropped_still_joins_and_streams_its_end() {
    let app = app(
        agent(5_000, 100),
        RunLimits {
            finished_log_bytes: 0,
            ..RunLimits::default()
        },
    );
    let thread = thread(&app).await;
    let run = start(&app, &thread, json!(["values", "messages"])).await;
    let join = format!("/threads/{thread}/runs/{run}/join");
    let (status, first) = call(&app, "GET", &join, None, None).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(
        json(&first)["messages"][1]["content"]
            .as_str()
            .unwrap()
            .len(),
        5_000
    );
    // Once retired, the log is gone: the stream says how the run ended, a join reads the
    // thread.
    let stream = format!("/threads/{thread}/runs/{run}/stream");
    for _ in 0..100 {
        let body = text(&frames(join_stream(&app, &stream).await).await);
        if !body.contains("event: metadata") {
            assert!(body.starts_with("event: end\n"), "{body}");
            assert!(body.contains("\"status\":\"success\""), "{body}");
            let (_, again) = call(&app, "GET", &join, None, None).await;
            assert_eq!(json(&again), json(&first));
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the finished run's log was never dropped");
}

/// Resident memory of this process, in MB (Linux).
fn rss_mb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// Not a check: prints the memory the reported cases hold, to compare builds
/// (`cargo test -p keel-server --test streams -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn measure_memory() {
    // 260 finished runs with 600 kB answers, streamed in values, messages and
    // messages-tuple.
    let before = rss_mb();
    let app = app(agent(600_000, 1_000), RunLimits::default());
    for _ in 0..260 {
        let thread = thread(&app).await;
        let run = start(
            &app,
            &thread,
            json!(["values", "messages", "messages-tuple"]),
        )
        .await;
        call(
            &app,
            "GET",
            &format!("/threads/{thread}/runs/{run}/join"),
            None,
            None,
        )
        .await;
    }
    println!(
        "260 finished runs of 600 kB: RSS {before} MB -> {} MB",
        rss_mb()
    );

    // 20 readers holding every frame of a 9.6 MB answer they were handed.
    drop(app);
    let app = self::app(
        agent(9_600_000, 9_600_000),
        RunLimits {
            max_log_bytes: 32 << 20,
            ..RunLimits::default()
        },
    );
    let thread = thread(&app).await;
    let run = start(&app, &thread, json!(["values"])).await;
    call(
        &app,
        "GET",
        &format!("/threads/{thread}/runs/{run}/join"),
        None,
        None,
    )
    .await;
    let path = format!("/threads/{thread}/runs/{run}/stream");
    let before = rss_mb();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(frames(join_stream(&app, &path).await).await);
    }
    let bytes: usize = held.iter().flatten().map(Bytes::len).sum();
    println!(
        "20 readers holding {} MB of frames of a 9.6 MB answer: RSS {before} MB -> {} MB",
        bytes / 1_000_000,
        rss_mb()
    );
}

/// Not a check: prints the server's memory with 20 clients over TCP that ask for the
/// stream of a 9.6 MB answer and never read it, before and after the write timeout
/// (`cargo test -p keel-server --test streams measure -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn measure_stalled_readers_over_tcp() {
    use tokio::io::AsyncWriteExt;
    let app = app(
        agent(9_600_000, 9_600_000),
        RunLimits {
            max_log_bytes: 64 << 20,
            write_timeout: Duration::from_secs(3),
            ..RunLimits::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = app.clone();
    tokio::spawn(async move { axum::serve(listener, served).await });
    let thread = thread(&app).await;
    let run = start(&app, &thread, json!(["values"])).await;
    call(
        &app,
        "GET",
        &format!("/threads/{thread}/runs/{run}/join"),
        None,
        None,
    )
    .await;
    let before = rss_mb();
    let mut clients = Vec::new();
    for _ in 0..20 {
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request =
            format!("GET /threads/{thread}/runs/{run}/stream HTTP/1.1\r\nhost: x\r\n\r\n");
        socket.write_all(request.as_bytes()).await.unwrap();
        clients.push(socket);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!(
        "20 stalled readers of a 9.6 MB answer: RSS {before} MB -> {} MB",
        rss_mb()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!("after the write timeout: RSS {} MB", rss_mb());
    drop(clients);
}

/// The chunks of a streamed answer carry the id the answer is stored under, so a client
/// (@langchain/react's useStream) merges the stream into the thread's messages by id
/// instead of showing the answer twice. langgraph-api does the same.
#[tokio::test]
async fn streamed_chunks_carry_the_stored_answers_id() {
    let app = app(agent(40, 8), RunLimits::default());
    let thread = thread(&app).await;
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{thread}/runs/stream"),
        None,
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "go"}]}, "stream_mode": ["messages-tuple"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let chunk_ids: std::collections::BTreeSet<String> = common::events(&body)
        .into_iter()
        .filter(|(event, _, _)| event == "messages")
        .map(|(_, _, data)| data[0]["id"].as_str().unwrap().to_owned())
        .collect();
    let (_, state) = call(&app, "GET", &format!("/threads/{thread}/state"), None, None).await;
    let state = json(&state);
    let answer = state["values"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    assert_eq!(answer["type"], "ai");
    assert_eq!(
        chunk_ids.into_iter().collect::<Vec<_>>(),
        [answer["id"].as_str().unwrap().to_owned()]
    );
}
