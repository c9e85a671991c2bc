//! Tenancy and deletion, end to end through the router on a real database: two owners,
//! one thread id, session memory and summarization storing rows for every turn.
//!
//! - Another owner's id is neither revealed (no 409, no 404 oracle) nor shared: each
//!   owner gets a thread of its own under the same id.
//! - Deleting a thread leaves no row anywhere in the database that holds its text
//!   (checkpoints, chat history, session state, cached summaries, run records, events),
//!   and an id created again, by the same or another owner, starts empty: no model
//!   request of the new thread carries the old text.
//! - A stateless run's thread and everything it stored go when the run ends.
//!
//! Runs on SQLite always, and on PostgreSQL when `KEEL_TEST_POSTGRES_URL` is set (as
//! `scripts/test.sh` does), in a fresh schema.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::{ALICE, BOB, call, json, two_owner_router};
use keel_core::message::Message;
use keel_store::Store;
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};

/// Session memory folds every 4 messages older than the last 2, and summarization
/// compacts from 300 tokens on: a few turns store the thread's text in every table.
const STACK: &str = r#"
name: agent
model: offline
middleware:
  - session_memory:
      n_messages: 2
      fold_batch: 4
      pinned_keys: [project_id]
  - summarization:
      enabled: true
      model_name: null
      trigger:
        - type: tokens
          value: 300
      keep:
        type: messages
        value: 2
      token_counter: approximate
"#;

/// Where the test's rows live, and how to find every row holding some text.
enum Db {
    Sqlite(sqlx::SqlitePool),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
}

impl Db {
    /// Every table with at least one row whose text holds `needle`.
    async fn holding(&self, needle: &str) -> Vec<(String, i64)> {
        let mut found = Vec::new();
        match self {
            Db::Sqlite(pool) => {
                let tables: Vec<(String,)> = sqlx::query_as(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                )
                .fetch_all(pool)
                .await
                .unwrap();
                for (t,) in tables {
                    let columns: Vec<(String,)> =
                        sqlx::query_as("SELECT name FROM pragma_table_info($1)")
                            .bind(&t)
                            .fetch_all(pool)
                            .await
                            .unwrap();
                    let row = columns
                        .iter()
                        .map(|(c,)| format!("COALESCE(CAST(\"{c}\" AS TEXT), '')"))
                        .collect::<Vec<_>>()
                        .join(" || ");
                    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                        "SELECT COUNT(*) FROM \"{t}\" WHERE instr({row}, $1) > 0"
                    )))
                    .bind(needle)
                    .fetch_one(pool)
                    .await
                    .unwrap();
                    if n > 0 {
                        found.push((t, n));
                    }
                }
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                let tables: Vec<(String,)> = sqlx::query_as(
                    "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema()",
                )
                .fetch_all(pool)
                .await
                .unwrap();
                for (t,) in tables {
                    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                        "SELECT COUNT(*) FROM \"{t}\" AS r WHERE strpos(r::text, $1) > 0"
                    )))
                    .bind(needle)
                    .fetch_one(pool)
                    .await
                    .unwrap();
                    if n > 0 {
                        found.push((t, n));
                    }
                }
            }
        }
        found
    }
}

/// A server for alice and bob on `store`, its model recording every request.
async fn server(store: Store) -> (Router, Arc<ScriptedModel>) {
    let model = ScriptedModel::from_fn(|request| {
        let said = request
            .messages
            .last()
            .map(|m| m.text().into_owned())
            .unwrap_or_default();
        Ok(Message::ai(format!("noted: {said}")))
    })
    .shared();
    (two_owner_router(STACK, store, model.clone()).await, model)
}

async fn say(app: &Router, key: &str, thread: &str, text: &str) -> Value {
    let (status, body) = call(
        app,
        "POST",
        &format!("/threads/{thread}/runs/wait"),
        Some(key),
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": text}]}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    json(&body)
}

/// Every request the model received since `from` (system prompt and messages as text).
fn requests_since(model: &ScriptedModel, from: usize) -> Vec<String> {
    model.requests()[from..]
        .iter()
        .map(|r| {
            r.messages
                .iter()
                .map(|m| m.text().into_owned())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

async fn tenancy_and_deletion(store: Store, db: Db) {
    let (app, model) = server(store).await;
    let secret = "ALICE-SECRET-7731";

    // Alice talks long enough for every table to hold her text.
    let (status, body) = call(
        &app,
        "POST",
        "/threads",
        Some(ALICE),
        Some(json!({"thread_id": "shared-id"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for i in 0..8 {
        say(
            &app,
            ALICE,
            "shared-id",
            &format!(
                "turn {i}: the project_id is {secret}, and a long line of detail to count {}",
                "x ".repeat(40)
            ),
        )
        .await;
    }
    let before = db.holding(secret).await;
    for table in [
        "chat_messages",
        "session_memory_state",
        "summary_cache",
        "keel_server_run_events",
    ]
    .into_iter()
    // Run events are copied to the database only where it is shared (PostgreSQL).
    .filter(|t| !matches!(db, Db::Sqlite(_)) || *t != "keel_server_run_events")
    {
        assert!(
            before.iter().any(|(t, _)| t == table),
            "alice's text should be in {table} before deletion: {before:?}"
        );
    }

    // Bob uses the same id: his own thread, nothing said about alice's.
    let (status, body) = call(
        &app,
        "POST",
        "/threads",
        Some(BOB),
        Some(json!({"thread_id": "shared-id"})),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "another owner's id must not answer 409: {body}"
    );
    assert_eq!(json(&body)["thread_id"], "shared-id");
    let from = model.calls();
    say(&app, BOB, "shared-id", "hello, what do you know?").await;
    assert!(
        requests_since(&model, from)
            .iter()
            .all(|r| !r.contains(secret))
    );
    // A run that creates its thread when missing finds bob's namespace empty too.
    let (status, body) = call(
        &app,
        "POST",
        "/threads/only-alice/runs/wait",
        Some(ALICE),
        Some(json!({"assistant_id": "agent", "if_not_exists": "create", "input": {"messages": [{"role": "user", "content": format!("{secret} again")}]}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/threads/only-alice/runs/wait",
        Some(BOB),
        Some(json!({"assistant_id": "agent", "if_not_exists": "create", "input": {"messages": [{"role": "user", "content": "mine"}]}})),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "if_not_exists=create must not answer 404 for another owner's id: {body}"
    );
    let (_, body) = call(&app, "GET", "/threads/only-alice/state", Some(BOB), None).await;
    assert!(!body.contains(secret), "{body}");
    // Bob cannot delete, read or search alice's thread.
    let (status, _) = call(&app, "DELETE", "/threads/only-alice", Some(BOB), None).await;
    assert_eq!(
        status,
        StatusCode::NO_CONTENT,
        "bob deletes his own only-alice"
    );
    let (status, _) = call(&app, "GET", "/threads/only-alice", Some(ALICE), None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "alice's only-alice is untouched by bob's delete"
    );

    // Alice deletes her threads: nothing anywhere holds her text any more.
    for id in ["shared-id", "only-alice"] {
        let (status, body) =
            call(&app, "DELETE", &format!("/threads/{id}"), Some(ALICE), None).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    assert_eq!(
        db.holding(secret).await,
        [],
        "every row holding alice's text goes with her threads"
    );

    // Re-created, by alice and (after his own delete) by bob: both start empty.
    for key in [ALICE, BOB] {
        if key == BOB {
            let (status, _) = call(&app, "DELETE", "/threads/shared-id", Some(BOB), None).await;
            assert_eq!(status, StatusCode::NO_CONTENT);
        }
        let (status, body) = call(
            &app,
            "POST",
            "/threads",
            Some(key),
            Some(json!({"thread_id": "shared-id"})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (_, body) = call(&app, "GET", "/threads/shared-id/state", Some(key), None).await;
        assert_eq!(
            json(&body)["values"],
            json!({}),
            "a re-created thread has no state: {body}"
        );
        let from = model.calls();
        for i in 0..3 {
            say(&app, key, "shared-id", &format!("fresh start {i}")).await;
        }
        let sent = requests_since(&model, from);
        assert!(!sent.is_empty());
        assert!(
            sent.iter()
                .all(|r| !r.contains(secret) && !r.contains("turn 0")),
            "a re-created thread must not see the deleted one's text: {sent:?}"
        );
    }

    // A stateless run: its thread, history, memory and run records go when it ends.
    let stateless = "STATELESS-SECRET-4410";
    let (status, body) = call(
        &app,
        "POST",
        "/runs/wait",
        Some(BOB),
        Some(json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": stateless}]}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut left = db.holding(stateless).await;
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = db.holding(stateless).await;
    }
    assert_eq!(left, [], "a stateless run leaves no rows behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_threads_leave_nothing_and_ids_are_per_owner_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tenancy.db", dir.path().display());
    let store = Store::connect(&url).await.unwrap();
    let Store::Sqlite(sqlite) = &store else {
        panic!("a sqlite URL opens SQLite");
    };
    let db = Db::Sqlite(sqlite.pool().clone());
    tenancy_and_deletion(store, db).await;
}

#[cfg(feature = "postgres")]
#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_threads_leave_nothing_and_ids_are_per_owner_on_postgres() {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    use std::str::FromStr;

    let url = match std::env::var("KEEL_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "KEEL_TEST_POSTGRES_URL is not set: run the tests with scripts/test.sh, which \
             provisions a throwaway PostgreSQL (or `scripts/postgres.sh -- cargo test -p \
             keel-server --features postgres-tests`)"
        ),
    };
    let schema = format!("keel_tenancy_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .unwrap();
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let pg = keel_store::postgres::PostgresStore::connect_with(
        options,
        PgPoolOptions::new().max_connections(8),
    )
    .await
    .unwrap();
    let db = Db::Postgres(pg.pool().clone());
    tenancy_and_deletion(Store::Postgres(pg), db).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&admin)
        .await
        .unwrap();
}
