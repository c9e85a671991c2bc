//! The requests LangGraph's agent-chat-ui sends (its `useStream` hook with
//! `fetchStateHistory: true`, from `@langchain/langgraph-sdk/react`), answered as the
//! LangGraph Agent Server answers them: every message names the thread's head
//! checkpoint, the thread list searches by `graph_id`/`assistant_id` metadata, a resume
//! carries `input: {}`, "Mark as resolved" sends `command: {goto: "__end__"}`, and typing
//! during a review answers the pending calls with tool messages.

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

/// Calls `echo` (reviewed) once per user message, then reports what the tool said.
/// Every request the model sees is recorded, to check no orphan call reaches it.
fn app_with(seen: Arc<parking_lot::Mutex<Vec<Vec<Message>>>>) -> Router {
    let model = ScriptedModel::from_fn(move |request| {
        seen.lock().push(request.messages.clone());
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

fn app() -> Router {
    app_with(Arc::default())
}

async fn call(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, String) {
    common::call(app, method, path, None, body).await
}

async fn thread(app: &Router) -> String {
    let (status, body) = call(app, "POST", "/threads", Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    json(&body)["thread_id"].as_str().unwrap().to_owned()
}

/// A streamed run as agent-chat-ui starts it; returns the status, the events and the body.
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
    let events = common::events(&text)
        .into_iter()
        .map(|(event, _, data)| (event, data))
        .collect();
    (status, events, text)
}

/// agent-chat-ui's request body around `fields` (input or command, checkpoint).
fn ui_body(fields: Value) -> Value {
    let mut body = json!({
        "assistant_id": "agent",
        "stream_mode": ["values", "messages-tuple", "updates", "custom"],
        "stream_subgraphs": true,
        "stream_resumable": true,
        "on_disconnect": "continue",
        "context": {},
        "config": {},
        "metadata": {},
    });
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn human(text: &str) -> Value {
    json!({"messages": [{"type": "human", "content": text}]})
}

/// The thread's state (`GET /threads/{id}/state`).
async fn state(app: &Router, t: &str) -> Value {
    let (status, body) = call(app, "GET", &format!("/threads/{t}/state"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    json(&body)
}

/// The head checkpoint as `useStream` sends it: the newest history entry's.
async fn head(app: &Router, t: &str) -> Value {
    let (status, body) = call(
        app,
        "POST",
        &format!("/threads/{t}/history"),
        Some(json!({"limit": 10})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let cp = json(&body)[0]["checkpoint"].clone();
    json!({"checkpoint_id": cp["checkpoint_id"], "checkpoint_ns": "", "checkpoint_map": null})
}

fn status_of(events: &[(String, Value)]) -> Value {
    events.last().unwrap().1["status"].clone()
}

#[tokio::test]
async fn a_run_naming_the_head_checkpoint_continues_and_an_earlier_one_forks() {
    let app = app();
    let t = thread(&app).await;
    let (status, events, text) = stream(&app, &t, ui_body(json!({"input": human("one")}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success");
    // Approve the pending call, naming the head as the UI does.
    let cp = head(&app, &t).await;
    let (status, events, text) = stream(
        &app,
        &t,
        ui_body(json!({"input": null, "command": {"resume": {"decisions": [{"type": "approve"}]}}, "checkpoint": cp})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    // The next message, again from the head (also as a bare `checkpoint_id`).
    let cp = head(&app, &t).await;
    let (status, events, text) = stream(
        &app,
        &t,
        ui_body(json!({"input": human("two"), "checkpoint": cp.clone(), "checkpoint_id": cp["checkpoint_id"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    assert_eq!(
        state(&app, &t).await["values"]["messages"]
            .as_array()
            .unwrap()
            .len(),
        6
    );

    // An earlier checkpoint forks: the new branch starts from the state before "two".
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs/stream"),
        Some(ui_body(
            json!({"input": human("three"), "checkpoint": cp.clone()}),
        )),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let now = state(&app, &t).await;
    let texts: Vec<&str> = now["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        texts.contains(&"three") && !texts.contains(&"two"),
        "{texts:?}"
    );
    // The current branch runs through the checkpoint forked from.
    let (status, branch) = call(
        &app,
        "POST",
        &format!("/threads/{t}/history"),
        Some(json!({"limit": 100})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{branch}");
    assert!(
        json(&branch)
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["checkpoint"]["checkpoint_id"] == cp["checkpoint_id"]),
        "{branch}"
    );
    // A checkpoint the thread never had, or of another namespace.
    for (checkpoint, expect) in [
        (
            json!({"checkpoint_id": "00000000-0000-4000-8000-0000000003e7"}),
            "is not a checkpoint of thread",
        ),
        (
            json!({"checkpoint_id": "nope"}),
            "not one this server issued",
        ),
        (
            json!({"checkpoint_id": null, "checkpoint_ns": "sub"}),
            "checkpoint_ns",
        ),
        (json!("latest"), "checkpoint must be an object"),
    ] {
        let (status, body) = call(
            &app,
            "POST",
            &format!("/threads/{t}/runs"),
            Some(ui_body(
                json!({"input": human("x"), "checkpoint": checkpoint}),
            )),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body.contains(expect), "{expect}: {body}");
    }
}

#[tokio::test]
async fn a_run_tags_its_thread_with_the_graph_and_assistant_so_the_thread_list_finds_it() {
    let app = app();
    let (_, body) = call(&app, "GET", "/assistants/agent", None).await;
    let assistant_id = json(&body)["assistant_id"].as_str().unwrap().to_owned();
    // A thread with keys of its own, one of them overwritten as LangGraph does.
    let (_, body) = call(
        &app,
        "POST",
        "/threads",
        Some(json!({"metadata": {"graph_id": "mine", "topic": "x"}})),
    )
    .await;
    let t = json(&body)["thread_id"].as_str().unwrap().to_owned();
    let untouched = thread(&app).await;
    let search = |metadata: Value| {
        let app = app.clone();
        async move {
            let (status, body) = call(
                &app,
                "POST",
                "/threads/search",
                Some(json!({"metadata": metadata, "limit": 100})),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            json(&body)
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["thread_id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert!(search(json!({"graph_id": "agent"})).await.is_empty());

    let (status, _, text) = stream(&app, &t, ui_body(json!({"input": human("hi")}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(search(json!({"graph_id": "agent"})).await, vec![t.clone()]);
    assert_eq!(
        search(json!({"assistant_id": assistant_id})).await,
        vec![t.clone()]
    );
    let (_, body) = call(&app, "GET", &format!("/threads/{t}"), None).await;
    assert_eq!(
        json(&body)["metadata"],
        json!({"graph_id": "agent", "assistant_id": assistant_id, "topic": "x"})
    );
    let (_, body) = call(&app, "GET", &format!("/threads/{untouched}"), None).await;
    assert_eq!(json(&body)["metadata"], json!({}));

    // A thread a run creates (`if_not_exists: create`) is tagged from the start.
    let id = "6a1f2c8e-4a6b-4f3e-9d51-0c7f8e2b1a90";
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{id}/runs/wait"),
        Some(json!({"assistant_id": "agent", "input": human("hi"), "if_not_exists": "create"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut found = search(json!({"graph_id": "agent"})).await;
    found.sort();
    let mut expected = vec![t, id.to_owned()];
    expected.sort();
    assert_eq!(found, expected);
}

/// Every call of every AI message in `messages` has a result right after it.
fn no_orphans(messages: &[Message]) {
    let dangling =
        keel_core::dangling::dangling_tool_calls(messages, keel_core::dangling::Pending::Patch);
    assert!(
        dangling.is_empty(),
        "orphan calls reach the model: {dangling:?}"
    );
}

#[tokio::test]
async fn a_resume_beside_an_empty_input_is_accepted_and_messages_beside_one_are_refused() {
    let app = app();
    let t = thread(&app).await;
    stream(&app, &t, ui_body(json!({"input": human("one")}))).await;
    // Messages beside a command would be lost (LangGraph drops them): refused.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(ui_body(json!({"input": human("lost"), "command": {"resume": {"decisions": [{"type": "approve"}]}}}))),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("input beside command"), "{body}");
    // agent-chat-ui's decision: `input: {}` beside the command.
    let (status, events, text) = stream(
        &app,
        &t,
        ui_body(json!({"input": {}, "command": {"resume": {"decisions": [{"type": "reject", "message": "no"}]}}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    let values = state(&app, &t).await["values"].clone();
    let messages = values["messages"].clone();
    assert_eq!(
        messages[3]["content"],
        "tool said User rejected the tool call for `echo` with reason: no"
    );
    // The review's bookkeeping stays server-side, as LangChain has no such channels.
    let keys: Vec<&String> = values.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["messages"], "{values}");
    for (event, data) in &events {
        if event == "values" {
            assert!(data.get("hitl_decisions").is_none(), "{data}");
            assert!(data.get("hitl_reviewed").is_none(), "{data}");
        }
    }
}

#[tokio::test]
async fn mark_as_resolved_ends_the_review_without_running_the_model() {
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let app = app_with(seen.clone());
    let t = thread(&app).await;
    stream(&app, &t, ui_body(json!({"input": human("one")}))).await;
    assert_eq!(state(&app, &t).await["next"].as_array().unwrap().len(), 1);
    let calls = seen.lock().len();

    // "Mark as resolved": agent-chat-ui's `submit({}, {command: {goto: END}})`.
    let cp = head(&app, &t).await;
    let (status, events, text) = stream(
        &app,
        &t,
        ui_body(json!({"input": {}, "command": {"goto": "__end__"}, "checkpoint": cp})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    assert_eq!(seen.lock().len(), calls, "the model was not called");
    // The values event shows the call answered and no interrupt.
    let (_, values) = events.iter().rev().find(|(e, _)| e == "values").unwrap();
    assert!(values.get("__interrupt__").is_none(), "{values}");
    let result = values["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(result["type"], "tool");
    assert_eq!(result["tool_call_id"], "call-1");
    assert_eq!(result["status"], "error");
    assert!(
        result["content"].as_str().unwrap().contains("was not run"),
        "{result}"
    );
    let state = state(&app, &t).await;
    assert_eq!(state["next"], json!([]), "{state}");
    assert_eq!(state["interrupts"], json!([]));
    assert_eq!(state["values"]["messages"].as_array().unwrap().len(), 3);
    let (_, body) = call(&app, "GET", &format!("/threads/{t}"), None).await;
    assert_eq!(json(&body)["status"], "idle", "{body}");
    assert_eq!(json(&body)["interrupts"], json!({}));

    // Nothing pending now: another goto is refused, as a resume is.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(ui_body(json!({"command": {"goto": "__end__"}}))),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("no pending interrupt"), "{body}");

    // The next message runs, and the model sees every call answered.
    let (status, events, text) = stream(&app, &t, ui_body(json!({"input": human("two")}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    let last = seen.lock().last().unwrap().clone();
    no_orphans(&last);

    // Other commands are refused, naming what is not supported.
    for (command, expect) in [
        (json!({"goto": "tools"}), "without their review"),
        (json!({"goto": "summarize"}), "summarize"),
        (
            json!({"goto": ["model", "tools"]}),
            "steps are model and tools",
        ),
        (
            json!({"goto": "__end__", "resume": {"decisions": []}}),
            "not both",
        ),
        (
            json!({"update": {"messages": [{"type": "human", "content": "x"}]}, "resume": {"decisions": []}}),
            "not both",
        ),
        (json!({"update": {"count": 1}}), "command.update.count"),
        (json!({"send": 1}), "command.send is not supported"),
        (json!({}), "command needs resume"),
    ] {
        let (status, body) = call(
            &app,
            "POST",
            &format!("/threads/{t}/runs"),
            Some(ui_body(json!({"command": command}))),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body.contains(expect), "{expect}: {body}");
    }
}

#[tokio::test]
async fn goto_model_calls_the_model_on_the_threads_state_closing_a_pending_review() {
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let app = app_with(seen.clone());
    let t = thread(&app).await;
    // A thread that never ran has nothing for the model to read.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(ui_body(json!({"command": {"goto": "model"}}))),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("no messages for the model"), "{body}");

    // Waiting for a review: LangGraph's `Command(goto="model")` abandons the paused call
    // and runs the model node. Keel closes the call with its "not run" result first, so
    // no call without a result reaches the model.
    stream(&app, &t, ui_body(json!({"input": human("one")}))).await;
    let calls = seen.lock().len();
    let (status, events, text) = stream(
        &app,
        &t,
        ui_body(json!({"input": {}, "command": {"goto": "model"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    assert_eq!(seen.lock().len(), calls + 1, "the model ran once");
    let model_saw = seen.lock().last().unwrap().clone();
    no_orphans(&model_saw);
    let st = state(&app, &t).await;
    let messages = st["values"]["messages"].as_array().unwrap();
    let kinds: Vec<_> = messages.iter().map(|m| m["type"].clone()).collect();
    assert_eq!(kinds, ["human", "ai", "tool", "ai"], "{st}");
    assert_eq!(messages[2]["tool_call_id"], "call-1");
    assert!(
        messages[3]["content"]
            .as_str()
            .unwrap()
            .starts_with("tool said"),
        "{st}"
    );
    assert_eq!(st["next"], json!([]), "{st}");

    // On an idle thread, with the command's update: the messages, then the model.
    let (status, events, text) = stream(
        &app,
        &t,
        ui_body(json!({"command": {"goto": "model", "update": {"messages": [{"type": "human", "content": "two"}]}}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    assert_eq!(seen.lock().last().unwrap().last().unwrap().text(), "two");
    // The model called echo again: a review waits for it.
    let st = state(&app, &t).await;
    assert_eq!(
        st["interrupts"][0]["value"]["action_requests"][0]["args"],
        json!({"query": "two"})
    );
    // Messages beside goto are refused, as beside any command.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(ui_body(
            json!({"input": human("lost"), "command": {"goto": "model"}}),
        )),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("input beside command"), "{body}");
}

#[tokio::test]
async fn typing_during_a_review_answers_the_paused_calls_and_runs_the_new_message() {
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let app = app_with(seen.clone());

    // agent-chat-ui: a tool message per paused call, then the user's new message.
    let t = thread(&app).await;
    stream(&app, &t, ui_body(json!({"input": human("one")}))).await;
    let cp = head(&app, &t).await;
    let (status, events, text) = stream(
        &app,
        &t,
        ui_body(json!({"checkpoint": cp, "input": {"messages": [
            {"type": "tool", "tool_call_id": "call-1", "name": "echo", "content": "Cancelled by user"},
            {"type": "human", "content": "two"},
        ]}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    let model_saw = seen.lock().last().unwrap().clone();
    no_orphans(&model_saw);
    assert_eq!(model_saw.last().unwrap().text(), "two");
    let st = state(&app, &t).await;
    let messages = st["values"]["messages"].as_array().unwrap();
    let kinds: Vec<_> = messages.iter().map(|m| m["type"].clone()).collect();
    assert_eq!(kinds, ["human", "ai", "tool", "human", "ai"], "{st}");
    assert_eq!(messages[2]["content"], "Cancelled by user");
    // The new message's call is the one waiting now.
    assert_eq!(
        st["interrupts"][0]["value"]["action_requests"][0]["args"],
        json!({"query": "two"})
    );

    // A plain new message (LangGraph takes it too): the paused call gets Keel's
    // "cancelled" result, so the model never sees it unanswered.
    let (status, events, text) = stream(&app, &t, ui_body(json!({"input": human("three")}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    let model_saw = seen.lock().last().unwrap().clone();
    no_orphans(&model_saw);
    let st = state(&app, &t).await;
    let messages = st["values"]["messages"].as_array().unwrap();
    assert_eq!(messages[5]["type"], "tool", "{st}");
    assert_eq!(messages[5]["tool_call_id"], "call-4");
    assert!(
        messages[5]["content"]
            .as_str()
            .unwrap()
            .contains("was cancelled"),
        "{st}"
    );
    assert_eq!(messages[6]["content"], "three");

    // Results for calls that are not paused, or after the new message, are refused.
    for (input, expect) in [
        (
            json!({"messages": [{"type": "tool", "tool_call_id": "call-1", "content": "x"}, {"type": "human", "content": "y"}]}),
            "is not a paused call",
        ),
        (
            json!({"messages": [{"type": "human", "content": "y"}, {"type": "tool", "tool_call_id": "call-7", "content": "x"}]}),
            "comes before the new messages",
        ),
    ] {
        let (status, body) = call(
            &app,
            "POST",
            &format!("/threads/{t}/runs"),
            Some(ui_body(json!({"input": input}))),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body.contains(expect), "{expect}: {body}");
    }
}

#[tokio::test]
async fn graph_internal_stream_modes_and_ui_flags_are_accepted() {
    let app = app();
    let t = thread(&app).await;
    // What useStream sends with onTaskEvent/onCheckpointEvent/onDebugEvent.
    let mut body = ui_body(json!({"input": human("one")}));
    body["stream_mode"] = json!(["values", "messages-tuple", "tasks", "checkpoints", "debug"]);
    body["on_disconnect"] = json!("cancel");
    body["context"] = json!({"user": "u1"});
    let (status, events, text) = stream(&app, &t, body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    assert!(events.iter().any(|(e, _)| e == "values"));
    let of = |name: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|(e, _)| e == name)
            .map(|(_, d)| d)
            .collect()
    };
    // tasks: the model's start (with its input state) and its result, under one id.
    let tasks = of("tasks");
    let start = tasks
        .iter()
        .find(|d| d["name"] == "model" && d.get("input").is_some())
        .unwrap();
    assert_eq!(start["triggers"], json!(["branch:to:model"]), "{start}");
    assert_eq!(start["input"]["messages"][0]["content"], "one", "{start}");
    let end = tasks
        .iter()
        .find(|d| d["id"] == start["id"] && d.get("result").is_some())
        .unwrap();
    assert_eq!(end["error"], Value::Null);
    assert_eq!(end["result"]["messages"][0]["type"], "ai", "{end}");
    // checkpoints: each write, chained by parent, with LangGraph's step and source.
    let checkpoints = of("checkpoints");
    assert!(checkpoints.len() >= 2, "{text}");
    let input = checkpoints[0];
    assert_eq!(input["metadata"]["source"], "input", "{input}");
    assert_eq!(input["metadata"]["step"], 0, "{input}");
    assert_eq!(input["values"]["messages"][0]["content"], "one");
    // What runs next, as the thread's history says it: the model, as a pending task.
    assert_eq!(input["next"], json!(["model"]), "{input}");
    assert_eq!(input["tasks"][0]["name"], "model", "{input}");
    let model = checkpoints.last().unwrap();
    assert_eq!(model["metadata"]["source"], "loop");
    assert_eq!(
        model["parent_config"]["configurable"]["checkpoint_id"],
        checkpoints[checkpoints.len() - 2]["config"]["configurable"]["checkpoint_id"]
    );
    // The head is the last checkpoint streamed.
    let (_, state) = call(&app, "GET", &format!("/threads/{t}/state"), None).await;
    assert_eq!(
        json(&state)["checkpoint"]["checkpoint_id"],
        model["config"]["configurable"]["checkpoint_id"]
    );
    // Paused for the review: the stream and the state name the same waiting node.
    assert_eq!(model["next"], json(&state)["next"], "{model}");
    assert_eq!(model["next"].as_array().map(Vec::len), Some(1), "{model}");
    // debug: the same, typed and stepped.
    let kinds: Vec<_> = of("debug")
        .iter()
        .map(|d| d["type"].as_str().unwrap().to_owned())
        .collect();
    for kind in ["checkpoint", "task", "task_result"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
    let debug_checkpoint = of("debug")
        .into_iter()
        .find(|d| d["type"] == "checkpoint")
        .unwrap();
    assert!(debug_checkpoint["payload"]["checkpoint"]["checkpoint_id"].is_string());
    assert!(debug_checkpoint["timestamp"].is_string());
    // A run that runs no node sends none of them.
    let mut body = ui_body(json!({"input": {}, "command": {"goto": "__end__"}}));
    body["stream_mode"] = json!("debug");
    let (status, events, text) = stream(&app, &t, body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let names: Vec<_> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names, ["metadata", "end"], "{text}");
    // The run records what was asked.
    let run_id = events[0].1["run_id"].as_str().unwrap();
    let (_, body) = call(&app, "GET", &format!("/threads/{t}/runs/{run_id}"), None).await;
    assert_eq!(
        json(&body)["kwargs"]["stream_mode"],
        json!(["debug"]),
        "{body}"
    );
    // Joining with those modes is accepted too.
    let (status, _) = call(
        &app,
        "GET",
        &format!("/threads/{t}/runs/{run_id}/stream?stream_mode=debug&stream_mode=values"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // Unknown modes still get a clear 422.
    let mut body = ui_body(json!({"input": human("x")}));
    body["stream_mode"] = json!(["values", "everything"]);
    let (status, text) = call(&app, "POST", &format!("/threads/{t}/runs"), Some(body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(text.contains("everything"), "{text}");
}

#[tokio::test]
async fn threads_count_and_prune_and_the_assistants_graph_and_schemas() {
    let app = app();
    let a = thread(&app).await;
    let b = thread(&app).await;
    stream(&app, &a, ui_body(json!({"input": human("one")}))).await;
    let count = |body: Value| {
        let app = app.clone();
        async move {
            let (status, text) = call(&app, "POST", "/threads/count", Some(body)).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            json(&text)
        }
    };
    assert_eq!(count(json!({})).await, 2);
    assert_eq!(count(json!({"metadata": {"graph_id": "agent"}})).await, 1);
    assert_eq!(count(json!({"status": "interrupted"})).await, 1);
    assert_eq!(count(json!({"status": "idle"})).await, 1);

    let (status, text) = call(
        &app,
        "POST",
        "/threads/prune",
        Some(json!({"thread_ids": [a, "b6c8b1de-0000-4000-8000-000000000000"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(json(&text), json!({"pruned_count": 1}));
    let (status, _) = call(&app, "GET", &format!("/threads/{a}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(count(json!({})).await, 1);
    let (status, text) = call(
        &app,
        "POST",
        "/threads/prune",
        Some(json!({"thread_ids": [b], "strategy": "keep_latest"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(text.contains("keep_latest"), "{text}");

    for id in ["agent", "not-here"] {
        let (status, text) = call(&app, "GET", &format!("/assistants/{id}/graph"), None).await;
        if id == "not-here" {
            assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
            continue;
        }
        assert_eq!(status, StatusCode::OK, "{text}");
        let graph = json(&text);
        let nodes: Vec<_> = graph["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap().to_owned())
            .collect();
        // This agent reviews `echo`: the review node is the one `next` names.
        assert_eq!(
            nodes,
            [
                "__start__",
                "model",
                "tools",
                "HumanInTheLoopMiddleware.after_model",
                "__end__"
            ]
        );
        assert_eq!(
            graph["edges"][0],
            json!({"source": "__start__", "target": "model"})
        );
    }
    let (status, text) = call(&app, "GET", "/assistants/agent/schemas", None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let schemas = json(&text);
    assert_eq!(schemas["graph_id"], "agent");
    assert_eq!(
        schemas["state_schema"]["properties"]["messages"]["type"],
        "array"
    );
}

/// Reads an endless SSE body until `runs_done` runs have ended; `(event, id, data)`.
async fn read_thread_stream(
    body: axum::body::Body,
    runs_done: usize,
) -> Vec<(String, String, Value)> {
    use futures::StreamExt;
    let mut data = body.into_data_stream();
    let mut text = String::new();
    let read = async {
        while text.matches("\"run_done\"").count() < runs_done {
            let chunk = data.next().await.unwrap().unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("the thread stream told every run's end");
    text.split("\n\n")
        .filter_map(|block| {
            let (mut event, mut id, mut data) = (None, None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            Some((event?, id?, serde_json::from_str(&data).ok()?))
        })
        .collect()
}

async fn open_thread_stream(
    app: &Router,
    t: &str,
    last_event_id: Option<&str>,
) -> axum::body::Body {
    use tower::ServiceExt;
    let mut request =
        axum::http::Request::builder().uri(format!("/threads/{t}/stream?stream_mode=values"));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = app
        .clone()
        .oneshot(request.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body()
}

#[tokio::test]
async fn the_thread_stream_sends_every_later_run_and_resumes_after_last_event_id() {
    let app = app();
    let t = thread(&app).await;
    let (_, events, _) = stream(&app, &t, ui_body(json!({"input": human("one")}))).await;
    let first_run = events[0].1["run_id"].as_str().unwrap().to_owned();
    let body = open_thread_stream(&app, &t, None).await;
    // A run that ends at once ("Mark as resolved"), then a model run.
    let (_, events, _) = stream(&app, &t, ui_body(json!({"command": {"goto": "__end__"}}))).await;
    let second = events[0].1["run_id"].as_str().unwrap().to_owned();
    let (_, events, _) = stream(&app, &t, ui_body(json!({"input": human("two")}))).await;
    let third = events[0].1["run_id"].as_str().unwrap().to_owned();
    let seen = read_thread_stream(body, 2).await;
    assert!(
        !seen.iter().any(|(_, id, _)| id.starts_with(&first_run)),
        "{seen:?}"
    );
    let done: Vec<_> = seen
        .iter()
        .filter(|(e, _, d)| e == "metadata" && d["status"] == "run_done")
        .map(|(_, _, d)| d["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(done, [second.clone(), third.clone()]);
    // Only the modes asked for, plus the runs' own events.
    assert!(
        seen.iter()
            .all(|(e, _, _)| e == "metadata" || e == "values"),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(e, id, _)| e == "values" && id.starts_with(&third))
    );
    assert_eq!(seen[0].1, format!("{second}:0"));

    // Reconnecting after the second run's first event: the rest, in order.
    let body = open_thread_stream(&app, &t, Some(&seen[0].1)).await;
    let again = read_thread_stream(body, 2).await;
    assert_eq!(again, seen[1..].to_vec());

    // `-1`: from the oldest run still kept, the first one.
    let body = open_thread_stream(&app, &t, Some("-1")).await;
    let all = read_thread_stream(body, 3).await;
    assert!(all[0].1.starts_with(&first_run), "{all:?}");
    assert_eq!(all[all.len() - seen.len()..], seen[..]);

    let (status, body) = call(
        &app,
        "GET",
        "/threads/7d0c2a4e-0000-4000-8000-000000000000/stream",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn joining_a_run_with_last_event_id_minus_one_replays_it_from_the_start() {
    let app = app();
    let t = thread(&app).await;
    let (_, events, _) = stream(&app, &t, ui_body(json!({"input": human("one")}))).await;
    let run_id = events[0].1["run_id"].as_str().unwrap().to_owned();
    // useStream's joinStream sends `Last-Event-ID: -1` unless it has seen an event.
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .uri(format!("/threads/{t}/runs/{run_id}/stream"))
        .header("last-event-id", "-1")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .unwrap();
    let replayed: Vec<(String, Value)> = common::events(std::str::from_utf8(&bytes).unwrap())
        .into_iter()
        .map(|(event, _, data)| (event, data))
        .collect();
    assert_eq!(replayed, events);
}

#[tokio::test]
async fn the_graph_of_an_agent_without_reviews_is_model_and_tools() {
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("hi")));
    let agent = StackConfig::from_yaml_str("tools: [echo]\n")
        .unwrap()
        .build_with_model(Arc::new(Store::memory()), Arc::new(model), false)
        .unwrap();
    let app = router(agent);
    let (status, text) = call(&app, "GET", "/assistants/agent/graph", None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let graph = json(&text);
    let nodes: Vec<_> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(nodes, ["__start__", "model", "tools", "__end__"]);
    assert_eq!(
        graph["edges"][1],
        json!({"source": "model", "target": "tools", "conditional": true})
    );
}

#[tokio::test]
async fn command_update_writes_messages_as_langgraph_applies_an_update() {
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let app = app_with(seen.clone());
    let update = |text: &str| json!({"update": {"messages": [{"type": "human", "content": text}]}});
    // A thread that never ran: the graph runs from its start, as for input.
    let t = thread(&app).await;
    let (status, events, text) = stream(&app, &t, ui_body(json!({"command": update("one")}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(status_of(&events), "success", "{text}");
    assert_eq!(seen.lock().len(), 1);
    assert_eq!(state(&app, &t).await["next"].as_array().unwrap().len(), 1);
    // Paused: refused (LangGraph would leave the paused call without a result).
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs"),
        Some(ui_body(json!({"command": update("two")}))),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("waiting for a review"), "{body}");
    stream(&app, &t, ui_body(json!({"command": {"goto": "__end__"}}))).await;
    // A thread whose run is over: the messages are written, nothing runs.
    for command in [update("two"), {
        let mut c = update("three");
        c["goto"] = json!("__end__");
        c
    }] {
        let (status, events, text) = stream(&app, &t, ui_body(json!({"command": command}))).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(status_of(&events), "success", "{text}");
        assert!(
            events
                .iter()
                .any(|(e, d)| e == "updates" && d.get("update").is_some()),
            "{text}"
        );
    }
    assert_eq!(seen.lock().len(), 1, "the model ran once");
    let st = state(&app, &t).await;
    let messages = st["values"]["messages"].as_array().unwrap();
    let texts: Vec<_> = messages[messages.len() - 2..]
        .iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(texts, ["two", "three"], "{st}");
    assert_eq!(st["next"], json!([]));
    assert_eq!(st["metadata"]["node"], "update");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_wait_answers_with_the_values_before_its_thread_goes() {
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("hi")));
    let agent = StackConfig::from_yaml_str("tools: []\n")
        .unwrap()
        .build_with_model(Arc::new(Store::memory()), Arc::new(model), false)
        .unwrap();
    let app = router(agent);
    for _ in 0..200 {
        let (status, body) = call(
            &app,
            "POST",
            "/runs/wait",
            Some(json!({"assistant_id": "agent", "input": human("no thread")})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(json(&body)["messages"][1]["content"], "hi", "{body}");
    }
}
