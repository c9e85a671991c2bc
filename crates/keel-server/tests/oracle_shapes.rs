//! Objects shaped as langgraph-api shapes them, where the differential suite against it
//! found Keel answering otherwise: thread and run objects, thread states, cancel with
//! `wait`, and an unknown assistant.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::http::StatusCode;
use common::{call, json};
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile};
use keel_server::{ServerOptions, router_with};
use serde_json::{Value, json};

/// Answers `echo: <last message>` after a pause.
struct SlowEcho {
    profile: ModelProfile,
    delay: Duration,
}

#[async_trait]
impl ChatModel for SlowEcho {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        tokio::time::sleep(self.delay).await;
        let said = request
            .messages
            .last()
            .map(|m| m.text().into_owned())
            .unwrap_or_default();
        Ok(Message::ai(format!("echo: {said}")))
    }
}

fn app(delay: Duration) -> Router {
    let model = SlowEcho {
        profile: ModelProfile::new("slow", "scripted"),
        delay,
    };
    let agent = Agent::builder().model(Arc::new(model)).build().unwrap();
    router_with(agent, ServerOptions::default())
}

async fn post(app: &Router, path: &str, body: Value) -> (StatusCode, Value) {
    let (status, text) = call(app, "POST", path, None, Some(body)).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn get(app: &Router, path: &str) -> Value {
    let (status, text) = call(app, "GET", path, None, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    json(&text)
}

fn say(text: &str) -> Value {
    json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": text}]}})
}

#[tokio::test]
async fn a_thread_that_never_ran_has_null_values_a_config_and_state_updated_at() {
    let app = app(Duration::ZERO);
    let (status, created) = post(&app, "/threads", json!({"metadata": {"suite": "x"}})).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let t = created["thread_id"].as_str().unwrap().to_owned();
    let (status, patched) = call(
        &app,
        "PATCH",
        &format!("/threads/{t}"),
        None,
        Some(json!({"metadata": {"more": 1}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    for thread in [
        created.clone(),
        get(&app, &format!("/threads/{t}")).await,
        json(&patched),
    ] {
        assert_eq!(thread["values"], Value::Null, "{thread}");
        assert_eq!(thread["config"], json!({}), "{thread}");
        assert_eq!(thread["state_updated_at"], thread["created_at"], "{thread}");
    }
    let (_, found) = post(&app, "/threads/search", json!({"metadata": {"suite": "x"}})).await;
    assert_eq!(found[0]["values"], Value::Null, "{found}");
    assert!(found[0]["state_updated_at"].is_string(), "{found}");

    let (status, _) = post(&app, &format!("/threads/{t}/runs/wait"), say("hi")).await;
    assert_eq!(status, StatusCode::OK);
    let thread = get(&app, &format!("/threads/{t}")).await;
    assert_eq!(thread["values"]["messages"][1]["content"], "echo: hi");
    let state = get(&app, &format!("/threads/{t}/state")).await;
    // The state changed with the run's last checkpoint.
    assert_eq!(thread["state_updated_at"], state["created_at"], "{thread}");
}

#[tokio::test]
async fn a_thread_state_has_checkpoint_ids_and_the_run_metadata() {
    let app = app(Duration::ZERO);
    let (_, created) = post(&app, "/threads", json!({"metadata": {"suite": "x"}})).await;
    let t = created["thread_id"].as_str().unwrap().to_owned();
    post(&app, &format!("/threads/{t}/runs/wait"), say("hi")).await;
    let state = get(&app, &format!("/threads/{t}/state")).await;
    assert_eq!(
        state["checkpoint_id"], state["checkpoint"]["checkpoint_id"],
        "{state}"
    );
    assert_eq!(
        state["parent_checkpoint_id"], state["parent_checkpoint"]["checkpoint_id"],
        "{state}"
    );
    assert!(state["parent_checkpoint_id"].is_string(), "{state}");
    let meta = &state["metadata"];
    assert_eq!(meta["graph_id"], "agent", "{state}");
    assert!(meta["assistant_id"].is_string(), "{state}");
    assert_eq!(meta["suite"], "x", "{state}");
    assert_eq!(meta["thread_id"], t.as_str(), "{state}");

    let (_, history) = post(&app, &format!("/threads/{t}/history"), json!({})).await;
    let first = history.as_array().unwrap().last().unwrap();
    assert_eq!(first["parent_checkpoint_id"], Value::Null, "{first}");
    assert_eq!(first["metadata"]["suite"], "x", "{first}");
    // History filters see the same metadata.
    let (_, filtered) = post(
        &app,
        &format!("/threads/{t}/history"),
        json!({"metadata": {"graph_id": "agent", "suite": "x", "step": -1}}),
    )
    .await;
    assert_eq!(filtered.as_array().unwrap().len(), 1, "{filtered}");

    let empty = {
        let (_, created) = post(&app, "/threads", json!({})).await;
        created["thread_id"].as_str().unwrap().to_owned()
    };
    let state = get(&app, &format!("/threads/{empty}/state")).await;
    assert_eq!(state["checkpoint_id"], Value::Null, "{state}");
    assert_eq!(state["parent_checkpoint_id"], Value::Null, "{state}");
}

#[tokio::test]
async fn a_run_carries_the_graph_the_assistant_and_the_thread_metadata() {
    let app = app(Duration::ZERO);
    let (_, created) = post(&app, "/threads", json!({"metadata": {"suite": "x"}})).await;
    let t = created["thread_id"].as_str().unwrap().to_owned();
    let mut body = say("hi");
    body["metadata"] = json!({"mine": 1});
    let (status, run) = post(&app, &format!("/threads/{t}/runs"), body).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    for run in [
        run.clone(),
        get(
            &app,
            &format!("/threads/{t}/runs/{}", run["run_id"].as_str().unwrap()),
        )
        .await,
    ] {
        let meta = &run["metadata"];
        assert_eq!(meta["graph_id"], "agent", "{run}");
        assert_eq!(meta["assistant_id"], run["assistant_id"], "{run}");
        assert_eq!(meta["created_by"], "system", "{run}");
        assert_eq!(meta["suite"], "x", "{run}");
        assert_eq!(meta["mine"], 1, "{run}");
    }
}

#[tokio::test]
async fn cancel_with_wait_answers_an_object_and_leaves_the_thread_interrupted() {
    let app = app(Duration::from_secs(30));
    let (_, created) = post(&app, "/threads", json!({})).await;
    let t = created["thread_id"].as_str().unwrap().to_owned();
    let (_, run) = post(&app, &format!("/threads/{t}/runs"), say("slow")).await;
    let r = run["run_id"].as_str().unwrap().to_owned();
    for _ in 0..200 {
        if get(&app, &format!("/threads/{t}/runs/{r}")).await["status"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, text) = call(
        &app,
        "POST",
        &format!("/threads/{t}/runs/{r}/cancel?wait=1"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(json(&text), json!({}));
    assert_eq!(
        get(&app, &format!("/threads/{t}/runs/{r}")).await["status"],
        "interrupted"
    );
    assert_eq!(
        get(&app, &format!("/threads/{t}")).await["status"],
        "interrupted"
    );
}

#[tokio::test]
async fn an_assistant_id_that_is_no_uuid_nor_graph_is_422_an_unknown_uuid_404() {
    let app = app(Duration::ZERO);
    let (_, created) = post(&app, "/threads", json!({})).await;
    let t = created["thread_id"].as_str().unwrap().to_owned();
    let mut body = say("x");
    body["assistant_id"] = json!("nope");
    let (status, answer) = post(&app, &format!("/threads/{t}/runs/wait"), body.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer["detail"].as_str().unwrap().contains("nope"),
        "{answer}"
    );
    body["assistant_id"] = json!("5f1a0c39-9bd5-4c3e-9d55-0c8cc2d6a7e1");
    let (status, answer) = post(&app, &format!("/threads/{t}/runs/wait"), body).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
}
