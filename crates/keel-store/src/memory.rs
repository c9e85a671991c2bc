//! The in-memory backend: every store trait on plain maps behind one lock.
//!
//! Always compiled, whatever the features. Use it in tests, and as the fallback when no
//! database is configured (state then lives as long as the process). It passes the same
//! conformance suite as the SQL backends (the `conformance` module, feature
//! `conformance`), so code tested against it
//! behaves the same on SQLite and PostgreSQL.
//!
//! ```
//! use keel_core::store::{SessionMemoryStore, SessionMemoryState, SaveOutcome, SessionScope};
//! use keel_store::memory::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let scope = SessionScope::new("flow", "user", "session", "");
//! let state = SessionMemoryState { summary: "- project PRJ-123".into(), ..Default::default() };
//! assert_eq!(store.save_state(&scope, &state, 0).await?, SaveOutcome::Saved { version: 1 });
//! // A second writer that also read version 0 loses and must reload.
//! assert_eq!(store.save_state(&scope, &state, 0).await?, SaveOutcome::Conflict);
//! # Ok::<(), keel_core::store::StoreError>(())
//! # }).unwrap();
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::checkpoint_log::CheckpointLog;
use keel_core::message::Message;
use keel_core::store::{
    ChatHistoryStore, Checkpoint, CheckpointWrite, Checkpointer, Cursor, PutOutcome, SaveOutcome,
    SessionMemoryState, SessionMemoryStore, SessionScope, StoreError, StoredMessage, SummaryStore,
};
use parking_lot::Mutex;
use serde_json::Value;

use crate::check;

/// The in-memory store. Cloning is cheap and clones share the same data, like two
/// handles on one database.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    recall: Arc<keel_core::recall::MemoryRecallIndex>,
}

#[derive(Default)]
struct Inner {
    /// Every step of every thread, as deltas with a materialized head.
    checkpoints: HashMap<String, CheckpointLog>,
    history: HashMap<SessionScope, ScopeHistory>,
    states: HashMap<SessionScope, SessionMemoryState>,
    summaries: HashMap<String, Value>,
    /// Summary leases: key to (holder, expiry).
    leases: HashMap<String, (String, std::time::Instant)>,
}

#[derive(Default)]
struct ScopeHistory {
    /// Messages keyed by their position, which is also the read order.
    by_position: BTreeMap<Cursor, Message>,
    /// Ids are unique per scope whatever their timestamp.
    ids: HashSet<String>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// What `read` gives of thread `thread_id`'s checkpoint log (the default, empty, for
    /// a thread without one): every checkpoint reader's one path to the log.
    fn read_log<T: Default>(
        &self,
        thread_id: &str,
        read: impl FnOnce(&CheckpointLog) -> T,
    ) -> Result<T, StoreError> {
        check::text("thread_id", thread_id)?;
        Ok(self
            .inner
            .lock()
            .checkpoints
            .get(thread_id)
            .map(read)
            .unwrap_or_default())
    }

    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The recall index (BM25 over in-memory postings).
    pub(crate) fn recall_index(&self) -> &keel_core::recall::MemoryRecallIndex {
        &self.recall
    }

    /// Every scope holding chat history.
    pub(crate) fn history_scopes(&self) -> Vec<SessionScope> {
        let mut v: Vec<SessionScope> = self.inner.lock().history.keys().cloned().collect();
        v.sort();
        v
    }

    /// Every thread holding checkpoints.
    pub(crate) fn checkpoint_threads(&self) -> Vec<String> {
        let mut v: Vec<String> = self.inner.lock().checkpoints.keys().cloned().collect();
        v.sort();
        v
    }
}

fn stored(cursor: &Cursor, message: &Message) -> StoredMessage {
    StoredMessage {
        timestamp_ms: cursor.timestamp_ms,
        message: message.clone(),
    }
}

fn check_checkpoint(thread_id: &str, write: &CheckpointWrite) -> Result<(), StoreError> {
    check::text("thread_id", thread_id)?;
    check::text("checkpoint.run_id", &write.run_id)?;
    check::text("checkpoint.node", &write.node)
}

#[async_trait]
impl Checkpointer for MemoryStore {
    async fn put(&self, thread_id: &str, write: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        check_checkpoint(thread_id, &write)?;
        let mut inner = self.inner.lock();
        if let Some(log) = inner.checkpoints.get_mut(thread_id) {
            return log.put(write);
        }
        let mut log = CheckpointLog::new(0);
        let outcome = log.put(write)?;
        if matches!(outcome, PutOutcome::Saved { .. }) {
            inner.checkpoints.insert(thread_id.to_owned(), log);
        }
        Ok(outcome)
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.read_log(thread_id, CheckpointLog::latest)
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Checkpoint>, StoreError> {
        self.read_log(thread_id, CheckpointLog::history)
    }

    async fn history_page(
        &self,
        thread_id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.read_log(thread_id, |log| log.history_page(before, limit))
    }

    async fn checkpoint_at(
        &self,
        thread_id: &str,
        seq: u64,
    ) -> Result<Option<Checkpoint>, StoreError> {
        self.read_log(thread_id, |log| log.checkpoint_at(seq))
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<u64, StoreError> {
        check::text("thread_id", thread_id)?;
        let mut inner = self.inner.lock();
        Ok(inner
            .checkpoints
            .remove(thread_id)
            .and_then(|log| log.head_seq())
            .map_or(0, |seq| seq + 1))
    }

    async fn fork(
        &self,
        thread_id: &str,
        from: u64,
        write: CheckpointWrite,
    ) -> Result<PutOutcome, StoreError> {
        check_checkpoint(thread_id, &write)?;
        let mut inner = self.inner.lock();
        match inner.checkpoints.get_mut(thread_id) {
            Some(log) => log.fork(from, write),
            None if write.parent.is_some() => Ok(PutOutcome::Conflict { head: None }),
            None => Err(StoreError::Invalid(format!(
                "checkpoint {from} is not a checkpoint of thread {thread_id:?}, which has none"
            ))),
        }
    }

    async fn branch_page(
        &self,
        thread_id: &str,
        tip: Option<u64>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.read_log(thread_id, |log| log.branch_page(tip, before, limit))
    }

    async fn tree_page(
        &self,
        thread_id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.read_log(thread_id, |log| log.tree_page(before, limit))
    }

    async fn copy_thread(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        check::text("thread_id", from)?;
        check::text("thread_id", to)?;
        let mut inner = self.inner.lock();
        if inner.checkpoints.contains_key(to) {
            return Err(StoreError::Invalid(format!(
                "thread {to:?} already has checkpoints; a copy needs a thread without any"
            )));
        }
        let Some(log) = inner.checkpoints.get(from).cloned() else {
            return Ok(0);
        };
        let steps = log.retained() as u64;
        inner.checkpoints.insert(to.to_owned(), log);
        Ok(steps)
    }
}

#[async_trait]
impl ChatHistoryStore for MemoryStore {
    async fn append(
        &self,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        check::scope(scope)?;
        check::append_batch(messages)?;
        let mut inner = self.inner.lock();
        let rows = inner.history.entry(scope.clone()).or_default();
        // All-or-nothing, like the SQL backends' transaction: check every id first.
        if let Some(m) = messages.iter().find(|m| rows.ids.contains(m.message.id())) {
            return Err(check::duplicate_id(m.message.id()));
        }
        for m in messages {
            rows.ids.insert(m.message.id().to_owned());
            rows.by_position.insert(m.cursor(), m.message.clone());
        }
        Ok(())
    }

    async fn append_new(
        &self,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<u64, StoreError> {
        check::scope(scope)?;
        check::append_batch(messages)?;
        let mut inner = self.inner.lock();
        let rows = inner.history.entry(scope.clone()).or_default();
        let mut stored = 0;
        for m in messages {
            if rows.ids.insert(m.message.id().to_owned()) {
                rows.by_position.insert(m.cursor(), m.message.clone());
                stored += 1;
            }
        }
        Ok(stored)
    }

    async fn append_stamped(
        &self,
        scope: &SessionScope,
        messages: &[Message],
        not_before_ms: i64,
    ) -> Result<Vec<Cursor>, StoreError> {
        check::scope(scope)?;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let mut inner = self.inner.lock();
        let rows = inner.history.entry(scope.clone()).or_default();
        let newest = rows.by_position.keys().next_back().map(|c| c.timestamp_ms);
        let batch = keel_core::store::stamp(
            messages,
            keel_core::store::stamp_base(newest, not_before_ms),
        );
        check::append_batch(&batch)?;
        let mut stored = Vec::new();
        for m in batch {
            if rows.ids.insert(m.message.id().to_owned()) {
                stored.push(m.cursor());
                rows.by_position.insert(m.cursor(), m.message);
            }
        }
        Ok(stored)
    }

    async fn delete_session_history(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        check::session(flow_id, user_id, session_id)?;
        let mut inner = self.inner.lock();
        let mut deleted = 0;
        inner.history.retain(|s, rows| {
            let doomed = s.flow_id == flow_id && s.user_id == user_id && s.session_id == session_id;
            if doomed {
                deleted += rows.ids.len() as u64;
            }
            !doomed
        });
        Ok(deleted)
    }

    async fn last_n(
        &self,
        scope: &SessionScope,
        n: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        check::scope(scope)?;
        let inner = self.inner.lock();
        let Some(rows) = inner.history.get(scope) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<StoredMessage> = rows
            .by_position
            .iter()
            .rev()
            .take(n)
            .map(|(c, m)| stored(c, m))
            .collect();
        out.reverse();
        Ok(out)
    }

    async fn after(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        check::scope(scope)?;
        let inner = self.inner.lock();
        let Some(rows) = inner.history.get(scope) else {
            return Ok(Vec::new());
        };
        let lower = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(rows
            .by_position
            .range((lower, Bound::Unbounded))
            .take(limit)
            .map(|(c, m)| stored(c, m))
            .collect())
    }

    async fn count_after(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
    ) -> Result<u64, StoreError> {
        check::scope(scope)?;
        let inner = self.inner.lock();
        let Some(rows) = inner.history.get(scope) else {
            return Ok(0);
        };
        let lower = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(rows.by_position.range((lower, Bound::Unbounded)).count() as u64)
    }
}

#[async_trait]
impl SessionMemoryStore for MemoryStore {
    async fn get_state(
        &self,
        scope: &SessionScope,
    ) -> Result<Option<SessionMemoryState>, StoreError> {
        check::scope(scope)?;
        Ok(self.inner.lock().states.get(scope).cloned())
    }

    async fn save_state(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        expected_version: u64,
    ) -> Result<SaveOutcome, StoreError> {
        check::scope(scope)?;
        check::state_fields(state)?;
        let version = check::next_version(expected_version)?;
        let now = check::now_ms();
        let mut inner = self.inner.lock();
        let current = inner.states.get(scope);
        let created_at_ms = match (expected_version, current) {
            (0, None) => now,
            (expected, Some(row)) if expected != 0 && row.version == expected => row.created_at_ms,
            _ => return Ok(SaveOutcome::Conflict),
        };
        let mut row = state.clone();
        row.version = version;
        row.created_at_ms = created_at_ms;
        row.updated_at_ms = now;
        inner.states.insert(scope.clone(), row);
        Ok(SaveOutcome::Saved { version })
    }

    async fn delete_session_states(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        check::session(flow_id, user_id, session_id)?;
        let mut inner = self.inner.lock();
        let before = inner.states.len();
        inner.states.retain(|s, _| {
            !(s.flow_id == flow_id && s.user_id == user_id && s.session_id == session_id)
        });
        Ok((before - inner.states.len()) as u64)
    }
}

#[async_trait]
impl SummaryStore for MemoryStore {
    async fn get_summary(&self, key: &str) -> Result<Option<Value>, StoreError> {
        check::text("key", key)?;
        Ok(self.inner.lock().summaries.get(key).cloned())
    }

    async fn put_summary(&self, key: &str, value: &Value) -> Result<(), StoreError> {
        check::text("key", key)?;
        self.inner
            .lock()
            .summaries
            .insert(key.to_owned(), value.clone());
        Ok(())
    }

    async fn delete_summaries(&self, prefix: &str) -> Result<u64, StoreError> {
        check::prefix(prefix)?;
        let mut inner = self.inner.lock();
        let before = inner.summaries.len();
        inner.summaries.retain(|k, _| !k.starts_with(prefix));
        inner.leases.retain(|k, _| !k.starts_with(prefix));
        Ok((before - inner.summaries.len()) as u64)
    }

    async fn try_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError> {
        check::text("key", key)?;
        check::text("holder", holder)?;
        let now = std::time::Instant::now();
        let mut inner = self.inner.lock();
        let free = inner
            .leases
            .get(key)
            .is_none_or(|(h, until)| h == holder || *until < now);
        if free {
            inner
                .leases
                .insert(key.to_owned(), (holder.to_owned(), now + ttl));
        }
        Ok(free)
    }

    async fn release_lease(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        let mut inner = self.inner.lock();
        if inner.leases.get(key).is_some_and(|(h, _)| h == holder) {
            inner.leases.remove(key);
        }
        Ok(())
    }
}
