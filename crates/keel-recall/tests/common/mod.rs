//! Shared fixtures: a scripted agent model, a middleware that drops old messages, a
//! counting index and the thread builders.
// Test helpers: a broken fixture should fail the test loudly.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use keel_core::model::ModelError;
use keel_core::recall::{MemoryRecallIndex, RecallDocument, RecallHit, RecallIndex};
use keel_core::store::{SessionScope, StoreError};
use keel_recall::{RECALL_NAME, RecallMiddleware, RecallSettings};
use keel_testkit::{RecordedRequest, ScriptedModel};
use parking_lot::Mutex;

/// The fact the tests ask about, and the question that asks for it.
pub const FACT: &str = "The billing backups vendor is Vendorix, bucket zeta-17.";
pub const QUESTION: &str = "Which vendor takes the billing backups?";

/// The agent's model: answers every user-facing call with `ok`, its id derived from
/// the latest user message so two agents given the same input write the same thread.
pub fn model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::from_fn(|r: &RecordedRequest| {
        let last = r
            .messages
            .iter()
            .rev()
            .find(|m| m.is_human() && m.name() != Some(RECALL_NAME))
            .map_or("none", |m| m.id());
        Ok(Message::ai("ok").with_id(format!("answer-{last}")))
    }))
}

/// Unrelated messages, odd `i` from the user and even from the assistant (so a range
/// ending on an even number ends on an answer), ids `{prefix}{i}`.
pub fn filler(prefix: &str, range: std::ops::Range<usize>) -> Vec<Message> {
    range
        .map(|i| {
            let text = format!(
                "Status line {i}: the dashboard shows {i} green checks and nothing else of note."
            );
            let m = if i % 2 == 1 {
                Message::human(text)
            } else {
                Message::ai(text)
            };
            m.with_id(format!("{prefix}{i}"))
        })
        .collect()
}

/// The fact (id `fact`), 20 filler messages, then the question (id `question`).
pub fn thread() -> Vec<Message> {
    let mut t = vec![Message::human(FACT).with_id("fact")];
    t.extend(filler("f", 1..21));
    t.push(Message::human(QUESTION).with_id("question"));
    t
}

/// Keeps the last `n` messages of every request (and never a tool result first), as a
/// crude compaction that leaves no summary.
pub struct KeepLast(pub usize);

#[keel_core::middleware]
impl Middleware for KeepLast {
    fn name(&self) -> &str {
        "KeepLast"
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let messages = &request.messages;
        let mut from = messages.len().saturating_sub(self.0);
        while from < messages.len() && messages[from].is_tool() {
            from += 1;
        }
        let kept = messages[from..].to_vec();
        next.run(request.with_messages(kept)).await
    }
}

/// A memory index that records the message ids of every `index_documents` call.
#[derive(Default)]
pub struct CountingIndex {
    pub inner: MemoryRecallIndex,
    pub calls: Mutex<Vec<Vec<String>>>,
}

impl CountingIndex {
    pub fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().clone()
    }
}

#[async_trait]
impl RecallIndex for CountingIndex {
    async fn index_documents(
        &self,
        scope: &SessionScope,
        documents: &[RecallDocument],
    ) -> Result<u64, StoreError> {
        self.calls
            .lock()
            .push(documents.iter().map(|d| d.message_id.clone()).collect());
        self.inner.index_documents(scope, documents).await
    }
    async fn search(
        &self,
        scope: &SessionScope,
        query: &[String],
        limit: usize,
    ) -> Result<Vec<RecallHit>, StoreError> {
        self.inner.search(scope, query, limit).await
    }
    async fn following(
        &self,
        scope: &SessionScope,
        seqs: &[u64],
    ) -> Result<Vec<RecallDocument>, StoreError> {
        self.inner.following(scope, seqs).await
    }
    async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError> {
        self.inner.indexed_count(scope).await
    }
    async fn delete_session_index(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        self.inner
            .delete_session_index(flow_id, user_id, session_id)
            .await
    }
}

/// Recall with default settings over `index`.
pub fn recall(index: Arc<dyn RecallIndex>) -> Arc<RecallMiddleware> {
    recall_with(RecallSettings::default(), index)
}

pub fn recall_with(settings: RecallSettings, index: Arc<dyn RecallIndex>) -> Arc<RecallMiddleware> {
    Arc::new(
        RecallMiddleware::builder(settings)
            .index(index)
            .build()
            .unwrap(),
    )
}

/// An agent with `model` and this stack, outermost first.
pub fn agent(model: &Arc<ScriptedModel>, stack: Vec<Arc<dyn Middleware>>) -> Agent {
    let mut b = Agent::builder().model(model.clone());
    for m in stack {
        b = b.middleware_shared(m);
    }
    b.build().unwrap()
}

/// The user-facing requests the model received.
pub fn user_requests(model: &ScriptedModel) -> Vec<RecordedRequest> {
    model
        .requests()
        .into_iter()
        .filter(|r| !r.internal)
        .collect()
}

/// The position and text of the request's recall message, if any (and never two).
pub fn recall_message(messages: &[Message]) -> Option<(usize, String)> {
    let found: Vec<(usize, String)> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.name() == Some(RECALL_NAME))
        .map(|(i, m)| (i, m.text().into_owned()))
        .collect();
    assert!(found.len() <= 1, "more than one recall message: {found:?}");
    found.into_iter().next()
}

/// The ids quoted by a recall message, in order (`[ID · who · time]`).
pub fn quoted_ids(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('[') && l.ends_with(']'))
        .filter_map(|l| {
            let inner = &l[1..l.len() - 1];
            inner.split(" · ").next().map(str::to_owned)
        })
        .collect()
}

/// A SQLite file in a temporary directory (keep the directory alive) and its URL.
pub fn sqlite_url() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("keel.db").display());
    (url, dir)
}

/// The PostgreSQL URL, or a failure that says how to get one. Never a skip.
pub fn postgres_url() -> String {
    match std::env::var("KEEL_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "KEEL_TEST_POSTGRES_URL is not set: run the tests with scripts/test.sh, which \
             provisions a throwaway PostgreSQL (or `scripts/postgres.sh -- cargo test -p \
             keel-recall`), or point the variable at a database you own"
        ),
    }
}

/// Connect options into a new empty schema (so the recall tables hold only this test's
/// rows).
pub async fn postgres_schema() -> sqlx::postgres::PgConnectOptions {
    use std::str::FromStr;
    let url = postgres_url();
    let schema = format!(
        "keel_recall_test_{}",
        keel_core::message::new_id().replace('-', "")
    );
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    sqlx::postgres::PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.as_str())])
}

/// A store (its own pool, as another process would have) in that schema.
pub async fn postgres_store(options: &sqlx::postgres::PgConnectOptions) -> keel_store::Store {
    keel_store::Store::Postgres(
        keel_store::postgres::PostgresStore::connect_with(
            options.clone(),
            sqlx::postgres::PgPoolOptions::new().max_connections(4),
        )
        .await
        .unwrap(),
    )
}

/// `SELECT count(*)` of `sql` with one text parameter, on either SQL backend.
pub async fn count(store: &keel_store::Store, sql: &str, arg: &str) -> i64 {
    match store {
        keel_store::Store::Sqlite(s) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .bind(arg)
            .fetch_one(s.pool())
            .await
            .unwrap(),
        keel_store::Store::Postgres(s) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .bind(arg)
            .fetch_one(s.pool())
            .await
            .unwrap(),
        keel_store::Store::Memory(_) => panic!("not a SQL store"),
    }
}

/// The message ids the recall table holds for a thread, one row each, sorted.
pub async fn indexed_ids(store: &keel_store::Store, thread: &str) -> Vec<String> {
    let sql = "SELECT message_id FROM recall_documents WHERE session_id = $1 ORDER BY message_id";
    let mut ids: Vec<String> = match store {
        keel_store::Store::Sqlite(s) => sqlx::query_scalar(sql)
            .bind(thread)
            .fetch_all(s.pool())
            .await
            .unwrap(),
        keel_store::Store::Postgres(s) => sqlx::query_scalar(sql)
            .bind(thread)
            .fetch_all(s.pool())
            .await
            .unwrap(),
        keel_store::Store::Memory(_) => panic!("not a SQL store"),
    };
    ids.sort();
    ids
}
