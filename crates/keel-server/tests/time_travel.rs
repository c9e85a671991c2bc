//! Time travel, as LangGraph's Agent Server does it: a run may start from any checkpoint
//! of its thread (from an earlier one it forks a new branch, which the thread's state
//! then follows), a thread's first checkpoint is an empty step -1 (so "edit the first
//! message" replaces it), `POST /threads/{id}/state` writes a checkpoint as a node
//! would, `POST /threads/{id}/copy` copies a thread, and all of it is owner-scoped. Run
//! on the in-memory store and on SQLite.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::StatusCode;
use keel_core::message::Message;
use keel_server::ApiKeys;
use keel_server::Registry;
use keel_server::config::StackConfig;
use keel_server::{ServerOptions, router_with};
use keel_store::Store;
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};

const ALICE: &str = "alice-key";
const BOB: &str = "bob-key";

/// Answers `reply <n> to <last message>`, `n` counting the model's calls, so a
/// regenerated answer differs from the first one.
async fn server(store: Store) -> Router {
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::from_fn(move |request| {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        let said = request
            .messages
            .last()
            .map(|m| m.text().into_owned())
            .unwrap_or_default();
        Ok(Message::ai(format!("reply {n} to {said}")))
    });
    let registry = Registry::for_store(&store).await.unwrap();
    let agent = StackConfig::from_yaml_str("tools: []\n")
        .unwrap()
        .build_with_model(Arc::new(store), Arc::new(model), false)
        .unwrap();
    let options = ServerOptions {
        api_keys: ApiKeys::new(HashMap::from([
            (ALICE.to_owned(), "alice".to_owned()),
            (BOB.to_owned(), "bob".to_owned()),
        ])),
        registry: Some(Arc::new(registry)),
        ..ServerOptions::default()
    };
    router_with(agent, options)
}

async fn stores() -> Vec<Store> {
    vec![
        Store::memory(),
        Store::connect("sqlite::memory:").await.unwrap(),
    ]
}

async fn call(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    call_as(app, ALICE, method, path, body).await
}

async fn call_as(
    app: &Router,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, text) = common::call(app, method, path, Some(key), body).await;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

async fn thread(app: &Router) -> String {
    let (status, body) = call(app, "POST", "/threads", Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["thread_id"].as_str().unwrap().to_owned()
}

fn human(text: &str) -> Value {
    json!({"messages": [{"type": "human", "content": text}]})
}

/// Runs to the end (`/runs/wait`) with `extra` merged into the body.
async fn run(app: &Router, t: &str, input: Value, extra: Value) -> Value {
    let mut body = json!({"assistant_id": "agent", "input": input});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (status, out) = call(app, "POST", &format!("/threads/{t}/runs/wait"), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    out
}

fn texts(state: &Value) -> Vec<String> {
    state["values"]["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| m["content"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn state(app: &Router, t: &str) -> Value {
    let (status, body) = call(app, "GET", &format!("/threads/{t}/state"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn history(app: &Router, t: &str, body: Value) -> Vec<Value> {
    let (status, out) = call(app, "POST", &format!("/threads/{t}/history"), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    out.as_array().unwrap().clone()
}

fn id_of(state: &Value) -> String {
    state["checkpoint"]["checkpoint_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Every state's parent is the next (older) one in the list, and the oldest has none.
fn assert_chain(states: &[Value]) {
    for pair in states.windows(2) {
        assert_eq!(
            pair[0]["parent_checkpoint"]["checkpoint_id"],
            pair[1]["checkpoint"]["checkpoint_id"],
            "{:#}",
            Value::Array(states.to_vec())
        );
    }
    assert_eq!(states.last().unwrap()["parent_checkpoint"], Value::Null);
}

#[tokio::test]
async fn a_threads_first_checkpoint_is_an_empty_step_minus_one() {
    for store in stores().await {
        let app = server(store).await;
        let t = thread(&app).await;
        run(&app, &t, human("one"), json!({})).await;
        let all = history(&app, &t, json!({"limit": 100})).await;
        let first = all.last().unwrap();
        assert_eq!(first["metadata"]["step"], -1, "{first:#}");
        assert_eq!(first["metadata"]["source"], "input");
        assert_eq!(first["values"]["messages"], json!([]), "{first:#}");
        assert_eq!(first["parent_checkpoint"], Value::Null);
        let steps: Vec<i64> = all
            .iter()
            .map(|s| s["metadata"]["step"].as_i64().unwrap())
            .collect();
        assert_eq!(steps, [1, 0, -1], "{all:#?}");
        // What runs next from each, as LangGraph's history says: the start, the model
        // (the checkpoint a regenerate starts from), then nothing after the answer.
        let next: Vec<&Value> = all.iter().map(|s| &s["next"]).collect();
        assert_eq!(
            next,
            [&json!([]), &json!(["model"]), &json!(["__start__"])],
            "{all:#?}"
        );
        assert_eq!(all[1]["tasks"][0]["name"], "model", "{all:#?}");
        assert_eq!(all[1]["tasks"][0]["result"], Value::Null);
        assert_eq!(all[0]["tasks"], json!([]));
        assert_chain(&all);
    }
}

#[tokio::test]
async fn editing_the_first_message_forks_from_the_empty_checkpoint_and_replaces_it() {
    for store in stores().await {
        let app = server(store).await;
        let t = thread(&app).await;
        run(&app, &t, human("one"), json!({})).await;
        let old_head = state(&app, &t).await;
        assert_eq!(texts(&old_head), ["one", "reply 1 to one"]);
        let all = history(&app, &t, json!({"limit": 100})).await;
        let empty = all.last().unwrap();
        // What agent-chat-ui sends to edit a message: its parent checkpoint.
        let out = run(
            &app,
            &t,
            human("uno"),
            json!({"checkpoint": empty["checkpoint"].clone()}),
        )
        .await;
        assert_eq!(out["messages"].as_array().unwrap().len(), 2, "{out:#}");
        let head = state(&app, &t).await;
        assert_eq!(texts(&head), ["uno", "reply 2 to uno"]);
        // The current branch goes back to the shared empty checkpoint.
        let branch = history(
            &app,
            &t,
            json!({"limit": 100, "checkpoint": head["checkpoint"].clone()}),
        )
        .await;
        assert_eq!(branch.len(), 3, "{branch:#?}");
        assert_eq!(branch[0]["checkpoint"], head["checkpoint"]);
        assert_eq!(branch[2]["checkpoint"], empty["checkpoint"]);
        assert_chain(&branch);
        // The old branch is still readable: by id, and as a history from its head.
        let (status, old) = call(
            &app,
            "GET",
            &format!("/threads/{t}/state/{}", id_of(&old_head)),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{old}");
        assert_eq!(texts(&old), ["one", "reply 1 to one"]);
        let old_branch = history(
            &app,
            &t,
            json!({"checkpoint": old_head["checkpoint"].clone(), "limit": 100}),
        )
        .await;
        assert_eq!(
            old_branch.iter().map(texts).collect::<Vec<_>>(),
            [
                vec!["one".to_owned(), "reply 1 to one".to_owned()],
                vec!["one".to_owned()],
                vec![]
            ]
        );
        // The thread's history lists both branches, newest first, as LangGraph's does:
        // the new branch's answer and input, then the old branch's, then the root.
        let tree = history(&app, &t, json!({"limit": 100})).await;
        assert_eq!(
            tree.iter().map(texts).collect::<Vec<_>>(),
            [
                vec!["uno".to_owned(), "reply 2 to uno".to_owned()],
                vec!["uno".to_owned()],
                vec!["one".to_owned(), "reply 1 to one".to_owned()],
                vec!["one".to_owned()],
                vec![]
            ],
            "{tree:#?}"
        );
        assert_eq!(tree[1]["parent_checkpoint"], empty["checkpoint"]);
        assert_eq!(tree[3]["parent_checkpoint"], empty["checkpoint"]);
        // The next run continues the new branch.
        run(&app, &t, human("dos"), json!({})).await;
        assert_eq!(
            texts(&state(&app, &t).await),
            ["uno", "reply 2 to uno", "dos", "reply 3 to dos"]
        );
    }
}

#[tokio::test]
async fn regenerating_forks_from_the_checkpoint_before_the_answer() {
    for store in stores().await {
        let app = server(store).await;
        let t = thread(&app).await;
        run(&app, &t, human("one"), json!({})).await;
        run(&app, &t, human("two"), json!({})).await;
        let all = history(&app, &t, json!({"limit": 100})).await;
        // The checkpoint before the answer: "two" is its last message, the model next.
        let before_answer = all
            .iter()
            .find(|s| s["next"] == json!(["model"]) && texts(s).len() == 3)
            .unwrap();
        assert_eq!(texts(before_answer).last().unwrap(), "two");
        // Through the streaming endpoint with a bare checkpoint_id and no input.
        let body = json!({
            "assistant_id": "agent",
            "input": null,
            "checkpoint_id": id_of(before_answer),
            "stream_mode": ["values"],
        });
        let (status, text) = common::call(
            &app,
            "POST",
            &format!("/threads/{t}/runs/stream"),
            Some(ALICE),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert!(text.contains("reply 3 to two"), "{text}");
        let head = state(&app, &t).await;
        assert_eq!(
            texts(&head),
            ["one", "reply 1 to one", "two", "reply 3 to two"]
        );
        assert_eq!(
            head["parent_checkpoint"]["checkpoint_id"].as_str().unwrap(),
            id_of(before_answer)
        );
        // Paging the current branch with before and limit.
        let tip = head["checkpoint"].clone();
        let first = history(&app, &t, json!({"limit": 2, "checkpoint": tip})).await;
        let rest = history(
            &app,
            &t,
            json!({"limit": 100, "before": first[1]["checkpoint"].clone(), "checkpoint": tip}),
        )
        .await;
        let mut paged = first.clone();
        paged.extend(rest);
        assert_chain(&paged);
        assert_eq!(paged[1]["checkpoint"], before_answer["checkpoint"]);
        // The empty first checkpoint, one, its answer, two, the new answer.
        assert_eq!(paged.len(), 5, "{paged:#?}");
        // Paging the whole thread: every checkpoint of both branches once, newest first
        // (the abandoned answer right after the new one).
        let first = history(&app, &t, json!({"limit": 2})).await;
        let rest = history(
            &app,
            &t,
            json!({"limit": 100, "before": first[1]["checkpoint"].clone()}),
        )
        .await;
        let mut tree = first.clone();
        tree.extend(rest);
        assert_eq!(tree.len(), 6, "{tree:#?}");
        assert_eq!(tree[0]["checkpoint"], head["checkpoint"]);
        assert_eq!(
            texts(&tree[1]),
            ["one", "reply 1 to one", "two", "reply 2 to two"]
        );
        let mut ids: Vec<String> = tree.iter().map(id_of).collect();
        ids.dedup();
        assert_eq!(ids.len(), 6);
        // The metadata filter applies to every branch too.
        let inputs = history(
            &app,
            &t,
            json!({"limit": 100, "metadata": {"source": "input"}}),
        )
        .await;
        assert!(inputs.iter().all(|s| s["metadata"]["source"] == "input"));
        assert!(!inputs.is_empty());
    }
}

#[tokio::test]
async fn a_checkpoint_the_thread_lacks_or_another_owners_thread_is_refused() {
    let app = server(Store::memory()).await;
    let t = thread(&app).await;
    run(&app, &t, human("one"), json!({})).await;
    let body = json!({"assistant_id": "agent", "input": human("x"), "checkpoint_id": "00000000-0000-4000-8000-0000000003e7"});
    let (status, out) = call(&app, "POST", &format!("/threads/{t}/runs/wait"), Some(body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{out}");
    assert!(
        out.to_string().contains("is not a checkpoint of thread"),
        "{out}"
    );
    let cp = history(&app, &t, json!({"limit": 100}))
        .await
        .last()
        .unwrap()["checkpoint"]
        .clone();
    for (method, path, body) in [
        (
            "POST",
            format!("/threads/{t}/state"),
            json!({"values": human("x")["messages"].clone()}),
        ),
        ("POST", format!("/threads/{t}/copy"), json!({})),
        (
            "POST",
            format!("/threads/{t}/history"),
            json!({"checkpoint": cp.clone()}),
        ),
        (
            "POST",
            format!("/threads/{t}/runs/wait"),
            json!({"assistant_id": "agent", "input": human("x"), "checkpoint": cp.clone()}),
        ),
    ] {
        let (status, out) = call_as(&app, BOB, method, &path, Some(body)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {out}");
    }
    assert_eq!(texts(&state(&app, &t).await), ["one", "reply 1 to one"]);
}

#[tokio::test]
async fn update_state_writes_a_checkpoint_as_a_node_and_may_fork() {
    for store in stores().await {
        let app = server(store).await;
        let t = thread(&app).await;
        run(&app, &t, human("one"), json!({})).await;
        let head = state(&app, &t).await;
        let first_id = head["values"]["messages"][0]["id"].clone();
        // Replacing a message by id, and appending one without.
        let (status, out) = call(
            &app,
            "POST",
            &format!("/threads/{t}/state"),
            Some(json!({
                "values": {"messages": [
                    {"type": "human", "content": "one, edited", "id": first_id},
                    {"type": "ai", "content": "added"},
                ]},
                "as_node": "model",
            })),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{out}");
        assert_eq!(out["checkpoint"]["thread_id"], t.as_str(), "{out}");
        assert_eq!(out["checkpoint"]["checkpoint_ns"], "");
        let now = state(&app, &t).await;
        assert_eq!(now["checkpoint"], out["checkpoint"]);
        // As langgraph-api answers: the id at the top level and as a config.
        assert_eq!(out["checkpoint_id"], now["checkpoint"]["checkpoint_id"]);
        assert_eq!(
            out["configurable"],
            json!({"thread_id": t, "checkpoint_ns": "", "checkpoint_id": out["checkpoint_id"]})
        );
        assert_eq!(texts(&now), ["one, edited", "reply 1 to one", "added"]);
        assert_eq!(now["metadata"]["source"], "update", "{now:#}");
        assert_eq!(now["parent_checkpoint"], head["checkpoint"]);
        // From an earlier checkpoint: a fork the thread then follows.
        let all = history(&app, &t, json!({"limit": 100})).await;
        let empty = all.last().unwrap();
        let (status, out) = call(
            &app,
            "POST",
            &format!("/threads/{t}/state"),
            Some(json!({"values": {"messages": "fresh start"}, "checkpoint_id": id_of(empty)})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{out}");
        let now = state(&app, &t).await;
        assert_eq!(texts(&now), ["fresh start"]);
        assert_eq!(now["parent_checkpoint"], empty["checkpoint"]);
        // Removing by id.
        let id = now["values"]["messages"][0]["id"].clone();
        let (status, out) = call(
            &app,
            "POST",
            &format!("/threads/{t}/state"),
            Some(json!({"values": {"messages": [{"type": "remove", "id": id}]}})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{out}");
        assert!(texts(&state(&app, &t).await).is_empty());
        // Bad input names the field and what is allowed.
        for (body, expect) in [
            (
                json!({"values": {"messages": []}, "as_node": "planner"}),
                "model, tools, input",
            ),
            (json!({"values": {"todos": []}}), "values.todos"),
            (json!({"values": [1]}), "values must be an object"),
            (
                json!({"values": {"messages": [{"type": "remove", "id": "nope"}]}}),
                "nope",
            ),
            (
                json!({"values": {}, "checkpoint_id": "bogus"}),
                "not one this server issued",
            ),
        ] {
            let (status, out) =
                call(&app, "POST", &format!("/threads/{t}/state"), Some(body)).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{out}");
            assert!(out.to_string().contains(expect), "{expect}: {out}");
        }
        // On a thread that never ran: after an empty first checkpoint.
        let fresh = thread(&app).await;
        let (status, out) = call(
            &app,
            "POST",
            &format!("/threads/{fresh}/state"),
            Some(json!({"values": {"messages": [{"type": "human", "content": "seeded"}]}})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{out}");
        let all = history(&app, &fresh, json!({})).await;
        assert_eq!(
            all.iter().map(texts).collect::<Vec<_>>(),
            [vec!["seeded".to_owned()], vec![]]
        );
    }
}

#[tokio::test]
async fn copy_makes_an_independent_thread_of_the_same_owner() {
    for store in stores().await {
        let app = server(store).await;
        let t = thread(&app).await;
        let (status, _) = call(
            &app,
            "PATCH",
            &format!("/threads/{t}"),
            Some(json!({"metadata": {"topic": "travel"}})),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        run(&app, &t, human("one"), json!({})).await;
        let (status, copy) =
            call(&app, "POST", &format!("/threads/{t}/copy"), Some(json!({}))).await;
        assert_eq!(status, StatusCode::OK, "{copy}");
        let c = copy["thread_id"].as_str().unwrap().to_owned();
        assert_ne!(c, t);
        assert_eq!(copy["metadata"]["topic"], "travel", "{copy:#}");
        assert_eq!(
            texts(&json!({"values": copy["values"].clone()})),
            ["one", "reply 1 to one"]
        );
        let (src, dst) = (
            history(&app, &t, json!({"limit": 100})).await,
            history(&app, &c, json!({"limit": 100})).await,
        );
        assert_eq!(
            src.iter().map(texts).collect::<Vec<_>>(),
            dst.iter().map(texts).collect::<Vec<_>>()
        );
        assert_eq!(dst[0]["checkpoint"]["thread_id"], c.as_str());
        // Each goes on alone.
        run(&app, &c, human("two"), json!({})).await;
        assert_eq!(texts(&state(&app, &t).await), ["one", "reply 1 to one"]);
        assert_eq!(texts(&state(&app, &c).await).len(), 4);
        // Another owner sees neither; deleting the source leaves the copy.
        let (status, _) = call_as(&app, BOB, "GET", &format!("/threads/{c}"), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = call(&app, "DELETE", &format!("/threads/{t}"), None).await;
        assert!(status.is_success());
        assert_eq!(texts(&state(&app, &c).await).len(), 4);
    }
}

#[tokio::test]
async fn deleting_a_thread_deletes_every_branch() {
    let app = server(Store::memory()).await;
    let t = thread(&app).await;
    run(&app, &t, human("one"), json!({})).await;
    let old = state(&app, &t).await;
    let empty = history(&app, &t, json!({"limit": 100}))
        .await
        .last()
        .unwrap()
        .clone();
    run(
        &app,
        &t,
        human("uno"),
        json!({"checkpoint": empty["checkpoint"].clone()}),
    )
    .await;
    let (status, _) = call(&app, "DELETE", &format!("/threads/{t}"), None).await;
    assert!(status.is_success());
    let (status, _) = call(&app, "POST", "/threads", Some(json!({"thread_id": t}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, out) = call(
        &app,
        "GET",
        &format!("/threads/{t}/state/{}", id_of(&old)),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{out}");
    assert!(history(&app, &t, json!({"limit": 100})).await.is_empty());
}
