//! A run's life on the router in process: multitask strategies under a burst, final
//! statuses that storage refuses for a while.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::sync::Arc;
use std::time::Duration;

use super::common::{call, events, json};
use async_trait::async_trait;
use axum::Router;
use axum::http::StatusCode;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile};
use keel_server::RunLimits;
use keel_server::registry::{Registry, RunStatus, ThreadStatus};
use keel_server::{ServerOptions, router_parts, router_with};
use keel_store::Store;
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};

/// Answers `echo: <last message>` after a pause, so runs overlap.
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

fn slow_agent(delay: Duration) -> Agent {
    let model = SlowEcho {
        profile: ModelProfile::new("slow", "scripted"),
        delay,
    };
    Agent::builder().model(Arc::new(model)).build().unwrap()
}

async fn new_thread(app: &Router) -> String {
    let (status, body) = call(app, "POST", "/threads", None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    json(&body)["thread_id"].as_str().unwrap().to_owned()
}

fn run_body(text: &str, strategy: &str) -> Value {
    json!({
        "assistant_id": "agent",
        "input": {"messages": [{"role": "user", "content": text}]},
        "multitask_strategy": strategy,
    })
}

/// The texts of the thread's AI messages.
async fn answers(app: &Router, thread: &str) -> Vec<String> {
    let (_, body) = call(app, "GET", &format!("/threads/{thread}/state"), None, None).await;
    json(&body)["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "ai")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

/// Starts 20 runs on one thread back to back with `strategy`, waits for the last, and
/// returns the thread and the runs' ids in the order they were admitted.
async fn burst(app: &Router, strategy: &str) -> (String, Vec<String>) {
    let thread = new_thread(app).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let (status, body) = call(
            app,
            "POST",
            &format!("/threads/{thread}/runs"),
            None,
            Some(run_body(&format!("m{i}"), strategy)),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        ids.push(json(&body)["run_id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let (status, body) = call(
            app,
            "GET",
            &format!("/threads/{thread}/runs/{id}/join"),
            None,
            None,
        )
        .await;
        assert!(
            status == StatusCode::OK || status == StatusCode::NOT_FOUND,
            "{status} {body}"
        );
    }
    (thread, ids)
}

async fn run_statuses(app: &Router, thread: &str) -> Vec<(String, String)> {
    let (_, body) = call(
        app,
        "GET",
        &format!("/threads/{thread}/runs?limit=100"),
        None,
        None,
    )
    .await;
    json(&body)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn interrupt_under_a_burst_cancels_every_earlier_run_and_answers_only_the_last() {
    let app = router_with(
        slow_agent(Duration::from_millis(30)),
        ServerOptions::default(),
    );
    let (thread, ids) = burst(&app, "interrupt").await;
    let statuses = run_statuses(&app, &thread).await;
    assert_eq!(statuses.len(), 20);
    for (id, status) in &statuses {
        let expected = if id == ids.last().unwrap() {
            "success"
        } else {
            "interrupted"
        };
        assert_eq!(status, expected, "run {id} of {ids:?}: {statuses:?}");
    }
    assert_eq!(answers(&app, &thread).await, ["echo: m19"]);
}

#[tokio::test]
async fn rollback_under_a_burst_leaves_only_the_last_run_and_its_answer() {
    let app = router_with(
        slow_agent(Duration::from_millis(30)),
        ServerOptions::default(),
    );
    let (thread, ids) = burst(&app, "rollback").await;
    let statuses = run_statuses(&app, &thread).await;
    assert_eq!(
        statuses,
        [(ids.last().unwrap().clone(), "success".to_owned())],
        "rolled-back runs lose their records"
    );
    assert_eq!(answers(&app, &thread).await, ["echo: m19"]);
}

/// Makes every update of the server's run and thread records fail, as a disk that
/// answers EIO would, until [`heal`] (SQLite triggers: the test double lives in the
/// database, the product code is unchanged).
async fn break_record_updates(pool: &sqlx::SqlitePool) {
    for statement in [
        "CREATE TRIGGER fail_runs BEFORE UPDATE ON keel_server_runs BEGIN SELECT RAISE(ABORT, 'disk I/O error (injected)'); END",
        "CREATE TRIGGER fail_threads BEFORE UPDATE ON keel_server_threads BEGIN SELECT RAISE(ABORT, 'disk I/O error (injected)'); END",
    ] {
        sqlx::query(statement).execute(pool).await.unwrap();
    }
}

async fn heal(pool: &sqlx::SqlitePool) {
    for statement in ["DROP TRIGGER fail_runs", "DROP TRIGGER fail_threads"] {
        sqlx::query(statement).execute(pool).await.unwrap();
    }
}

#[tokio::test]
async fn a_run_whose_final_status_cannot_be_written_ends_as_error_and_is_recorded_later() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let Store::Sqlite(sqlite) = &store else {
        panic!("not SQLite")
    };
    let pool = sqlite.pool().clone();
    let registry = Arc::new(Registry::for_store(&store).await.unwrap());
    let echo = ScriptedModel::from_fn(|request| {
        let said = request
            .messages
            .last()
            .map(|m| m.text().into_owned())
            .unwrap_or_default();
        Ok(Message::ai(format!("echo: {said}")))
    });
    let agent = Agent::builder().model(Arc::new(echo)).build().unwrap();
    let app = router_with(
        agent,
        ServerOptions {
            registry: Some(registry.clone()),
            runs: RunLimits {
                final_write_tries: 2,
                final_write_pause: Duration::from_millis(20),
                ..RunLimits::default()
            },
            ..ServerOptions::default()
        },
    );
    let thread = new_thread(&app).await;
    break_record_updates(&pool).await;

    // The stream ends as `error`, saying why.
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{thread}/runs/stream"),
        None,
        Some(run_body("ping", "reject")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let events = events(&body);
    let run_id = events[0].2["run_id"].as_str().unwrap().to_owned();
    let (last, _, end) = events.last().unwrap();
    assert_eq!(last, "end");
    assert_eq!(end["status"], "error", "{body}");
    assert!(
        events
            .iter()
            .any(|(e, _, d)| e == "error" && d["error"] == "StorageError"),
        "{body}"
    );
    // The record could not change, yet clients are told the run failed.
    let stored = registry.run(&thread, &run_id).await.unwrap().unwrap();
    assert!(!stored.status.is_final(), "{:?}", stored.status);
    let run_path = format!("/threads/{thread}/runs/{run_id}");
    let (_, body) = call(&app, "GET", &format!("{run_path}/join"), None, None).await;
    assert!(json(&body)["__error__"]["message"].is_string(), "{body}");
    let (_, body) = call(&app, "GET", &run_path, None, None).await;
    assert_eq!(json(&body)["status"], "error", "{body}");
    // The thread is free here: a new run is admitted (its own writes fail the same way).
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{thread}/runs/wait"),
        None,
        Some(run_body("again", "reject")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(json(&body)["__error__"].is_object(), "{body}");

    // Once storage works again, the records catch up.
    heal(&pool).await;
    let mut waited = Duration::ZERO;
    loop {
        let run = registry.run(&thread, &run_id).await.unwrap().unwrap();
        let thread_record = registry.thread("", &thread).await.unwrap().unwrap();
        if run.status == RunStatus::Error && thread_record.status == ThreadStatus::Error {
            assert!(run.error.unwrap().contains("could not be recorded"));
            break;
        }
        assert!(
            waited < Duration::from_secs(10),
            "still {:?} / {:?}",
            run.status,
            thread_record.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{thread}/runs/wait"),
        None,
        Some(run_body("healed", "reject")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(json(&body)["__error__"].is_null(), "{body}");
    assert_eq!(
        answers(&app, &thread).await,
        ["echo: ping", "echo: again", "echo: healed"]
    );
}

#[tokio::test]
async fn a_stop_is_bounded_when_a_run_cannot_record_its_end() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let Store::Sqlite(sqlite) = &store else {
        panic!("not SQLite")
    };
    let pool = sqlite.pool().clone();
    let registry = Arc::new(Registry::for_store(&store).await.unwrap());
    // A run that would retry its final write for minutes once storage refuses it.
    let (app, manager) = router_parts(
        slow_agent(Duration::from_secs(3600)),
        ServerOptions {
            registry: Some(registry),
            runs: RunLimits {
                final_write_tries: 10_000,
                final_write_pause: Duration::from_millis(50),
                ..RunLimits::default()
            },
            ..ServerOptions::default()
        },
    );
    let thread = new_thread(&app).await;
    let (status, body) = call(
        &app,
        "POST",
        &format!("/threads/{thread}/runs"),
        None,
        Some(run_body("ping", "reject")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run_id = json(&body)["run_id"].as_str().unwrap().to_owned();
    let run_path = format!("/threads/{thread}/runs/{run_id}");
    let mut waited = Duration::ZERO;
    while json(&call(&app, "GET", &run_path, None, None).await.1)["status"] != "running" {
        assert!(waited < Duration::from_secs(10), "the run never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    break_record_updates(&pool).await;

    // The stop cancels the run, whose end then retries against the refusing storage;
    // the stop waits at most its grace per step, not for the retries.
    let stopped = tokio::time::timeout(
        Duration::from_secs(20),
        manager.shutdown(Duration::from_millis(200)),
    )
    .await
    .expect("the stop waited for the run's final-write retries");
    assert_eq!(stopped, 1);
    // Its subscribers were told it ended.
    let (_, body) = call(&app, "GET", &format!("{run_path}/stream"), None, None).await;
    let events = events(&body);
    let (last, _, end) = events.last().unwrap();
    assert_eq!(last, "end", "{body}");
    assert_eq!(end["status"], "error", "{body}");
}
