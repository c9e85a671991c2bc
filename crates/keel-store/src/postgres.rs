//! The PostgreSQL backend (feature `postgres`): for several agent processes, on one or
//! many hosts, sharing sessions. See the [crate docs](crate) for the schema.

use std::str::FromStr;
use std::time::Duration;

use keel_core::store::StoreError;
use sqlx::ConnectOptions as _;
use sqlx::Connection as _;
use sqlx::SqlSafeStr as _;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::error::{ConnectError, redact_url};
use crate::sql::{Dialect, Queries, SqlStore};
use crate::{Backend, Storage};

/// Default pool size per store; each agent process usually holds one store.
const POOL_SIZE: u32 = 10;
/// How long a query waits for a free connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

const QUERIES: Queries = Queries {
    append: "INSERT INTO chat_messages (flow_id, user_id, session_id, context_id, message_id, \
             timestamp_ms, role, body) VALUES ($1, $2, $3, $4, $5, $6, $7, CAST($8 AS JSON))",
    append_new: "INSERT INTO chat_messages (flow_id, user_id, session_id, context_id, message_id, \
             timestamp_ms, role, body) VALUES ($1, $2, $3, $4, $5, $6, $7, CAST($8 AS JSON)) \
             ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) DO NOTHING",
    append_stamped: crate::sql::append_stamped!("GREATEST", "CAST(v.column4 AS JSON)"),
    insert_state: "INSERT INTO session_memory_state (flow_id, user_id, session_id, context_id, \
             summary, pinned, covered_until_message_id, covered_until_timestamp, absorbed_count, \
             summary_model, version, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, CAST($6 AS JSON), $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (flow_id, user_id, session_id, context_id) DO NOTHING",
    update_state: "UPDATE session_memory_state SET summary = $5, pinned = CAST($6 AS JSON), \
             covered_until_message_id = $7, covered_until_timestamp = $8, absorbed_count = $9, \
             summary_model = $10, version = $11, updated_at_ms = $12 \
             WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4 \
             AND version = $13",
    put_summary: "INSERT INTO summary_cache (key, value, updated_at_ms) \
             VALUES ($1, CAST($2 AS JSON), $3) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
             updated_at_ms = excluded.updated_at_ms",
    // PostgreSQL's planner picks the partial index on (thread_id, message_id) itself.
    entry_live: "SELECT position, added_seq FROM checkpoint_entries \
             WHERE thread_id = $1 AND message_id = $2 AND removed_seq IS NULL AND branch = $3",
};

/// The embedded migrations, in order. Expand-only. sqlx takes an advisory lock while
/// it runs them, so processes starting together do not race.
fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            "init".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0001_init.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "checkpoint deltas".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0002_checkpoint_deltas.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "checkpoint branches".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0003_checkpoint_branches.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            "recall index".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0004_recall_index.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "summary leases".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0005_summary_leases.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            6,
            "recall scoped terms".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0006_recall_scoped_terms.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            7,
            "recall term counts".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0007_recall_term_counts.sql").into_sql_str(),
            false,
        ),
    ])
}

/// A store on PostgreSQL. Cheap to clone (clones share the pool).
pub type PostgresStore = SqlStore<sqlx::Postgres>;

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:5432/db`) with a pool of 10
    /// connections and runs the migrations.
    pub async fn connect(url: &str) -> Result<Self, ConnectError> {
        let options = PgConnectOptions::from_str(url).map_err(|e| ConnectError::InvalidUrl {
            backend: Backend::Postgres,
            url: redact_url(url),
            detail: e.to_string(),
        })?;
        Self::open(
            options,
            PgPoolOptions::new().max_connections(POOL_SIZE),
            redact_url(url),
        )
        .await
    }

    /// Connects with explicit options (for example another `search_path`, so that
    /// services or tests each get their own schema) and pool settings, and runs the
    /// migrations.
    pub async fn connect_with(
        options: PgConnectOptions,
        pool: PgPoolOptions,
    ) -> Result<Self, ConnectError> {
        let name = format!(
            "postgres://{}@{}:{}/{}",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or_default()
        );
        Self::open(options, pool, name).await
    }

    async fn open(
        options: PgConnectOptions,
        pool: PgPoolOptions,
        name: String,
    ) -> Result<Self, ConnectError> {
        // One direct connection first: the pool retries a refused or failing connection
        // until its acquire timeout and then only says "pool timed out"; a single attempt
        // fails at once with the real cause.
        let first = tokio::time::timeout(ACQUIRE_TIMEOUT, options.connect()).await;
        let failed = |detail: String| ConnectError::Connect {
            backend: Backend::Postgres,
            url: name.clone(),
            detail: crate::error::with_hint(&detail),
        };
        match first {
            Err(_) => {
                return Err(failed(format!(
                    "no answer within {} s",
                    ACQUIRE_TIMEOUT.as_secs()
                )));
            }
            Ok(Err(e)) => return Err(failed(e.to_string())),
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
            }
        }
        let pool = pool
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(|e| failed(e.to_string()))?;
        migrator()
            .run(&pool)
            .await
            .map_err(|e| ConnectError::Migrate {
                backend: Backend::Postgres,
                detail: e.to_string(),
            })?;
        Ok(PostgresStore { pool })
    }

    /// The connection pool, for callers that keep their own tables next to Keel's.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait::async_trait]
impl Storage for PostgresStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        migrator()
            .run(&self.pool)
            .await
            .map_err(|e| StoreError::Backend(format!("migration failed: {e}")))
    }
}

impl Dialect for sqlx::Postgres {
    const STORE_NAME: &'static str = "PostgresStore";
    const QUERIES: Queries = QUERIES;
    const MULTI_STATEMENT: bool = false;

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}
