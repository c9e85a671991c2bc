//! Human in the loop over the protocol: a run pauses before a gated tool call (the
//! `__interrupt__` update, the thread `interrupted`, its state's task holding the
//! request), and a run with `command: {resume: {"decisions": [...]}}` continues it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use common::json;
use keel_core::message::{Message, MessageBody, ToolCall};
use keel_server::config::StackConfig;
use keel_server::router;
use keel_store::Store;
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};

/// Calls `echo` once per user message, then reports what the tool said.
fn app() -> Router {
    let model = ScriptedModel::from_fn(|request| {
        let last = request.messages.last().unwrap();
        Ok(match last.body() {
            MessageBody::Tool(_) => Message::ai(format!("tool said {}", last.text())),
            _ => Message::ai("").with_tool_calls(vec![ToolCall::new(
                format!("call-{}", request.messages.len()),
                "echo",
                json!({"query": last.text()}),
            )]),
        })
    });
    let stack = StackConfig::from_yaml_str(
        "tools: [echo]\nmiddleware:\n  - human_in_the_loop: {interrupt_on: {echo: {allowed_decisions: [approve, reject, edit]}}}\n",
    )
    .unwrap();
    let agent = stack
        .build_with_model(Arc::new(Store::memory()), Arc::new(model), false)
        .unwrap();
    router(agent)
}

/// `(event, data)` of a streamed run.
fn events(body: &str) -> Vec<(String, Value)> {
    common::events(body)
        .into_iter()
        .map(|(event, _, data)| (event, data))
        .collect()
}

/// One request without an API key.
async fn call(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, String) {
    common::call(app, method, path, None, body).await
}

async fn thread(app: &Router) -> String {
    let (status, body) = call(app, "POST", "/threads", Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    json(&body)["thread_id"].as_str().unwrap().to_owned()
}

async fn stream(
    app: &Router,
    thread: &str,
    body: Value,
) -> (StatusCode, Vec<(String, Value)>, String) {
    let (status, text) = call(
        app,
        "POST",
        &format!("/threads/{thread}/runs/stream"),
        Some(body),
    )
    .await;
    (status, events(&text), text)
}

#[tokio::test]
async fn a_gated_call_pauses_the_run_and_a_resume_runs_it() {
    let app = app();
    let t = thread(&app).await;
    let (status, events, _) = stream(
        &app,
        &t,
        json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "ping"}]}, "stream_mode": ["updates", "values"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // LangGraph's `{"__interrupt__": [{"value": HITLRequest, "id"}]}` update.
    let interrupt = events
        .iter()
        .find_map(|(e, d)| (e == "updates").then(|| d.get("__interrupt__")).flatten())
        .expect("an __interrupt__ update")
        .clone();
    let value = &interrupt[0]["value"];
    assert_eq!(value["action_requests"][0]["name"], "echo");
    assert_eq!(
        value["action_requests"][0]["args"],
        json!({"query": "ping"})
    );
    assert_eq!(
        value["review_configs"][0]["allowed_decisions"],
        json!(["approve", "reject", "edit"])
    );
    assert!(
        value.get("tool_call_ids").is_none(),
        "bookkeeping stays server-side"
    );
    let id = interrupt[0]["id"].as_str().unwrap().to_owned();
    // The last values event carries it too, as `runs.wait` answers.
    let (_, last_values) = events.iter().rev().find(|(e, _)| e == "values").unwrap();
    assert_eq!(last_values["__interrupt__"][0]["id"], id);
    assert_eq!(events.last().unwrap().1["status"], "success");

    // The thread waits: status, state's next/tasks/interrupts.
    let (_, body) = call(&app, "GET", &format!("/threads/{t}"), None).await;
    assert_eq!(json(&body)["status"], "interrupted", "{body}");
    let thread = json(&body);
    let (_, body) = call(&app, "GET", &format!("/threads/{t}/state"), None).await;
    let state = json(&body);
    assert_eq!(
        state["next"],
        json!(["HumanInTheLoopMiddleware.after_model"])
    );
    assert_eq!(state["tasks"][0]["interrupts"][0]["id"], id);
    // As LangGraph: the waiting task has an id of its own, which keys the thread's
    // `interrupts`.
    let task = state["tasks"][0]["id"].as_str().unwrap();
    assert_ne!(task, id);
    assert_eq!(thread["interrupts"][task][0]["id"], id, "{thread}");
    assert_eq!(state["interrupts"][0]["id"], id);

    // A run without input while the review is pending is refused, saying how to
    // answer it.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(json!({"assistant_id": "agent"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body.contains("waiting for a review of 1 tool call(s) (echo)"),
        "{body}"
    );
    assert!(body.contains("command: {resume"), "{body}");

    // Wrong answers are refused before any run starts.
    for (resume, expect) in [
        (json!({"decisions": []}), "1 pending tool call(s) but 0"),
        (
            json!({"decisions": [{"type": "respond", "message": "x"}]}),
            "not allowed",
        ),
        (json!({"decisions": [{"type": "maybe"}]}), "maybe"),
        (json!("yes"), "decisions"),
    ] {
        let (status, body) = call(
            &app,
            "POST",
            &format!("/threads/{t}/runs"),
            Some(json!({"assistant_id": "agent", "command": {"resume": resume}})),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body.contains(expect), "{expect}: {body}");
    }

    // Approve, keyed by the interrupt's id as LangGraph allows.
    let (status, events, text) = stream(
        &app,
        &t,
        json!({"assistant_id": "agent", "command": {"resume": {id.clone(): {"decisions": [{"type": "approve"}]}}}, "stream_mode": ["updates"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(events.last().unwrap().1["status"], "success", "{text}");
    let (_, body) = call(&app, "GET", &format!("/threads/{t}/state"), None).await;
    let state = json(&body);
    let messages = state["values"]["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["content"], "tool said {\"query\":\"ping\"}", "{body}");
    assert!(state["values"].get("__interrupt__").is_none(), "{body}");
    assert_eq!(state["next"], json!([]));
    let (_, body) = call(&app, "GET", &format!("/threads/{t}"), None).await;
    assert_eq!(json(&body)["status"], "idle");
    assert_eq!(json(&body)["interrupts"], json!({}));

    // Nothing pending now: a resume is refused.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(json!({"assistant_id": "agent", "command": {"resume": {"decisions": [{"type": "approve"}]}}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("no pending interrupt"), "{body}");
}

#[tokio::test]
async fn edit_and_reject_reach_the_model_and_wait_returns_the_interrupt() {
    let app = app();
    let t = thread(&app).await;
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs/wait"),
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "one"}]}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        json(&body)["__interrupt__"][0]["value"]["action_requests"][0]["args"]["query"],
        "one"
    );

    // Edit: the call runs with other arguments.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs/wait"),
        Some(
            json!({"assistant_id": "agent", "command": {"resume": {"decisions": [
                {"type": "edit", "edited_action": {"name": "echo", "args": {"query": "edited"}}}
            ]}}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let values = json(&body);
    assert_eq!(
        values["messages"].as_array().unwrap().last().unwrap()["content"],
        "tool said {\"query\":\"edited\"}",
        "{body}"
    );

    // Reject on the next turn: the model reads LangChain's rejection, no tool runs.
    call(
        &app,
        "POST",
        &format!("/threads/{t}/runs/wait"),
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "two"}]}})),
    )
    .await;
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs/wait"),
        Some(json!({"assistant_id": "agent", "command": {"resume": [{"type": "reject", "message": "not now"}]}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let values = json(&body);
    let last = values["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["content"], "tool said User rejected the tool call for `echo` with reason: not now",
        "{body}"
    );
}

#[tokio::test]
async fn resume_without_the_middleware_or_a_thread_is_a_clear_error() {
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("hi")));
    let agent = keel_agent::Agent::builder()
        .model(Arc::new(model))
        .build()
        .unwrap();
    let app = router(agent);
    let t = thread(&app).await;
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(json!({"assistant_id": "agent", "command": {"resume": {"decisions": []}}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("no human_in_the_loop middleware"), "{body}");
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(json!({"assistant_id": "agent", "command": {"goto": "model"}})),
    )
    .await;
    // goto "model" needs no review, but a thread with messages for the model to read.
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("no messages for the model"), "{body}");
}
