//! The SQLite backend (feature `sqlite`): an embedded database in one file, in WAL mode,
//! or in memory. See the [crate docs](crate) for the schema and when to prefer PostgreSQL.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use keel_core::store::StoreError;
use sqlx::SqlSafeStr as _;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::error::{ConnectError, redact_url};
use crate::sql::{Dialect, Queries, SqlStore};
use crate::{Backend, Storage};

/// How long a writer waits for the write lock before SQLite reports "database is locked".
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections of a file database: readers run in parallel under WAL; writers queue.
const FILE_POOL_SIZE: u32 = 4;
/// Bytes of a file database each connection maps into memory for reading (256 MiB).
const MMAP_SIZE: &str = "268435456";

const QUERIES: Queries = Queries {
    append: "INSERT INTO chat_messages (flow_id, user_id, session_id, context_id, message_id, \
             timestamp_ms, role, body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    append_new: "INSERT INTO chat_messages (flow_id, user_id, session_id, context_id, message_id, \
             timestamp_ms, role, body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) DO NOTHING",
    append_stamped: crate::sql::append_stamped!("MAX", "v.column4"),
    insert_state: "INSERT INTO session_memory_state (flow_id, user_id, session_id, context_id, \
             summary, pinned, covered_until_message_id, covered_until_timestamp, absorbed_count, \
             summary_model, version, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (flow_id, user_id, session_id, context_id) DO NOTHING",
    update_state: "UPDATE session_memory_state SET summary = $5, pinned = $6, \
             covered_until_message_id = $7, covered_until_timestamp = $8, absorbed_count = $9, \
             summary_model = $10, version = $11, updated_at_ms = $12 \
             WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4 \
             AND version = $13",
    put_summary: "INSERT INTO summary_cache (key, value, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
             updated_at_ms = excluded.updated_at_ms",
    // Without statistics SQLite prefers the primary key's `thread_id` prefix, which walks
    // every entry of the thread for each message written.
    entry_live: "SELECT position, added_seq FROM checkpoint_entries \
             INDEXED BY checkpoint_entries_live \
             WHERE thread_id = $1 AND message_id = $2 AND removed_seq IS NULL AND branch = $3",
};

/// The embedded migrations, in order. Expand-only.
/// How many times the migrator runs before its error is reported.
const MIGRATE_ATTEMPTS: u32 = 5;

/// Runs the migrations, again if they fail. sqlx takes no lock for SQLite migrations,
/// so processes starting together on a new file race: the loser's migration fails on
/// the bookkeeping table and its transaction rolls back. Running the migrator again
/// finds the schema applied and does nothing. A real failure (a read-only file, a
/// corrupt database) fails every attempt and is reported after about a quarter second.
async fn run_migrations(pool: &SqlitePool) -> Result<(), sqlx::migrate::MigrateError> {
    let mut attempt = 1;
    loop {
        match migrator().run(pool).await {
            Ok(()) => return Ok(()),
            Err(e) if attempt >= MIGRATE_ATTEMPTS => return Err(e),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                attempt += 1;
            }
        }
    }
}

fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            "init".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0001_init.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "checkpoint deltas".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0002_checkpoint_deltas.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "checkpoint branches".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0003_checkpoint_branches.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            "recall index".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0004_recall_index.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "summary leases".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0005_summary_leases.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            6,
            "recall scoped terms".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0006_recall_scoped_terms.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            7,
            "recall term counts".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0007_recall_term_counts.sql").into_sql_str(),
            false,
        ),
    ])
}

/// True for SQLite's "cannot write" errors.
fn is_read_only(text: &str) -> bool {
    text.contains("readonly") || text.contains("read-only") || text.contains("read only")
}

/// Names what is wrong with a database path before SQLite reports "unable to open
/// database file" for all of these alike.
fn check_path(path: &Path, url: &str, mode: Option<&str>) -> Result<(), ConnectError> {
    let problem = |problem: String| ConnectError::Path {
        url: redact_url(url),
        problem,
    };
    if path.is_dir() {
        return Err(problem(format!(
            "{} is a folder; name a database file inside it, for example sqlite://{}",
            path.display(),
            path.join("keel.db").display()
        )));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(problem(if parent.exists() {
            format!("{} is not a folder", parent.display())
        } else {
            format!(
                "the folder {} does not exist; create it (mkdir -p {}) or choose another path",
                parent.display(),
                parent.display()
            )
        }));
    }
    if !path.exists() && matches!(mode, Some("ro" | "rw")) {
        return Err(problem(format!(
            "{} does not exist, and mode={} does not create it; drop `?mode=...` to create \
             it on first use",
            path.display(),
            mode.unwrap_or_default()
        )));
    }
    Ok(())
}

/// A store on SQLite. Cheap to clone (clones share the pool).
pub type SqliteStore = SqlStore<sqlx::Sqlite>;

impl SqliteStore {
    /// Opens `url` and runs the migrations. `sqlite://path.db` creates the file if it is
    /// missing (as `?mode=rwc` does); `?mode=rw` requires it to exist; `?mode=ro` opens
    /// it read-only; `sqlite::memory:` is a private in-memory database. A file database
    /// is put in WAL mode with `synchronous = NORMAL` and a 5 s busy timeout.
    ///
    /// Problems with the path are named before SQLite is asked: a directory, a folder
    /// that does not exist, a missing file with `mode=ro`. A database that cannot be
    /// written is found here, not at its first write ([`ConnectError::ReadOnly`]).
    pub async fn connect(url: &str) -> Result<Self, ConnectError> {
        Self::connect_pool(url, FILE_POOL_SIZE).await
    }

    /// [`Self::connect`] with a pool of one connection, for a tool that is the only
    /// process writing and runs one query at a time (`keel replay`): each query goes
    /// to the one connection whose statement cache holds it, instead of to whichever
    /// of the pool's connections is idle. A server keeps [`Self::connect`]'s pool, whose
    /// readers run in parallel.
    pub async fn connect_single(url: &str) -> Result<Self, ConnectError> {
        Self::connect_pool(url, 1).await
    }

    async fn connect_pool(url: &str, pool_size: u32) -> Result<Self, ConnectError> {
        let mut options =
            SqliteConnectOptions::from_str(url).map_err(|e| ConnectError::InvalidUrl {
                backend: Backend::Sqlite,
                url: redact_url(url),
                detail: e.to_string(),
            })?;
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let mode = url.split_once('?').and_then(|(_, query)| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix("mode="))
                .map(str::to_ascii_lowercase)
        });
        if mode.is_none() {
            options = options.create_if_missing(true);
        }
        let read_only = mode.as_deref() == Some("ro");
        if !in_memory {
            check_path(options.get_filename(), url, mode.as_deref())?;
        }
        let store = Self::open(options, in_memory, redact_url(url), pool_size).await?;
        if !in_memory && !read_only {
            store.check_writable(url).await?;
        }
        Ok(store)
    }

    /// Fails with [`ConnectError::ReadOnly`] when the database cannot be written (file
    /// permissions, a read-only mount): a write transaction is begun and rolled back.
    async fn check_writable(&self, url: &str) -> Result<(), ConnectError> {
        let mut attempt = 1;
        loop {
            match self.write_probe().await {
                Err(e) if attempt < MIGRATE_ATTEMPTS && e.to_string().contains("locked") => {
                    tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                    attempt += 1;
                }
                Ok(()) => return Ok(()),
                Err(e) if is_read_only(&e.to_string()) => {
                    return Err(ConnectError::ReadOnly {
                        url: redact_url(url),
                    });
                }
                Err(e) => {
                    return Err(ConnectError::Connect {
                        backend: Backend::Sqlite,
                        url: redact_url(url),
                        detail: format!(
                            "checking that the database can be written: {}",
                            crate::error::with_hint(&e.to_string())
                        ),
                    });
                }
            }
        }
    }

    /// A write transaction begun and rolled back.
    async fn write_probe(&self) -> Result<(), sqlx::Error> {
        let probe = async {
            let mut conn = self.pool.acquire().await?;
            sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
            let write = sqlx::query(
                "DELETE FROM summary_cache WHERE key = 'keel: write probe, never a real key'",
            )
            .execute(&mut *conn)
            .await;
            sqlx::query("ROLLBACK").execute(&mut *conn).await?;
            write.map(|_| ())
        };
        probe.await
    }

    /// Opens a database from explicit options and runs the migrations. `in_memory`
    /// keeps exactly one connection open for the store's life: an in-memory database
    /// exists only while a connection to it does, and each connection would otherwise
    /// see its own.
    pub async fn connect_with(
        options: SqliteConnectOptions,
        in_memory: bool,
    ) -> Result<Self, ConnectError> {
        let name = options.get_filename().display().to_string();
        Self::open(options, in_memory, name, FILE_POOL_SIZE).await
    }

    /// `pool_size` connections for a file database (an in-memory one has one).
    async fn open(
        options: SqliteConnectOptions,
        in_memory: bool,
        name: String,
        pool_size: u32,
    ) -> Result<Self, ConnectError> {
        let options = options.busy_timeout(BUSY_TIMEOUT).foreign_keys(true);
        let (options, pool) = if in_memory {
            (
                options,
                SqlitePoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    // A local file or memory handle cannot drop like a socket: the
                    // pool's ping before every query would be a wasted round trip.
                    .test_before_acquire(false)
                    .idle_timeout(None)
                    .max_lifetime(None),
            )
        } else {
            (
                options
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    // Reads map the file (up to 256 MiB) instead of copying each page
                    // into the connection's own cache: a recall search reads a few
                    // hundred rows scattered over the file.
                    .pragma("mmap_size", MMAP_SIZE),
                SqlitePoolOptions::new()
                    .max_connections(pool_size.max(1))
                    .test_before_acquire(false),
            )
        };
        // Switching a brand-new file to WAL needs a moment of exclusive access, and
        // SQLite reports "database is locked" at once (without its busy wait) to a
        // process that opens the file in that moment: try again, as for migrations.
        let mut attempt = 1;
        let pool = loop {
            match pool.clone().connect_with(options.clone()).await {
                Err(e) if attempt < MIGRATE_ATTEMPTS && e.to_string().contains("locked") => {
                    tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                    attempt += 1;
                }
                other => break other,
            }
        };
        let pool = pool.map_err(|e| {
            let detail = e.to_string();
            if is_read_only(&detail) {
                ConnectError::ReadOnly { url: name.clone() }
            } else {
                ConnectError::Connect {
                    backend: Backend::Sqlite,
                    url: name.clone(),
                    detail: crate::error::with_hint(&detail),
                }
            }
        })?;
        run_migrations(&pool).await.map_err(|e| {
            let detail = e.to_string();
            if is_read_only(&detail) {
                ConnectError::ReadOnly { url: name.clone() }
            } else {
                ConnectError::Migrate {
                    backend: Backend::Sqlite,
                    detail: crate::error::with_hint(&detail),
                }
            }
        })?;
        Ok(SqliteStore { pool })
    }

    /// The connection pool, for callers that keep their own tables next to Keel's.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

#[async_trait::async_trait]
impl Storage for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        run_migrations(&self.pool)
            .await
            .map_err(|e| StoreError::Backend(format!("migration failed: {e}")))
    }
}

impl Dialect for sqlx::Sqlite {
    const STORE_NAME: &'static str = "SqliteStore";
    const QUERIES: Queries = QUERIES;
    const MULTI_STATEMENT: bool = true;

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

    use super::*;

    /// A checkpoint write looks up each message's live entry; that lookup must use the
    /// `(thread_id, message_id)` index, not walk the thread's entries by the primary key
    /// (which made a step of 10,000 new messages hold the write lock for seconds).
    #[tokio::test]
    async fn the_live_entry_lookup_uses_its_index() {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {}",
            QUERIES.entry_live
        )))
        .bind("t")
        .bind("m")
        .bind(0_i64)
        .fetch_all(store.pool())
        .await
        .unwrap();
        let detail: Vec<&str> = plan.iter().map(|r| r.3.as_str()).collect();
        assert!(
            detail
                .iter()
                .any(|d| d.contains("USING INDEX checkpoint_entries_live")),
            "{detail:?}"
        );
    }
}
