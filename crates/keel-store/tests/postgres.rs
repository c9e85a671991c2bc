//! The conformance suite, migrations and cross-pool sharing on PostgreSQL.
//!
//! Listed as ignored unless the `postgres-tests` feature is on, so `cargo test --workspace`
//! passes without a database. With the feature they need `KEEL_TEST_POSTGRES_URL`;
//! `scripts/test.sh` turns the feature on, provisions a throwaway server and sets it.
//! Without the URL these tests fail (they are never skipped). Each test works in its
//! own fresh schema, so "migrations from empty" really starts from nothing.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::str::FromStr;
use std::sync::Arc;

use keel_core::store::{
    SaveOutcome, SessionMemoryState, SessionMemoryStore, SessionScope, SummaryStore,
};
use keel_store::postgres::PostgresStore;
use keel_store::{Backend, Storage, Store, conformance};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

fn url() -> String {
    match std::env::var("KEEL_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "KEEL_TEST_POSTGRES_URL is not set: run the tests with scripts/test.sh, which \
             provisions a throwaway PostgreSQL (or `scripts/postgres.sh -- cargo test -p \
             keel-store --features postgres`), or point the variable at a database you own"
        ),
    }
}

/// A new empty schema, and connect options whose `search_path` points at it.
async fn fresh_schema() -> (String, PgConnectOptions) {
    let url = url();
    let schema = format!("keel_test_{}", uuid_like());
    let admin = PostgresStore::connect_with(
        PgConnectOptions::from_str(&url).unwrap(),
        PgPoolOptions::new().max_connections(1),
    )
    .await
    .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(admin.pool())
        .await
        .unwrap();
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    (schema, options)
}

fn uuid_like() -> String {
    keel_core::message::new_id().replace('-', "")
}

async fn store_in(options: &PgConnectOptions, pool_size: u32) -> PostgresStore {
    PostgresStore::connect_with(
        options.clone(),
        PgPoolOptions::new().max_connections(pool_size),
    )
    .await
    .unwrap()
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_conforms() {
    let (_, options) = fresh_schema().await;
    let store = store_in(&options, 16).await;
    conformance::run_all(Arc::new(store)).await.unwrap();
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_recall_index_conforms() {
    let (_, options) = fresh_schema().await;
    let store = store_in(&options, 16).await;
    conformance::run_recall(Arc::new(store)).await.unwrap();
}

/// The `simple` configuration turns keel's terms into exactly these lexemes (CJK
/// bigrams and accented words included, hex-encoded), the GIN index exists, and a
/// deleted session leaves no index row.
#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test]
async fn recall_terms_are_the_tsvector_lexemes() {
    use keel_core::recall::{RecallDocument, RecallIndex, terms};
    let (_, options) = fresh_schema().await;
    let store = store_in(&options, 2).await;
    let text = "主数据库是db-1.acme.net, die Kundendaten dürfen nicht raus; runs 10:30 Uhr";
    let mut want: Vec<String> = terms(text);
    want.sort();
    want.dedup();
    let (lexemes,): (Vec<String>,) =
        sqlx::query_as("SELECT tsvector_to_array(to_tsvector('simple', $1))")
            .bind(terms(text).join(" "))
            .fetch_one(store.pool())
            .await
            .unwrap();
    let mut got = lexemes;
    got.sort();
    assert_eq!(got, want);
    let (gin,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_indexes WHERE indexname = 'recall_documents_tsv' \
         AND indexdef LIKE '%USING gin%' AND schemaname = current_schema()",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(gin, 1);
    let scope = SessionScope::new("f", "u", "s", "");
    let doc = RecallDocument::new("m1", 0, "user", text);
    store.index_documents(&scope, &[doc]).await.unwrap();
    assert_eq!(store.delete_session_index("f", "u", "s").await.unwrap(), 1);
    let (left,): (i64,) = sqlx::query_as("SELECT count(*) FROM recall_documents")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(left, 0);
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_url_conforms() {
    // Store::connect on the plain URL (public schema, shared with other runs): the suite
    // namespaces its ids, so reruns on the same database do not collide.
    let store = Store::connect(&url()).await.unwrap();
    assert_eq!(store.backend(), Backend::Postgres);
    conformance::run_all(Arc::new(store)).await.unwrap();
}

async fn tables(store: &PostgresStore, schema: &str) -> Vec<String> {
    sqlx::query_as::<_, (String,)>(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 \
         UNION ALL SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(store.pool())
    .await
    .unwrap()
    .into_iter()
    .map(|(n,)| n)
    .collect()
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test]
async fn migrations_run_from_empty_and_again_as_a_no_op() {
    let (schema, options) = fresh_schema().await;
    let first = store_in(&options, 2).await;
    let created = tables(&first, &schema).await;
    for t in [
        "_sqlx_migrations",
        "chat_messages",
        "chat_messages_by_position",
        "checkpoint_entries",
        "checkpoint_entries_live",
        "checkpoint_entries_by_branch",
        "checkpoint_steps_by_branch",
        "checkpoint_heads",
        "checkpoint_messages",
        "checkpoint_steps",
        "checkpoints",
        "recall_documents",
        "recall_documents_id",
        "recall_documents_tsv",
        "recall_term_counts",
        "session_memory_state",
        "summary_cache",
        "summary_leases",
    ] {
        assert!(
            created.iter().any(|n| n == t),
            "{t} missing from {created:?}"
        );
    }
    let scope = SessionScope::new("f", "u", "s", "");
    first
        .save_state(&scope, &SessionMemoryState::default(), 0)
        .await
        .unwrap();
    first.migrate().await.unwrap();
    let second = store_in(&options, 2).await;
    assert_eq!(tables(&second, &schema).await, created);
    let (applied,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(second.pool())
        .await
        .unwrap();
    assert_eq!(applied, 7);
    assert_eq!(second.get_state(&scope).await.unwrap().unwrap().version, 1);
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_starting_together_migrate_once() {
    let (schema, options) = fresh_schema().await;
    let mut handles = Vec::new();
    for _ in 0..4 {
        let options = options.clone();
        handles.push(tokio::spawn(async move { store_in(&options, 1).await }));
    }
    let mut stores = Vec::new();
    for h in handles {
        stores.push(h.await.unwrap());
    }
    assert!(
        tables(&stores[0], &schema)
            .await
            .contains(&"session_memory_state".to_owned())
    );
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test]
async fn two_pools_share_summaries_and_session_state() {
    let (_, options) = fresh_schema().await;
    // Two independent pools, as two agent processes would have.
    let a = store_in(&options, 2).await;
    let b = store_in(&options, 2).await;

    let key = "summary:thread-1:fingerprint";
    let value = json!({"summary": "- PRJ-123 on the EU cluster", "model": "gpt-test"});
    a.put_summary(key, &value).await.unwrap();
    assert_eq!(b.get_summary(key).await.unwrap(), Some(value));

    let scope = SessionScope::new("flow", "user", "session", "");
    let mut state = SessionMemoryState {
        summary: "- folded by process A".into(),
        ..Default::default()
    };
    state.pinned.insert("project".into(), json!("PRJ-123"));
    assert_eq!(
        a.save_state(&scope, &state, 0).await.unwrap(),
        SaveOutcome::Saved { version: 1 }
    );
    let seen_by_b = b.get_state(&scope).await.unwrap().unwrap();
    assert_eq!(seen_by_b.summary, "- folded by process A");
    assert_eq!(seen_by_b.pinned["project"], json!("PRJ-123"));

    // B folds on top of A's state; A, still holding version 1, loses and must reload.
    let next = SessionMemoryState {
        summary: "- folded by process B".into(),
        ..seen_by_b.clone()
    };
    assert_eq!(
        b.save_state(&scope, &next, seen_by_b.version)
            .await
            .unwrap(),
        SaveOutcome::Saved { version: 2 }
    );
    assert_eq!(
        a.save_state(&scope, &state, 1).await.unwrap(),
        SaveOutcome::Conflict
    );
    assert_eq!(
        a.get_state(&scope).await.unwrap().unwrap().summary,
        "- folded by process B"
    );
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cas_across_two_pools() {
    // The race of the conformance suite, but the 64 writers split over two pools.
    let (_, options) = fresh_schema().await;
    let a = Arc::new(store_in(&options, 8).await);
    let b = Arc::new(store_in(&options, 8).await);
    let scope = SessionScope::new("flow", "user", "contended", "");
    let mut handles = Vec::new();
    for i in 0..64u64 {
        let store = if i % 2 == 0 {
            Arc::clone(&a)
        } else {
            Arc::clone(&b)
        };
        let scope = scope.clone();
        handles.push(tokio::spawn(async move {
            let mut wins = Vec::new();
            loop {
                let current = store.get_state(&scope).await.unwrap().unwrap_or_default();
                let next = SessionMemoryState {
                    absorbed_count: current.version + 1,
                    ..current.clone()
                };
                match store
                    .save_state(&scope, &next, current.version)
                    .await
                    .unwrap()
                {
                    SaveOutcome::Saved { version } => {
                        wins.push(version);
                        return wins;
                    }
                    SaveOutcome::Conflict => {}
                }
            }
        }));
    }
    let mut versions = Vec::new();
    for h in handles {
        versions.extend(h.await.unwrap());
    }
    versions.sort_unstable();
    assert_eq!(versions, (1..=64).collect::<Vec<_>>());
    let last = a.get_state(&scope).await.unwrap().unwrap();
    assert_eq!((last.version, last.absorbed_count), (64, 64));
}

/// Nothing listens on the port: the error comes from the first attempt (not the pool's
/// timeout), names the cause, and hides the password. Needs no server.
#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test]
async fn connection_refused_fails_fast_naming_the_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://keel:s3cret@127.0.0.1:{port}/keel");
    let err = keel_store::Store::connect(&url)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "cannot connect to postgres at \"postgres://keel:***@127.0.0.1:{port}/keel\": "
        )),
        "{err}"
    );
    assert!(
        err.contains("nothing listens at that host and port"),
        "{err}"
    );
    assert!(
        !err.contains("s3cret") && !err.contains("timed out"),
        "{err}"
    );
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_strategy_keeps_every_message_on_postgres() {
    let (_schema, options) = fresh_schema().await;
    let store = store_in(&options, 10).await;
    common::race_every_strategy(Arc::new(store)).await;
}

/// Set in the writer processes of the two-process test: the schema to write in.
const WRITER_SCHEMA: &str = "KEEL_TEST_WRITER_SCHEMA";
/// The writer's name (its input ids start with it).
const WRITER_NAME: &str = "KEEL_TEST_WRITER_NAME";
/// Milliseconds since the epoch at which both writers start.
const WRITER_START: &str = "KEEL_TEST_WRITER_START_MS";
const RUNS_PER_WRITER: usize = 32;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Runs only inside the writer processes `two_processes_on_one_thread_lose_nothing`
/// starts; on its own it has nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a writer process of two_processes_on_one_thread_lose_nothing"]
async fn writer_process() {
    let (Ok(schema), Ok(name), Ok(start)) = (
        std::env::var(WRITER_SCHEMA),
        std::env::var(WRITER_NAME),
        std::env::var(WRITER_START),
    ) else {
        return;
    };
    let options = PgConnectOptions::from_str(&url())
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let store = Arc::new(store_in(&options, 8).await);
    let agent = common::agent(store, keel_agent::MultitaskStrategy::Enqueue);
    let start: u64 = start.parse().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(
        start.saturating_sub(now_ms()),
    ))
    .await;
    let runs: Vec<_> = (0..RUNS_PER_WRITER)
        .map(|i| {
            let agent = agent.clone();
            let id = format!("{name}-{i}");
            tokio::spawn(async move {
                let input = keel_core::message::Message::human("go").with_id(&id);
                match agent.invoke("shared", vec![input]).await {
                    Ok(out) => {
                        let ids: Vec<&str> = out
                            .state
                            .messages
                            .iter()
                            .map(|m| m.id())
                            .skip_while(|m| *m != id)
                            .collect();
                        format!("RESULT {id} completed {}", ids.join(","))
                    }
                    Err(keel_agent::AgentError::Conflict { .. }) => {
                        format!("RESULT {id} conflict")
                    }
                    Err(e) => format!("RESULT {id} error {e}"),
                }
            })
        })
        .collect();
    for r in runs {
        println!("{}", r.await.unwrap());
    }
}

/// Two processes run 32 runs each on one thread of one database. Within a process the
/// agent queues them; across processes the checkpointer's compare-and-swap decides:
/// every run completes or fails with `AgentError::Conflict`, and no committed message
/// is lost or duplicated.
#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_thread_lose_nothing() {
    let (schema, options) = fresh_schema().await;
    let store = store_in(&options, 2).await;
    // Far enough ahead for both processes to start and connect on a loaded machine.
    let start = (now_ms() + 3000).to_string();
    let children: Vec<_> = ["A", "B"]
        .into_iter()
        .map(|name| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "writer_process", "--ignored", "--nocapture"])
                .env(WRITER_SCHEMA, &schema)
                .env(WRITER_NAME, name)
                .env(WRITER_START, &start)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut completed = Vec::new();
    let mut conflicts = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a writer failed: {}", out.status);
        let text = String::from_utf8(out.stdout).unwrap();
        let results: Vec<&str> = text.lines().filter(|l| l.starts_with("RESULT ")).collect();
        assert_eq!(results.len(), RUNS_PER_WRITER, "{text}");
        for line in results {
            let parts: Vec<&str> = line.splitn(4, ' ').collect();
            match parts[2] {
                "completed" => completed.push(
                    parts[3]
                        .split(',')
                        .map(str::to_owned)
                        .collect::<Vec<String>>(),
                ),
                "conflict" => conflicts += 1,
                other => panic!("unexpected outcome {other}: {line}"),
            }
        }
    }
    assert!(!completed.is_empty(), "no run completed");
    assert!(conflicts > 0, "the two processes never collided");
    let history = keel_core::store::Checkpointer::history(&store, "shared")
        .await
        .unwrap();
    let seqs: Vec<u64> = history.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (0..history.len() as u64).collect::<Vec<_>>());
    let last = &history.last().unwrap().messages;
    let mut seen = std::collections::HashSet::new();
    for m in last {
        assert!(seen.insert(m.id().to_owned()), "{} is duplicated", m.id());
    }
    for run in &completed {
        for id in run {
            assert!(seen.contains(id), "{id} of a completed run is lost");
        }
    }
    // Every message any step committed is still in the latest state: nothing was
    // overwritten (no step removes messages here).
    for cp in &history {
        for m in &cp.messages {
            assert!(
                seen.contains(m.id()),
                "{} (seq {}) was lost",
                m.id(),
                cp.seq
            );
        }
    }
    eprintln!(
        "two processes: {} completed, {conflicts} conflicts, {} steps",
        completed.len(),
        history.len()
    );
}

/// A schema written before checkpoints became deltas (migration 0001 only): its threads
/// continue from their latest checkpoint after the upgrade.
#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test]
async fn threads_written_before_the_delta_schema_continue_from_their_latest_checkpoint() {
    use keel_core::message::Message;
    let (_schema, options) = fresh_schema().await;
    {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .unwrap();
        sqlx::raw_sql(include_str!("../migrations/postgres/0001_init.sql"))
            .execute(&pool)
            .await
            .unwrap();
        let a = serde_json::to_string(&Message::human("old question").with_id("a")).unwrap();
        let b = serde_json::to_string(&Message::ai("old answer").with_id("b")).unwrap();
        for (hash, body) in [("ha", &a), ("hb", &b)] {
            sqlx::query("INSERT INTO checkpoint_messages VALUES ('t', $1, CAST($2 AS JSON))")
                .bind(hash)
                .bind(body)
                .execute(&pool)
                .await
                .unwrap();
        }
        for (seq, hashes) in [(0i64, r#"["ha"]"#), (1, r#"["ha","hb"]"#)] {
            sqlx::query(
                "INSERT INTO checkpoints VALUES ('t', $1, 'r0', 'model', CAST($2 AS JSON), \
                 CAST('{\"k\":1}' AS JSON), 5)",
            )
            .bind(seq)
            .bind(hashes)
            .execute(&pool)
            .await
            .unwrap();
        }
        pool.close().await;
    }
    let store = store_in(&options, 2).await;
    common::continues_the_pre_delta_thread(&store).await;
}
