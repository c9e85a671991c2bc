//! [`Store`]: one handle on whichever backend a URL names.

use async_trait::async_trait;
use keel_core::message::Message;
use keel_core::store::{
    ChatHistoryStore, Checkpoint, CheckpointWrite, Checkpointer, Cursor, PutOutcome, SaveOutcome,
    SessionMemoryState, SessionMemoryStore, SessionScope, StoreError, StoredMessage, SummaryStore,
};
use serde_json::Value;

use crate::error::{ConnectError, redact_url};
use crate::memory::MemoryStore;

/// Which backend a store runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// [`MemoryStore`](crate::memory::MemoryStore).
    Memory,
    /// SQLite (feature `sqlite`).
    Sqlite,
    /// PostgreSQL (feature `postgres`).
    Postgres,
}

impl Backend {
    /// `memory`, `sqlite` or `postgres` (also the name of the cargo feature, where one
    /// is needed).
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a Keel store offers: the four storage contracts plus schema management.
/// Implemented by each backend and by [`Store`]; the conformance suite (the `conformance`
/// module, feature `conformance`) is written against it.
#[async_trait]
pub trait Storage:
    Checkpointer + ChatHistoryStore + SessionMemoryStore + SummaryStore + Send + Sync
{
    /// The backend this store runs on.
    fn backend(&self) -> Backend;
    /// Applies the embedded migrations that are not applied yet (connect already did;
    /// calling it again is a no-op). Expand-only: never drops anything.
    async fn migrate(&self) -> Result<(), StoreError>;
}

/// A store on any backend, chosen at run time by [`Store::connect`]. Cheap to clone:
/// clones share the connection pool (or the in-memory maps).
#[derive(Clone, Debug)]
pub enum Store {
    /// In process memory.
    Memory(MemoryStore),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(crate::sqlite::SqliteStore),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PostgresStore),
}

impl Store {
    /// Opens the store a URL names and runs the migrations:
    ///
    /// - `sqlite://path/to/keel.db` (a file, created on first use; `?mode=rw` requires
    ///   it to exist, `?mode=ro` opens it read-only), `sqlite:keel.db`, or
    ///   `sqlite::memory:` (feature `sqlite`);
    /// - `postgres://user:password@host:5432/db` or `postgresql://...` (feature `postgres`);
    /// - `memory:` (always available).
    ///
    /// A path without a scheme is [`ConnectError::MissingScheme`], with the `sqlite://`
    /// URL to use; an unknown scheme is [`ConnectError::UnknownScheme`]; a backend
    /// compiled out is [`ConnectError::BackendDisabled`], naming the feature to enable.
    pub async fn connect(url: &str) -> Result<Store, ConnectError> {
        let Some((scheme, _)) = url.split_once(':').filter(|(s, _)| is_scheme(s)) else {
            return Err(ConnectError::MissingScheme {
                url: redact_url(url),
                suggestion: format!("sqlite://{url}"),
            });
        };
        match scheme.to_ascii_lowercase().as_str() {
            "memory" => Ok(Store::Memory(MemoryStore::new())),
            "sqlite" => Self::connect_sqlite(url).await,
            "postgres" | "postgresql" => Self::connect_postgres(url).await,
            other => Err(ConnectError::UnknownScheme {
                scheme: other.to_owned(),
                url: redact_url(url),
            }),
        }
    }

    /// [`Store::connect`], with a pool of one connection on SQLite
    /// ([`SqliteStore::connect_single`](crate::sqlite::SqliteStore::connect_single)): for a
    /// single-process tool that runs one query at a time. Other URLs open as with
    /// [`Store::connect`].
    pub async fn connect_single(url: &str) -> Result<Store, ConnectError> {
        #[cfg(feature = "sqlite")]
        if url
            .split_once(':')
            .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("sqlite"))
        {
            return Ok(Store::Sqlite(
                crate::sqlite::SqliteStore::connect_single(url).await?,
            ));
        }
        Self::connect(url).await
    }

    /// A fresh in-memory store.
    pub fn memory() -> Store {
        Store::Memory(MemoryStore::new())
    }

    #[cfg(feature = "sqlite")]
    async fn connect_sqlite(url: &str) -> Result<Store, ConnectError> {
        Ok(Store::Sqlite(
            crate::sqlite::SqliteStore::connect(url).await?,
        ))
    }

    #[cfg(not(feature = "sqlite"))]
    async fn connect_sqlite(_url: &str) -> Result<Store, ConnectError> {
        Err(ConnectError::BackendDisabled {
            backend: Backend::Sqlite,
            feature: "sqlite",
        })
    }

    #[cfg(feature = "postgres")]
    async fn connect_postgres(url: &str) -> Result<Store, ConnectError> {
        Ok(Store::Postgres(
            crate::postgres::PostgresStore::connect(url).await?,
        ))
    }

    #[cfg(not(feature = "postgres"))]
    async fn connect_postgres(_url: &str) -> Result<Store, ConnectError> {
        Err(ConnectError::BackendDisabled {
            backend: Backend::Postgres,
            feature: "postgres",
        })
    }
}

/// True when `s` can be a URL scheme (RFC 3986: a letter, then letters, digits, `+`,
/// `-`, `.`); a single letter is a Windows drive (`C:`), not a scheme.
fn is_scheme(s: &str) -> bool {
    s.len() > 1
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Runs `$call` on whichever backend `$self` holds.
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            Store::Memory($s) => $call,
            #[cfg(feature = "sqlite")]
            Store::Sqlite($s) => $call,
            #[cfg(feature = "postgres")]
            Store::Postgres($s) => $call,
        }
    };
}

#[async_trait]
impl Storage for Store {
    fn backend(&self) -> Backend {
        dispatch!(self, s => s.backend())
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        dispatch!(self, s => s.migrate().await)
    }
}

#[async_trait]
impl Storage for MemoryStore {
    fn backend(&self) -> Backend {
        Backend::Memory
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl Checkpointer for Store {
    async fn put(&self, thread_id: &str, write: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        dispatch!(self, s => s.put(thread_id, write).await)
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        dispatch!(self, s => s.latest(thread_id).await)
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Checkpoint>, StoreError> {
        dispatch!(self, s => s.history(thread_id).await)
    }

    async fn history_page(
        &self,
        thread_id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        dispatch!(self, s => s.history_page(thread_id, before, limit).await)
    }

    async fn checkpoint_at(
        &self,
        thread_id: &str,
        seq: u64,
    ) -> Result<Option<Checkpoint>, StoreError> {
        dispatch!(self, s => s.checkpoint_at(thread_id, seq).await)
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<u64, StoreError> {
        dispatch!(self, s => s.delete_thread(thread_id).await)
    }

    async fn fork(
        &self,
        thread_id: &str,
        from: u64,
        write: CheckpointWrite,
    ) -> Result<PutOutcome, StoreError> {
        dispatch!(self, s => s.fork(thread_id, from, write).await)
    }

    async fn branch_page(
        &self,
        thread_id: &str,
        tip: Option<u64>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        dispatch!(self, s => s.branch_page(thread_id, tip, before, limit).await)
    }

    async fn tree_page(
        &self,
        thread_id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        dispatch!(self, s => s.tree_page(thread_id, before, limit).await)
    }

    async fn copy_thread(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        dispatch!(self, s => s.copy_thread(from, to).await)
    }
}

#[async_trait]
impl ChatHistoryStore for Store {
    async fn append(
        &self,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.append(scope, messages).await)
    }

    async fn append_new(
        &self,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.append_new(scope, messages).await)
    }

    async fn append_stamped(
        &self,
        scope: &SessionScope,
        messages: &[Message],
        not_before_ms: i64,
    ) -> Result<Vec<Cursor>, StoreError> {
        dispatch!(self, s => s.append_stamped(scope, messages, not_before_ms).await)
    }

    async fn append_stamped_counting(
        &self,
        scope: &SessionScope,
        messages: &[Message],
        not_before_ms: i64,
        count_after: Option<&Cursor>,
    ) -> Result<(Vec<Cursor>, u64), StoreError> {
        dispatch!(self, s => s.append_stamped_counting(scope, messages, not_before_ms, count_after).await)
    }

    async fn delete_session_history(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.delete_session_history(flow_id, user_id, session_id).await)
    }

    async fn last_n(
        &self,
        scope: &SessionScope,
        n: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        dispatch!(self, s => s.last_n(scope, n).await)
    }

    async fn newest_timestamp(&self, scope: &SessionScope) -> Result<Option<i64>, StoreError> {
        dispatch!(self, s => s.newest_timestamp(scope).await)
    }

    async fn after(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        dispatch!(self, s => s.after(scope, cursor, limit).await)
    }

    async fn count_after(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.count_after(scope, cursor).await)
    }
}

#[async_trait]
impl SessionMemoryStore for Store {
    async fn get_state(
        &self,
        scope: &SessionScope,
    ) -> Result<Option<SessionMemoryState>, StoreError> {
        dispatch!(self, s => s.get_state(scope).await)
    }

    async fn save_state(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        expected_version: u64,
    ) -> Result<SaveOutcome, StoreError> {
        dispatch!(self, s => s.save_state(scope, state, expected_version).await)
    }

    async fn delete_session_states(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.delete_session_states(flow_id, user_id, session_id).await)
    }
}

#[async_trait]
impl SummaryStore for Store {
    async fn get_summary(&self, key: &str) -> Result<Option<Value>, StoreError> {
        dispatch!(self, s => s.get_summary(key).await)
    }

    async fn put_summary(&self, key: &str, value: &Value) -> Result<(), StoreError> {
        dispatch!(self, s => s.put_summary(key, value).await)
    }

    async fn delete_summaries(&self, prefix: &str) -> Result<u64, StoreError> {
        dispatch!(self, s => s.delete_summaries(prefix).await)
    }

    async fn try_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.try_lease(key, holder, ttl).await)
    }

    async fn release_lease(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        dispatch!(self, s => s.release_lease(key, holder).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_scheme_is_typed_and_redacted() {
        let err = Store::connect("mysql://root:hunter2@db/keel")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ConnectError::UnknownScheme { ref scheme, .. } if scheme == "mysql"));
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("sqlite:") && text.contains("postgres:"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn memory_url_opens_the_memory_backend() {
        let store = Store::connect("memory:").await.unwrap();
        assert_eq!(store.backend(), Backend::Memory);
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn compiled_out_backend_names_its_feature() {
        let err = Store::connect("postgres://localhost/keel")
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            ConnectError::BackendDisabled {
                backend: Backend::Postgres,
                feature: "postgres"
            }
        ));
        assert!(err.to_string().contains("`postgres`"), "{err}");
    }

    #[cfg(not(feature = "sqlite"))]
    #[tokio::test]
    async fn compiled_out_sqlite_names_its_feature() {
        let err = Store::connect("sqlite::memory:").await.unwrap_err();
        assert!(matches!(
            err,
            ConnectError::BackendDisabled {
                backend: Backend::Sqlite,
                feature: "sqlite"
            }
        ));
    }
}
