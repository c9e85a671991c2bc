//! [`Registry`]: the server's records of threads and runs (who owns them, their
//! metadata and status). A thread's messages live in the agent's checkpointer; this
//! holds what the protocol adds around them.

use std::collections::HashMap;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::auth::public_thread_id;
use crate::time::{now_ms, rfc3339};

/// A run's status, as the protocol names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RunStatus {
    /// Queued behind another run of its thread.
    Pending,
    /// Executing.
    Running,
    /// Failed.
    Error,
    /// Finished.
    Success,
    /// Cancelled (or interrupted by a newer run); its checkpoints are kept.
    Interrupted,
}

impl RunStatus {
    /// The protocol's name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Error => "error",
            RunStatus::Success => "success",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// True once the run can no longer change.
    pub(crate) fn is_final(self) -> bool {
        !matches!(self, RunStatus::Pending | RunStatus::Running)
    }
}

/// A thread's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ThreadStatus {
    /// No run in progress.
    Idle,
    /// A run is in progress.
    Busy,
    /// The last run failed.
    Error,
    /// The last run paused for a person's decision (human in the loop); a run with
    /// `command: {resume: ...}` continues it.
    Interrupted,
}

impl ThreadStatus {
    /// The protocol's name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Idle => "idle",
            ThreadStatus::Busy => "busy",
            ThreadStatus::Error => "error",
            ThreadStatus::Interrupted => "interrupted",
        }
    }

    /// Reads a status filter.
    pub(crate) fn parse(s: &str) -> Option<ThreadStatus> {
        match s {
            "idle" => Some(ThreadStatus::Idle),
            "busy" => Some(ThreadStatus::Busy),
            "error" => Some(ThreadStatus::Error),
            "interrupted" => Some(ThreadStatus::Interrupted),
            _ => None,
        }
    }
}

/// What to do when a run is created on a thread that is already running one (the
/// protocol's `multitask_strategy`): the agent's own strategy type, so the server and
/// an embedded agent name and store the same four strategies one way.
pub(crate) use keel_agent::MultitaskStrategy as Strategy;

/// A thread's record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ThreadRecord {
    /// The key it is stored under ([`Owner::thread_key`](crate::auth::Owner::thread_key):
    /// the id the client chose, in its owner's namespace); clients see
    /// [`public_thread_id`] of it.
    pub thread_id: String,
    /// The API-key owner that created it ("" without auth).
    pub owner: String,
    /// Creation time, ms since the epoch.
    pub created_at_ms: i64,
    /// Last change, ms since the epoch.
    pub updated_at_ms: i64,
    /// Client metadata.
    pub metadata: Map<String, Value>,
    /// Status.
    pub status: ThreadStatus,
}

impl ThreadRecord {
    /// The protocol's `Thread` object, with the thread's current values. A pending
    /// interrupt in the values (`__interrupt__`, see `wire::interrupts_to_lg`) is also
    /// listed under `interrupts`, by the id of the task waiting for it. `values` is
    /// null for a thread that never ran, as langgraph-api sends it; `state_at_ms` is when
    /// its state last changed (its newest checkpoint; its creation before any).
    pub(crate) fn to_json(&self, values: Value, state_at_ms: Option<i64>) -> Value {
        let interrupts = match values.get(keel_core::state::INTERRUPT_KEY) {
            Some(Value::Array(list)) if !list.is_empty() => {
                let id = crate::wire::interrupt_task_id(list[0]["id"].as_str().unwrap_or_default());
                json!({ id: list })
            }
            _ => json!({}),
        };
        json!({
            "thread_id": public_thread_id(&self.thread_id),
            "created_at": rfc3339(self.created_at_ms),
            "updated_at": rfc3339(self.updated_at_ms),
            "metadata": self.metadata,
            "status": self.status.as_str(),
            "values": values,
            "interrupts": interrupts,
            // langgraph-api's thread-level config, {} unless a client set one (Keel
            // takes none).
            "config": {},
            "state_updated_at": rfc3339(state_at_ms.unwrap_or(self.created_at_ms)),
        })
    }
}

/// A run's record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    /// The id.
    pub run_id: String,
    /// Its thread's key ([`ThreadRecord::thread_id`]).
    pub thread_id: String,
    /// The assistant it runs.
    pub assistant_id: String,
    /// Creation time, ms since the epoch.
    pub created_at_ms: i64,
    /// Last change, ms since the epoch.
    pub updated_at_ms: i64,
    /// Status.
    pub status: RunStatus,
    /// Client metadata.
    pub metadata: Map<String, Value>,
    /// Its multitask strategy.
    pub strategy: Strategy,
    /// The request's arguments (input, stream modes...), echoed as `kwargs`.
    pub kwargs: Value,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

impl RunRecord {
    /// The protocol's `Run` object.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "run_id": self.run_id,
            "thread_id": public_thread_id(&self.thread_id),
            "assistant_id": self.assistant_id,
            "created_at": rfc3339(self.created_at_ms),
            "updated_at": rfc3339(self.updated_at_ms),
            "status": self.status.as_str(),
            "metadata": self.metadata,
            "multitask_strategy": self.strategy.as_str(),
            "kwargs": self.kwargs,
        })
    }
}

/// Filters of `POST /threads/search`.
#[derive(Clone, Debug, Default)]
pub(crate) struct ThreadFilter {
    /// Every key must be present with an equal value.
    pub metadata: Map<String, Value>,
    /// Only these ids.
    pub ids: Option<Vec<String>>,
    /// Only this status.
    pub status: Option<ThreadStatus>,
}

impl ThreadFilter {
    fn keeps(&self, r: &ThreadRecord) -> bool {
        self.status.is_none_or(|s| r.status == s)
            && self.ids.as_ref().is_none_or(|ids| {
                let id = public_thread_id(&r.thread_id);
                ids.iter().any(|i| i == id)
            })
            && self
                .metadata
                .iter()
                .all(|(k, v)| r.metadata.get(k) == Some(v))
    }
}

/// A registry operation that failed in the database.
#[derive(Debug, thiserror::Error)]
#[error("server records: {0}")]
pub struct RegistryError(String);

impl RegistryError {
    /// An error from anything displayable (a database error).
    pub(crate) fn new(e: impl std::fmt::Display) -> Self {
        RegistryError(e.to_string())
    }
}

#[derive(Debug, Default)]
struct Tables {
    threads: HashMap<String, ThreadRecord>,
    runs: HashMap<String, RunRecord>,
}

/// Where the records live.
#[derive(Debug)]
enum Backend {
    Memory(RwLock<Tables>),
    Sqlite(sqlx::SqlitePool),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
}

/// Thread and run records, in memory or in the agent's database (SQLite, or PostgreSQL
/// shared by several server processes). Each record is one row holding its JSON; the
/// tables are created on first use, next to keel-store's, and only ever added to.
///
/// Every read by thread is scoped by owner: another owner's thread reads as missing.
#[derive(Debug)]
pub struct Registry {
    backend: Backend,
}

const CREATE_THREADS: &str = "CREATE TABLE IF NOT EXISTS keel_server_threads (
    thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL, record TEXT NOT NULL)";
const CREATE_THREADS_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS keel_server_threads_owner ON keel_server_threads (owner)";
// Columns that `threads/search` filters, sorts and pages on in SQL, added to tables an
// older version created (and filled from each row's record once, at start).
const THREAD_COLUMNS: [(&str, &str); 3] = [
    ("created_at_ms", "BIGINT"),
    ("updated_at_ms", "BIGINT"),
    ("status", "TEXT"),
];
const CREATE_THREADS_SORT_INDEXES: [&str; 2] = [
    "CREATE INDEX IF NOT EXISTS keel_server_threads_created ON keel_server_threads (owner, created_at_ms)",
    "CREATE INDEX IF NOT EXISTS keel_server_threads_updated ON keel_server_threads (owner, updated_at_ms)",
];

/// The largest thread metadata, serialized, that a thread may carry. Metadata is read
/// back with every thread a search returns, so it is kept small.
pub(crate) const MAX_METADATA_BYTES: usize = 64 * 1024;

/// Checks a thread's metadata against [`MAX_METADATA_BYTES`].
pub(crate) fn check_metadata(field: &str, metadata: &Map<String, Value>) -> Result<(), String> {
    let bytes = serde_json::to_string(metadata).map_or(usize::MAX, |t| t.len());
    if bytes > MAX_METADATA_BYTES {
        return Err(format!(
            "{field} is {bytes} bytes serialized; at most {MAX_METADATA_BYTES} are allowed"
        ));
    }
    Ok(())
}
const CREATE_RUNS: &str = "CREATE TABLE IF NOT EXISTS keel_server_runs (
    run_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, created_at_ms BIGINT NOT NULL,
    record TEXT NOT NULL)";
const CREATE_RUNS_INDEX: &str = "CREATE INDEX IF NOT EXISTS keel_server_runs_thread ON keel_server_runs (thread_id, created_at_ms)";
// A run's events, copied from the process running it so that another process sharing
// the database can stream them (reconnects with `Last-Event-ID`, `join`), and cancel
// requests addressed to a run another process is running.
const CREATE_EVENTS: &str = "CREATE TABLE IF NOT EXISTS keel_server_run_events (
    run_id TEXT NOT NULL, seq BIGINT NOT NULL, thread_id TEXT NOT NULL,
    event TEXT NOT NULL, mode TEXT, data TEXT NOT NULL, written_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq))";
const CREATE_EVENTS_INDEX: &str = "CREATE INDEX IF NOT EXISTS keel_server_run_events_written ON keel_server_run_events (written_at_ms)";
const CREATE_CANCELS: &str = "CREATE TABLE IF NOT EXISTS keel_server_run_cancels (
    run_id TEXT PRIMARY KEY, action TEXT NOT NULL, written_at_ms BIGINT NOT NULL)";

/// One stored run event: its id in the run's log, SSE event name, stream mode, JSON.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StoredEvent {
    /// The id (position in the run's log).
    pub seq: u64,
    /// The SSE event name.
    pub event: String,
    /// The stream mode's protocol name, for mode events.
    pub mode: Option<String>,
    /// The JSON payload.
    pub data: String,
}

/// Rows per INSERT when copying events (7 binds a row, well under PostgreSQL's 65,535).
const EVENT_ROWS_PER_INSERT: usize = 500;

/// Runs `$body` with `$pool` bound to whichever SQL pool `$self` holds; `$memory` for the
/// in-memory backend.
macro_rules! sql {
    ($self:expr, $tables:ident => $memory:expr, $pool:ident => $body:expr) => {
        match &$self.backend {
            Backend::Memory($tables) => $memory,
            Backend::Sqlite($pool) => $body,
            #[cfg(feature = "postgres")]
            Backend::Postgres($pool) => $body,
        }
    };
}

fn encode<T: Serialize>(value: &T) -> Result<String, RegistryError> {
    serde_json::to_string(value).map_err(RegistryError::new)
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, RegistryError> {
    serde_json::from_str(text).map_err(RegistryError::new)
}

impl Registry {
    /// Records in this process's memory (lost on restart).
    pub fn memory() -> Self {
        Registry {
            backend: Backend::Memory(RwLock::new(Tables::default())),
        }
    }

    /// Records in the store's database (in memory for a memory store), tables created if
    /// missing.
    pub async fn for_store(store: &keel_store::Store) -> Result<Self, RegistryError> {
        let backend = match store {
            keel_store::Store::Memory(_) => return Ok(Self::memory()),
            keel_store::Store::Sqlite(s) => Backend::Sqlite(s.pool().clone()),
            #[cfg(feature = "postgres")]
            keel_store::Store::Postgres(s) => Backend::Postgres(s.pool().clone()),
            #[allow(unreachable_patterns)]
            _ => return Ok(Self::memory()),
        };
        let registry = Registry { backend };
        for statement in [
            CREATE_THREADS,
            CREATE_THREADS_INDEX,
            CREATE_RUNS,
            CREATE_RUNS_INDEX,
            CREATE_EVENTS,
            CREATE_EVENTS_INDEX,
            CREATE_CANCELS,
        ] {
            sql!(registry, _t => {}, pool => {
                sqlx::query(statement)
                    .execute(pool)
                    .await
                    .map_err(RegistryError::new)?;
            });
        }
        registry.add_thread_columns().await?;
        Ok(registry)
    }

    /// Adds the search columns to a threads table an older version created, and fills
    /// them from each row's record.
    async fn add_thread_columns(&self) -> Result<(), RegistryError> {
        match &self.backend {
            Backend::Memory(_) => return Ok(()),
            Backend::Sqlite(pool) => {
                let present: Vec<(String,)> =
                    sqlx::query_as("SELECT name FROM pragma_table_info('keel_server_threads')")
                        .fetch_all(pool)
                        .await
                        .map_err(RegistryError::new)?;
                for (column, kind) in THREAD_COLUMNS {
                    if !present.iter().any(|(name,)| name == column) {
                        // Only the constant names above are formatted in.
                        sqlx::query(sqlx::AssertSqlSafe(format!(
                            "ALTER TABLE keel_server_threads ADD COLUMN {column} {kind}"
                        )))
                        .execute(pool)
                        .await
                        .map_err(RegistryError::new)?;
                    }
                }
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pool) => {
                for (column, kind) in THREAD_COLUMNS {
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "ALTER TABLE keel_server_threads ADD COLUMN IF NOT EXISTS {column} {kind}"
                    )))
                    .execute(pool)
                    .await
                    .map_err(RegistryError::new)?;
                }
            }
        }
        let stale: Vec<(String,)> = sql!(self, _t => Vec::new(), pool => {
            sqlx::query_as("SELECT record FROM keel_server_threads WHERE created_at_ms IS NULL OR status IS NULL")
                .fetch_all(pool)
                .await
                .map_err(RegistryError::new)?
        });
        for (text,) in stale {
            self.write_thread(&decode(&text)?).await?;
        }
        for statement in CREATE_THREADS_SORT_INDEXES {
            sql!(self, _t => {}, pool => {
                sqlx::query(statement)
                    .execute(pool)
                    .await
                    .map_err(RegistryError::new)?;
            });
        }
        Ok(())
    }

    /// After a restart of the only process using these records: runs it left pending or
    /// running are marked failed and their threads idle (nothing is running them any
    /// more). Returns how many runs were closed. Not for a database shared with other
    /// live processes.
    pub async fn recover_after_restart(&self) -> Result<usize, RegistryError> {
        let rows: Vec<String> = sql!(self, _t => return Ok(0), pool => {
            let rows: Vec<(String,)> = sqlx::query_as("SELECT record FROM keel_server_runs")
                .fetch_all(pool)
                .await
                .map_err(RegistryError::new)?;
            rows.into_iter().map(|(text,)| text).collect()
        });
        let mut closed = 0;
        for text in rows {
            let run: RunRecord = decode(&text)?;
            if run.status.is_final() {
                continue;
            }
            self.set_run_status(
                &run.thread_id,
                &run.run_id,
                RunStatus::Error,
                Some("the server stopped before the run ended".into()),
            )
            .await?;
            self.set_thread_status(&run.thread_id, ThreadStatus::Idle)
                .await?;
            closed += 1;
        }
        Ok(closed)
    }

    /// True when records are shared through a database other processes can reach.
    pub fn is_shared(&self) -> bool {
        #[cfg(feature = "postgres")]
        if matches!(self.backend, Backend::Postgres(_)) {
            return true;
        }
        false
    }

    /// Inserts a thread; `false` when the id is taken.
    pub(crate) async fn insert_thread(&self, record: ThreadRecord) -> Result<bool, RegistryError> {
        let text = encode(&record)?;
        sql!(self, t => {
            let mut t = t.write();
            if t.threads.contains_key(&record.thread_id) {
                return Ok(false);
            }
            t.threads.insert(record.thread_id.clone(), record);
            Ok(true)
        }, pool => {
            let done = sqlx::query(
                "INSERT INTO keel_server_threads (thread_id, owner, record, created_at_ms, updated_at_ms, status) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (thread_id) DO NOTHING",
            )
            .bind(&record.thread_id)
            .bind(&record.owner)
            .bind(&text)
            .bind(record.created_at_ms)
            .bind(record.updated_at_ms)
            .bind(record.status.as_str())
            .execute(pool)
            .await
            .map_err(RegistryError::new)?;
            Ok(done.rows_affected() == 1)
        })
    }

    async fn thread_any(&self, thread_id: &str) -> Result<Option<ThreadRecord>, RegistryError> {
        sql!(self, t => Ok(t.read().threads.get(thread_id).cloned()), pool => {
            let row: Option<(String,)> =
                sqlx::query_as("SELECT record FROM keel_server_threads WHERE thread_id = $1")
                    .bind(thread_id)
                    .fetch_optional(pool)
                    .await
                    .map_err(RegistryError::new)?;
            row.map(|(text,)| decode(&text)).transpose()
        })
    }

    async fn write_thread(&self, record: &ThreadRecord) -> Result<(), RegistryError> {
        let text = encode(record)?;
        sql!(self, t => {
            t.write().threads.insert(record.thread_id.clone(), record.clone());
            Ok(())
        }, pool => {
            sqlx::query("UPDATE keel_server_threads SET record = $2, created_at_ms = $3, updated_at_ms = $4, status = $5 WHERE thread_id = $1")
                .bind(&record.thread_id)
                .bind(&text)
                .bind(record.created_at_ms)
                .bind(record.updated_at_ms)
                .bind(record.status.as_str())
                .execute(pool)
                .await
                .map_err(RegistryError::new)?;
            Ok(())
        })
    }

    /// The thread, if it exists and belongs to `owner`.
    pub(crate) async fn thread(
        &self,
        owner: &str,
        thread_id: &str,
    ) -> Result<Option<ThreadRecord>, RegistryError> {
        Ok(self
            .thread_any(thread_id)
            .await?
            .filter(|t| t.owner == owner))
    }

    /// Changes a thread of `owner`; `None` when it is not theirs or does not exist.
    pub(crate) async fn update_thread(
        &self,
        owner: &str,
        thread_id: &str,
        change: impl FnOnce(&mut ThreadRecord),
    ) -> Result<Option<ThreadRecord>, RegistryError> {
        let Some(mut record) = self.thread(owner, thread_id).await? else {
            return Ok(None);
        };
        change(&mut record);
        record.updated_at_ms = now_ms();
        self.write_thread(&record).await?;
        Ok(Some(record))
    }

    /// Sets a thread's status, whoever owns it (the run manager's bookkeeping).
    pub(crate) async fn set_thread_status(
        &self,
        thread_id: &str,
        status: ThreadStatus,
    ) -> Result<(), RegistryError> {
        if let Some(mut record) = self.thread_any(thread_id).await? {
            record.status = status;
            record.updated_at_ms = now_ms();
            self.write_thread(&record).await?;
        }
        Ok(())
    }

    /// Deletes a thread of `owner` and its run records; `false` when it is not theirs.
    pub(crate) async fn delete_thread(
        &self,
        owner: &str,
        thread_id: &str,
    ) -> Result<bool, RegistryError> {
        sql!(self, t => {
            let mut t = t.write();
            if t.threads.get(thread_id).is_none_or(|r| r.owner != owner) {
                return Ok(false);
            }
            t.threads.remove(thread_id);
            t.runs.retain(|_, r| r.thread_id != thread_id);
            Ok(true)
        }, pool => {
            // All of the thread's records or none: a failure leaves the thread listed,
            // so deleting it again finishes the job.
            let mut tx = pool.begin().await.map_err(RegistryError::new)?;
            let done = sqlx::query("DELETE FROM keel_server_threads WHERE thread_id = $1 AND owner = $2")
                .bind(thread_id)
                .bind(owner)
                .execute(&mut *tx)
                .await
                .map_err(RegistryError::new)?;
            if done.rows_affected() == 0 {
                return Ok(false);
            }
            for statement in [
                "DELETE FROM keel_server_run_cancels WHERE run_id IN (SELECT run_id FROM keel_server_runs WHERE thread_id = $1)",
                "DELETE FROM keel_server_runs WHERE thread_id = $1",
                "DELETE FROM keel_server_run_events WHERE thread_id = $1",
            ] {
                sqlx::query(statement)
                    .bind(thread_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(RegistryError::new)?;
            }
            tx.commit().await.map_err(RegistryError::new)?;
            Ok(true)
        })
    }

    /// The threads of `owner` matching `filter`, newest first unless `ascending`.
    ///
    /// In a database, the owner and status are filtered, and the rows sorted and paged,
    /// in SQL; a metadata or id filter reads the sorted rows one at a time and stops
    /// once the page is full, so a search never holds more than one page of records
    /// (metadata is capped at [`MAX_METADATA_BYTES`]).
    pub(crate) async fn search_threads(
        &self,
        owner: &str,
        filter: &ThreadFilter,
        sort_by: &str,
        ascending: bool,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ThreadRecord>, RegistryError> {
        use futures::TryStreamExt;

        let column = match sort_by {
            "created_at" => "created_at_ms",
            "thread_id" => "thread_id",
            _ => "updated_at_ms",
        };
        let direction = if ascending { "ASC" } else { "DESC" };
        let status = filter.status.map(ThreadStatus::as_str);
        let in_rust = !filter.metadata.is_empty() || filter.ids.is_some();
        let paging = if in_rust {
            String::new()
        } else {
            format!(
                " LIMIT {} OFFSET {}",
                i64::try_from(limit).unwrap_or(i64::MAX),
                i64::try_from(offset).unwrap_or(i64::MAX)
            )
        };
        // Only constant column names, a direction and two numbers are formatted in.
        let text = format!(
            "SELECT record FROM keel_server_threads WHERE owner = $1 AND ($2 IS NULL OR status = $2) ORDER BY {column} {direction}, thread_id {direction}{paging}"
        );
        let mut found: Vec<ThreadRecord> = sql!(self, t => {
            let mut all: Vec<ThreadRecord> = t
                .read()
                .threads
                .values()
                .filter(|r| r.owner == owner && filter.keeps(r))
                .cloned()
                .collect();
            all.sort_by(|a, b| {
                let key = |r: &ThreadRecord| match sort_by {
                    "created_at" => (r.created_at_ms, r.thread_id.clone()),
                    "thread_id" => (0, r.thread_id.clone()),
                    _ => (r.updated_at_ms, r.thread_id.clone()),
                };
                key(a).cmp(&key(b))
            });
            if !ascending {
                all.reverse();
            }
            return Ok(all.into_iter().skip(offset).take(limit).collect());
        }, pool => {
            let mut rows = sqlx::query_as::<_, (String,)>(sqlx::AssertSqlSafe(text))
                .bind(owner)
                .bind(status)
                .fetch(pool);
            let mut page = Vec::new();
            let mut skipped = 0;
            while page.len() < limit {
                let Some((record,)) = rows.try_next().await.map_err(RegistryError::new)? else {
                    break;
                };
                let record: ThreadRecord = decode(&record)?;
                if in_rust && !filter.keeps(&record) {
                    continue;
                }
                if in_rust && skipped < offset {
                    skipped += 1;
                    continue;
                }
                page.push(record);
            }
            page
        });
        found.truncate(limit);
        Ok(found)
    }

    /// Records a new run.
    pub(crate) async fn insert_run(&self, record: &RunRecord) -> Result<(), RegistryError> {
        let text = encode(record)?;
        sql!(self, t => {
            t.write().runs.insert(record.run_id.clone(), record.clone());
            Ok(())
        }, pool => {
            sqlx::query("INSERT INTO keel_server_runs (run_id, thread_id, created_at_ms, record) VALUES ($1, $2, $3, $4)")
                .bind(&record.run_id)
                .bind(&record.thread_id)
                .bind(record.created_at_ms)
                .bind(&text)
                .execute(pool)
                .await
                .map_err(RegistryError::new)?;
            Ok(())
        })
    }

    /// A run of a thread.
    pub(crate) async fn run(
        &self,
        thread_id: &str,
        run_id: &str,
    ) -> Result<Option<RunRecord>, RegistryError> {
        sql!(self, t => {
            Ok(t.read().runs.get(run_id).filter(|r| r.thread_id == thread_id).cloned())
        }, pool => {
            let row: Option<(String,)> = sqlx::query_as(
                "SELECT record FROM keel_server_runs WHERE run_id = $1 AND thread_id = $2",
            )
            .bind(run_id)
            .bind(thread_id)
            .fetch_optional(pool)
            .await
            .map_err(RegistryError::new)?;
            row.map(|(text,)| decode(&text)).transpose()
        })
    }

    /// Sets a run's status (and error).
    pub(crate) async fn set_run_status(
        &self,
        thread_id: &str,
        run_id: &str,
        status: RunStatus,
        error: Option<String>,
    ) -> Result<(), RegistryError> {
        let Some(mut record) = self.run(thread_id, run_id).await? else {
            return Ok(());
        };
        record.status = status;
        record.error = error;
        record.updated_at_ms = now_ms();
        let text = encode(&record)?;
        sql!(self, t => {
            t.write().runs.insert(record.run_id.clone(), record);
            Ok(())
        }, pool => {
            sqlx::query("UPDATE keel_server_runs SET record = $2 WHERE run_id = $1")
                .bind(run_id)
                .bind(&text)
                .execute(pool)
                .await
                .map_err(RegistryError::new)?;
            Ok(())
        })
    }

    /// Deletes a run record.
    pub(crate) async fn delete_run(
        &self,
        thread_id: &str,
        run_id: &str,
    ) -> Result<bool, RegistryError> {
        sql!(self, t => {
            let mut t = t.write();
            if t.runs.get(run_id).is_none_or(|r| r.thread_id != thread_id) {
                return Ok(false);
            }
            t.runs.remove(run_id);
            Ok(true)
        }, pool => {
            let done = sqlx::query("DELETE FROM keel_server_runs WHERE run_id = $1 AND thread_id = $2")
                .bind(run_id)
                .bind(thread_id)
                .execute(pool)
                .await
                .map_err(RegistryError::new)?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Copies events of a run (in id order) for other processes; a no-op in memory.
    pub(crate) async fn append_events(
        &self,
        thread_id: &str,
        run_id: &str,
        events: &[StoredEvent],
    ) -> Result<(), RegistryError> {
        let now = now_ms();
        sql!(self, _t => Ok(()), pool => {
            for chunk in events.chunks(EVENT_ROWS_PER_INSERT) {
                let text = keel_store::multi_row(
                    "INSERT INTO keel_server_run_events (run_id, seq, thread_id, event, mode, data, written_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (run_id, seq) DO NOTHING",
                    chunk.len(),
                );
                // Only placeholders are formatted in; every value is bound.
                let mut query = sqlx::query(sqlx::AssertSqlSafe(text));
                for e in chunk {
                    query = query
                        .bind(run_id)
                        .bind(i64::try_from(e.seq).unwrap_or(i64::MAX))
                        .bind(thread_id)
                        .bind(&e.event)
                        .bind(&e.mode)
                        .bind(&e.data)
                        .bind(now);
                }
                query.execute(pool).await.map_err(RegistryError::new)?;
            }
            Ok(())
        })
    }

    /// Up to `limit` stored events of a run with id `>= from`, in order.
    pub(crate) async fn events_from(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, RegistryError> {
        sql!(self, _t => Ok(Vec::new()), pool => {
            let rows: Vec<(i64, String, Option<String>, String)> = sqlx::query_as(
                "SELECT seq, event, mode, data FROM keel_server_run_events WHERE run_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
            )
            .bind(run_id)
            .bind(i64::try_from(from).unwrap_or(i64::MAX))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await
            .map_err(RegistryError::new)?;
            Ok(rows
                .into_iter()
                .map(|(seq, event, mode, data)| StoredEvent {
                    seq: u64::try_from(seq).unwrap_or(0),
                    event,
                    mode,
                    data,
                })
                .collect())
        })
    }

    /// Deletes stored events (and cancel requests) written before `before_ms`; returns
    /// how many events went.
    pub(crate) async fn prune_events(&self, before_ms: i64) -> Result<u64, RegistryError> {
        sql!(self, _t => Ok(0), pool => {
            sqlx::query("DELETE FROM keel_server_run_cancels WHERE written_at_ms < $1")
                .bind(before_ms)
                .execute(pool)
                .await
                .map_err(RegistryError::new)?;
            let done = sqlx::query("DELETE FROM keel_server_run_events WHERE written_at_ms < $1")
                .bind(before_ms)
                .execute(pool)
                .await
                .map_err(RegistryError::new)?;
            Ok(done.rows_affected())
        })
    }

    /// Asks the process running a run to cancel it (`interrupt` or `rollback`); the
    /// first request counts.
    pub(crate) async fn request_cancel(
        &self,
        run_id: &str,
        action: &str,
    ) -> Result<(), RegistryError> {
        sql!(self, _t => Ok(()), pool => {
            sqlx::query("INSERT INTO keel_server_run_cancels (run_id, action, written_at_ms) VALUES ($1, $2, $3) ON CONFLICT (run_id) DO NOTHING")
                .bind(run_id)
                .bind(action)
                .bind(now_ms())
                .execute(pool)
                .await
                .map_err(RegistryError::new)?;
            Ok(())
        })
    }

    /// The cancel requested for a run by another process, if any.
    pub(crate) async fn cancel_requested(
        &self,
        run_id: &str,
    ) -> Result<Option<String>, RegistryError> {
        sql!(self, _t => Ok(None), pool => {
            let row: Option<(String,)> =
                sqlx::query_as("SELECT action FROM keel_server_run_cancels WHERE run_id = $1")
                    .bind(run_id)
                    .fetch_optional(pool)
                    .await
                    .map_err(RegistryError::new)?;
            Ok(row.map(|(a,)| a))
        })
    }

    /// The runs of a thread, newest first.
    pub(crate) async fn runs(
        &self,
        thread_id: &str,
        status: Option<RunStatus>,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<RunRecord>, RegistryError> {
        let mut runs: Vec<RunRecord> = sql!(self, t => {
            t.read().runs.values().filter(|r| r.thread_id == thread_id).cloned().collect()
        }, pool => {
            let rows: Vec<(String,)> =
                sqlx::query_as("SELECT record FROM keel_server_runs WHERE thread_id = $1")
                    .bind(thread_id)
                    .fetch_all(pool)
                    .await
                    .map_err(RegistryError::new)?;
            rows.iter().map(|(text,)| decode(text)).collect::<Result<_, _>>()?
        });
        runs.retain(|r| status.is_none_or(|s| r.status == s));
        runs.sort_by(|a, b| (b.created_at_ms, &b.run_id).cmp(&(a.created_at_ms, &a.run_id)));
        Ok(runs.into_iter().skip(offset).take(limit).collect())
    }
}
