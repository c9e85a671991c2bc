//! The thread-centric streaming protocol (`POST /threads/{id}/commands`, `POST
//! /threads/{id}/stream/events`) through the router, with requests shaped as the
//! `@langchain/protocol` types define them and as `langgraph-sdk` 0.4's
//! `client.threads.stream(...)` sends them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{call, json};
use http_body_util::BodyExt;
use keel_core::message::{Message, MessageBody, ToolCall};
use keel_server::ApiKeys;
use keel_server::config::StackConfig;
use keel_server::{ServerOptions, router_with};
use keel_store::Store;
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};
use tower::ServiceExt;

const ALICE: &str = "alice-key-0001";
const BOB: &str = "bob-key-00002";

/// Streams its answers in pieces; with `review`, calls `echo` (gated by
/// human_in_the_loop) once per user message, then reports what the tool said.
fn app(review: bool, keys: bool) -> Router {
    let model = ScriptedModel::from_fn(move |request| {
        let last = request.messages.last().unwrap();
        Ok(match last.body() {
            MessageBody::Tool(_) => Message::ai(format!("tool said {}", last.text())),
            _ if review => Message::ai("").with_tool_calls(vec![ToolCall::new(
                format!("call-{}", request.messages.len()),
                "echo",
                json!({"query": last.text()}),
            )]),
            _ => Message::ai(format!("you said {}", last.text())),
        })
    })
    .streaming_in(4);
    let yaml = if review {
        "tools: [echo]\nmiddleware:\n  - human_in_the_loop: {interrupt_on: {echo: {allowed_decisions: [approve, reject]}}}\n"
    } else {
        "tools: [echo]\n"
    };
    let agent = StackConfig::from_yaml_str(yaml)
        .unwrap()
        .build_with_model(Arc::new(Store::memory()), Arc::new(model), false)
        .unwrap();
    let api_keys = if keys {
        ApiKeys::new(HashMap::from([
            (ALICE.to_owned(), "alice".to_owned()),
            (BOB.to_owned(), "bob".to_owned()),
        ]))
    } else {
        ApiKeys::default()
    };
    router_with(
        agent,
        ServerOptions {
            api_keys,
            ..ServerOptions::default()
        },
    )
}

async fn command(
    app: &Router,
    key: Option<&str>,
    thread: &str,
    body: Value,
) -> (StatusCode, Value) {
    let (status, text) = call(
        app,
        "POST",
        &format!("/threads/{thread}/commands"),
        key,
        Some(body),
    )
    .await;
    (status, json(&text))
}

/// An open event stream: the parsed events `(sse event, sse id, data)` so far.
struct Events {
    body: Body,
    text: String,
    seen: Vec<(String, u64, Value)>,
}

impl Events {
    async fn open(app: &Router, key: Option<&str>, thread: &str, filter: Value) -> Events {
        let mut request = Request::builder()
            .method("POST")
            .uri(format!("/threads/{thread}/stream/events"))
            .header("content-type", "application/json");
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::from(filter.to_string())).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Events {
            body: response.into_body(),
            text: String::new(),
            seen: Vec::new(),
        }
    }

    /// Reads until an event's data matches, or fails after 10 s.
    async fn until(&mut self, done: impl Fn(&Value) -> bool) -> &[(String, u64, Value)] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if self.seen.iter().any(|(_, _, d)| done(d)) {
                return &self.seen;
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .unwrap_or_else(|_| panic!("no matching event; got {:#?}", self.seen))
                .unwrap()
                .unwrap();
            if let Ok(bytes) = frame.into_data() {
                self.text.push_str(std::str::from_utf8(&bytes).unwrap());
                while let Some(end) = self.text.find("\n\n") {
                    let block: String = self.text.drain(..end + 2).collect();
                    self.seen.extend(common::events(&block));
                }
            }
        }
    }

    /// Reads for a while and returns everything (for streams that should stay quiet).
    async fn for_a_while(&mut self) -> &[(String, u64, Value)] {
        let _ = tokio::time::timeout(Duration::from_millis(600), self.until(|_| false)).await;
        &self.seen
    }
}

fn lifecycle(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |d| d["method"] == "lifecycle" && d["params"]["data"]["event"] == phase
}

fn kinds(events: &[(String, u64, Value)]) -> Vec<String> {
    events
        .iter()
        .map(|(_, _, d)| match d["params"]["data"]["event"].as_str() {
            Some(e) if d["method"] != "values" => format!("{}:{e}", d["method"].as_str().unwrap()),
            _ => d["method"].as_str().unwrap().to_owned(),
        })
        .collect()
}

const ALL: [&str; 8] = [
    "values",
    "updates",
    "messages",
    "tools",
    "lifecycle",
    "input",
    "tasks",
    "custom",
];

fn user(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn run_start_streams_the_run_on_every_channel_and_since_replays_after_a_seq() {
    let app = app(false, false);
    let thread = uuid::Uuid::new_v4().to_string();
    // Opened before the thread exists, as the SDK does: it stays open until a run comes.
    let mut stream = Events::open(&app, None, &thread, json!({"channels": ALL})).await;
    let (status, answer) = command(
        &app,
        None,
        &thread,
        json!({"id": 1, "method": "run.start", "params": {"assistant_id": "agent", "input": user("hello there")}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["type"], "success", "{answer}");
    assert_eq!(answer["id"], 1);
    let run_id = answer["result"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(answer["meta"], json!({"applied_through_seq": 0}));

    let seen = stream.until(lifecycle("completed")).await.to_vec();
    let names = kinds(&seen);
    assert_eq!(
        names.first().map(String::as_str),
        Some("lifecycle:running"),
        "{names:?}"
    );
    assert_eq!(
        names.last().map(String::as_str),
        Some("lifecycle:completed"),
        "{names:?}"
    );
    assert!(names.contains(&"values".to_owned()), "{names:?}");
    assert!(names.contains(&"updates".to_owned()), "{names:?}");
    let messages: Vec<&String> = names
        .iter()
        .filter(|k| k.starts_with("messages:"))
        .collect();
    assert_eq!(
        messages.first().map(|s| s.as_str()),
        Some("messages:message-start"),
        "{names:?}"
    );
    assert_eq!(
        messages.last().map(|s| s.as_str()),
        Some("messages:message-finish"),
        "{names:?}"
    );
    // The answer arrives in text deltas and is finished whole.
    let deltas: String = seen
        .iter()
        .filter(|(_, _, d)| d["params"]["data"]["event"] == "content-block-delta")
        .map(|(_, _, d)| {
            d["params"]["data"]["delta"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(deltas, "you said hello there");
    let finished = seen
        .iter()
        .find(|(_, _, d)| d["params"]["data"]["event"] == "content-block-finish")
        .unwrap();
    assert_eq!(
        finished.2["params"]["data"]["content"],
        json!({"type": "text", "text": "you said hello there"})
    );
    // The envelope: seq from 1 with the SSE id, the method as the SSE event name.
    for (i, (event, id, data)) in seen.iter().enumerate() {
        assert_eq!(data["type"], "event");
        assert_eq!(data["seq"], json!(i + 1), "{data}");
        assert_eq!(*id, i as u64 + 1);
        assert_eq!(data["method"], json!(event));
        assert_eq!(data["params"]["namespace"], json!([]));
        assert!(data["params"]["timestamp"].as_i64().unwrap() > 0);
        assert!(data["event_id"].as_str().unwrap().starts_with(&run_id));
    }
    let last_values = seen.iter().rev().find(|(e, _, _)| e == "values").unwrap();
    assert_eq!(
        last_values.2["params"]["data"]["messages"][1]["content"],
        "you said hello there"
    );

    // A reconnect with `since` replays the run after that seq, with the same seqs.
    let total = seen.len() as u64;
    let mut again = Events::open(
        &app,
        None,
        &thread,
        json!({"channels": ALL, "since": total - 2}),
    )
    .await;
    let replay = again.until(lifecycle("completed")).await;
    assert_eq!(
        replay.iter().map(|(_, id, _)| *id).collect::<Vec<_>>(),
        [total - 1, total]
    );

    // A filter keeps only its channels; seqs still count every event.
    let mut only = Events::open(
        &app,
        None,
        &thread,
        json!({"channels": ["lifecycle"], "namespaces": [[]], "depth": 0}),
    )
    .await;
    let lc = only.until(lifecycle("completed")).await;
    assert_eq!(kinds(lc), ["lifecycle:running", "lifecycle:completed"]);
    assert_eq!(lc[1].1, total);

    // The stream follows the thread's next run.
    let (_, answer) = command(
        &app,
        None,
        &thread,
        json!({"id": 2, "method": "run.start", "params": {"assistant_id": "agent", "input": user("again")}}),
    )
    .await;
    assert_eq!(answer["type"], "success", "{answer}");
    let seen = stream
        .until(|d| {
            d["method"] == "values"
                && d["params"]["data"]["messages"]
                    .as_array()
                    .is_some_and(|m| m.len() == 4)
        })
        .await;
    assert_eq!(
        seen.last().unwrap().2["params"]["data"]["messages"][3]["content"],
        "you said again"
    );
}

#[tokio::test]
async fn input_respond_answers_the_pending_interrupt() {
    let app = app(true, false);
    let thread = uuid::Uuid::new_v4().to_string();
    let mut stream = Events::open(&app, None, &thread, json!({"channels": ALL})).await;
    let (_, answer) = command(
        &app,
        None,
        &thread,
        json!({"id": 1, "method": "run.start", "params": {"assistant_id": "agent", "input": user("ping")}}),
    )
    .await;
    assert_eq!(answer["type"], "success", "{answer}");
    let seen = stream.until(lifecycle("interrupted")).await.to_vec();
    let requested = seen
        .iter()
        .find(|(e, _, _)| e == "input.requested")
        .unwrap();
    let data = &requested.2["params"]["data"];
    let interrupt_id = data["interrupt_id"].as_str().unwrap().to_owned();
    assert_eq!(
        data["payload"]["action_requests"][0]["name"], "echo",
        "{data}"
    );
    assert_eq!(data["payload"], data["value"]);
    // Nothing ran yet: the call starts once it is approved.
    assert!(
        seen.iter().all(|(_, _, d)| d["method"] != "tools"),
        "{seen:#?}"
    );
    // Values carry no `__interrupt__`: it is the input channel's.
    assert!(
        seen.iter()
            .all(|(e, _, d)| e != "values" || d["params"]["data"].get("__interrupt__").is_none())
    );

    // The wrong interrupt, or a subgraph's, is not the pending one.
    for params in [
        json!({"namespace": [], "interrupt_id": "nope", "response": {"decisions": [{"type": "approve"}]}}),
        json!({"namespace": ["sub"], "interrupt_id": interrupt_id, "response": {"decisions": [{"type": "approve"}]}}),
    ] {
        let (status, answer) = command(
            &app,
            None,
            &thread,
            json!({"id": 5, "method": "input.respond", "params": params}),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["error"], "no_such_interrupt", "{answer}");
        assert_eq!(answer["id"], 5);
    }
    // A malformed answer is refused with the reason.
    let (_, answer) = command(
        &app,
        None,
        &thread,
        json!({"id": 6, "method": "input.respond", "params": {"namespace": [], "interrupt_id": interrupt_id, "response": {"decisions": [{"type": "maybe"}]}}}),
    )
    .await;
    assert_eq!(answer["error"], "invalid_argument", "{answer}");

    let (_, answer) = command(
        &app,
        None,
        &thread,
        json!({"id": 7, "method": "input.respond", "params": {"namespace": [], "interrupt_id": interrupt_id, "response": {"decisions": [{"type": "approve"}]}}}),
    )
    .await;
    assert_eq!(
        answer,
        json!({"type": "success", "id": 7, "result": {}, "meta": {"applied_through_seq": 0}})
    );
    let seen = stream.until(lifecycle("completed")).await;
    let started = seen
        .iter()
        .find(|(_, _, d)| d["params"]["data"]["event"] == "tool-started")
        .unwrap();
    assert_eq!(started.2["params"]["data"]["tool_name"], "echo");
    assert_eq!(
        started.2["params"]["data"]["input"],
        json!({"query": "ping"})
    );
    let finished = seen
        .iter()
        .find(|(_, _, d)| d["params"]["data"]["event"] == "tool-finished")
        .unwrap();
    assert_eq!(
        finished.2["params"]["data"]["tool_call_id"],
        started.2["params"]["data"]["tool_call_id"]
    );
    // The tool's result also reaches the messages channel, as a `tool` message, after
    // the call's tool events (as langgraph dev orders them), its output the message.
    let position = |want: &dyn Fn(&Value) -> bool| {
        seen.iter()
            .position(|(_, _, d)| want(&d["params"]["data"]))
            .unwrap()
    };
    let tool_message = position(&|d| d["event"] == "message-start" && d["role"] == "tool");
    let tool_finished = position(&|d| d["event"] == "tool-finished");
    assert!(tool_finished < tool_message);
    assert_eq!(
        seen[tool_finished].2["params"]["data"]["output"]["type"],
        "tool"
    );
    let last_values = seen.iter().rev().find(|(e, _, _)| e == "values").unwrap();
    let messages = last_values.2["params"]["data"]["messages"]
        .as_array()
        .unwrap();
    assert!(
        messages.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .starts_with("tool said"),
        "{messages:?}"
    );

    // Consumed: answering it again finds nothing pending.
    let (_, answer) = command(
        &app,
        None,
        &thread,
        json!({"id": 8, "method": "input.respond", "params": {"namespace": [], "interrupt_id": interrupt_id, "response": {"decisions": [{"type": "approve"}]}}}),
    )
    .await;
    assert_eq!(answer["error"], "no_such_interrupt", "{answer}");
}

#[tokio::test]
async fn every_other_method_and_bad_envelopes_get_protocol_errors() {
    let app = app(false, false);
    let thread = uuid::Uuid::new_v4().to_string();
    for method in [
        "subscription.subscribe",
        "subscription.unsubscribe",
        "subscription.reconnect",
        "agent.getTree",
        "input.inject",
        "state.get",
        "state.listCheckpoints",
        "state.fork",
    ] {
        let (status, answer) = command(
            &app,
            None,
            &thread,
            json!({"id": 3, "method": method, "params": {}}),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["type"], "error");
        assert_eq!(answer["id"], 3);
        assert_eq!(answer["error"], "not_supported", "{method}: {answer}");
        assert!(answer["message"].as_str().unwrap().contains(method));
    }
    let (_, answer) = command(&app, None, &thread, json!({"id": 4, "method": "run.stop"})).await;
    assert_eq!(answer["error"], "unknown_command");
    for body in [
        json!({"id": "x", "method": "run.start"}),
        json!({"id": -1, "method": "run.start"}),
        json!({"id": 1}),
    ] {
        let (status, answer) = command(&app, None, &thread, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer["error"], "invalid_argument");
    }
    for (params, needle) in [
        (json!({}), "assistant_id"),
        (
            // langgraph-api refuses an assistant_id that is neither a UUID nor a graph
            // as invalid (422 over REST), rather than as not found.
            json!({"assistant_id": "nobody", "input": user("x")}),
            "invalid assistant \"nobody\"",
        ),
        (
            json!({"assistant_id": "agent", "input": {"counter": 1}}),
            "input.counter",
        ),
    ] {
        let (_, answer) = command(
            &app,
            None,
            &thread,
            json!({"id": 9, "method": "run.start", "params": params}),
        )
        .await;
        assert_eq!(answer["error"], "invalid_argument", "{answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(needle),
            "{answer}"
        );
    }
    let (_, answer) = command(
        &app,
        None,
        &thread,
        json!({"id": 10, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "i", "response": 1}}),
    )
    .await;
    assert_eq!(answer["error"], "no_such_run", "{answer}");
    for (filter, needle) in [
        (json!({}), "channels is required"),
        (json!({"channels": []}), "channels is required"),
        (json!({"channels": ["bogus"]}), "the unsupported entry"),
        (
            json!({"channels": ["values"], "since": -1}),
            "since must be a whole number",
        ),
        (
            json!({"channels": ["values"], "namespaces": ["flat"]}),
            "namespaces entry",
        ),
    ] {
        let (status, text) = call(
            &app,
            "POST",
            &format!("/threads/{thread}/stream/events"),
            None,
            Some(filter.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{filter}: {text}");
        assert!(text.contains(needle), "{filter}: {text}");
    }
}

#[tokio::test]
async fn another_owner_neither_sees_nor_answers_a_thread() {
    let app = app(true, true);
    let thread = uuid::Uuid::new_v4().to_string();
    let mut alice = Events::open(&app, Some(ALICE), &thread, json!({"channels": ALL})).await;
    let (_, answer) = command(
        &app,
        Some(ALICE),
        &thread,
        json!({"id": 1, "method": "run.start", "params": {"assistant_id": "agent", "input": user("secret")}}),
    )
    .await;
    assert_eq!(answer["type"], "success", "{answer}");
    let seen = alice.until(lifecycle("interrupted")).await.to_vec();
    let requested = seen
        .iter()
        .find(|(e, _, _)| e == "input.requested")
        .unwrap();
    let interrupt_id = requested.2["params"]["data"]["interrupt_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut bob = Events::open(&app, Some(BOB), &thread, json!({"channels": ALL})).await;
    assert!(bob.for_a_while().await.is_empty());
    let (_, answer) = command(
        &app,
        Some(BOB),
        &thread,
        json!({"id": 2, "method": "input.respond", "params": {"namespace": [], "interrupt_id": interrupt_id, "response": {"decisions": [{"type": "approve"}]}}}),
    )
    .await;
    assert_eq!(answer["error"], "no_such_run", "{answer}");
    let (status, _) = call(
        &app,
        "POST",
        &format!("/threads/{thread}/commands"),
        None,
        Some(json!({"id": 1, "method": "run.start"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
