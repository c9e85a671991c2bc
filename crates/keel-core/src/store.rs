//! Storage contracts: checkpoints, chat history, session-memory state and the summary
//! cache's second level. Implementations live elsewhere (in-memory in `keel-agent`,
//! SQLite and PostgreSQL in `keel-store`); every one passes the same conformance suite.
//!
//! Nothing here ever rewrites a chat message: history and checkpoints are append-only.
//! Data is deleted only when the session or thread itself is deleted
//! ([`ChatHistoryStore::delete_session_history`], [`Checkpointer::delete_thread`],
//! [`SessionMemoryStore::delete_session_states`], [`SummaryStore::delete_summaries`]).

use std::collections::HashSet;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::Message;
use crate::state::StateUpdate;

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed (connection, SQL, I/O).
    #[error("storage backend error: {0}")]
    Backend(String),
    /// Stored data could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The caller passed something the store cannot accept.
    #[error("invalid input: {0}")]
    Invalid(String),
}

/// One saved step of a thread, as read back: the full state at that point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The checkpoint's id within its thread, from 0, assigned by the checkpointer: unique
    /// across the thread's branches and increasing with time, so the newest checkpoint
    /// has the highest seq.
    pub seq: u64,
    /// The checkpoint this one follows: the previous step of its branch, or for a
    /// branch's first step the checkpoint it forked from. `None` for the thread's first
    /// checkpoint (and for one whose parent was never stored, such as a thread migrated
    /// with its latest checkpoint only).
    #[serde(default)]
    pub parent: Option<u64>,
    /// How many checkpoints come before this one on its branch (0 for the thread's
    /// first): LangGraph's `step` plus one, since LangGraph numbers a thread's first,
    /// empty checkpoint -1.
    #[serde(default)]
    pub depth: u64,
    /// The run that wrote it.
    pub run_id: String,
    /// Which node wrote it (`input`, `model`, `tools`, `<Middleware>.<hook>`).
    pub node: String,
    /// The messages at this point.
    pub messages: Vec<Message>,
    /// Named state values at this point.
    #[serde(default)]
    pub values: Map<String, Value>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
}

/// One step to append to a thread: what changed since its parent, not the whole state.
///
/// A checkpointer stores the change (new or replaced messages, removals, values set)
/// and links it to `parent`, so a step costs what it changed whatever the thread's
/// length, while the full state of every step stays recoverable
/// ([`Checkpointer::history`]). This is LangGraph's split between a checkpoint and its
/// pending writes, reduced to one delta per step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointWrite {
    /// The seq the writer computed this step from: the thread's head when it read it,
    /// `None` for a thread's first checkpoint. [`Checkpointer::put`] stores the step only
    /// while this is still the head (compare-and-swap).
    pub parent: Option<u64>,
    /// The run that writes it.
    pub run_id: String,
    /// Which node wrote it (`input`, `model`, `tools`, `<Middleware>.<hook>`).
    pub node: String,
    /// What changed, applied to the parent's state with the add-messages reducer. Every
    /// upserted message must carry a non-empty id (the agent assigns them before it
    /// writes).
    pub update: StateUpdate,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
}

/// The result of [`Checkpointer::put`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Stored; this is the new head.
    Saved {
        /// The seq assigned (`parent + 1`, or 0 for a thread's first checkpoint).
        seq: u64,
    },
    /// Another writer moved the thread on since `parent` was read; nothing was written.
    /// Reload the latest state before writing again.
    Conflict {
        /// The thread's head when the write was refused (`None`: the thread is empty,
        /// for example deleted in the meantime).
        head: Option<u64>,
    },
}

/// Per-thread, append-only checkpoint history with one writer at a time.
///
/// `put` is a compare-and-swap on the thread's head: two writers that read the same head
/// cannot both append to it, so the second gets [`PutOutcome::Conflict`] and no message
/// of the first is ever overwritten, in one process or across many sharing a database.
///
/// Checkpoints form a tree (LangGraph's time travel): [`fork`](Self::fork) starts a new
/// branch from any earlier checkpoint, and that branch's newest checkpoint becomes the
/// thread's head, so the thread's state and its next run follow the newest branch. Older
/// branches are never changed and stay readable ([`checkpoint_at`](Self::checkpoint_at),
/// [`branch_page`](Self::branch_page), [`tree_page`](Self::tree_page)). "History" means
/// the current branch: the head and its ancestors.
#[async_trait]
pub trait Checkpointer: Send + Sync {
    /// Appends a step after `write.parent` if that is still the thread's head.
    async fn put(&self, thread_id: &str, write: CheckpointWrite) -> Result<PutOutcome, StoreError>;
    /// The newest checkpoint, with its full state.
    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, StoreError>;
    /// Every retained checkpoint of the current branch (the head and its ancestors) with
    /// its full state, oldest first (a bounded checkpointer documents how many it keeps).
    async fn history(&self, thread_id: &str) -> Result<Vec<Checkpoint>, StoreError>;
    /// Up to `limit` retained checkpoints of the current branch whose seq is below
    /// `before` (every one when `None`), newest first, with their full state: the newest
    /// `limit` entries of [`history`](Self::history) before `before`, in reverse.
    ///
    /// The default reads the whole history; the stores in this workspace rebuild the
    /// state once from their deltas and materialise only the checkpoints returned, so a
    /// page costs its own size plus one pass over the steps, not every step's state.
    async fn history_page(
        &self,
        thread_id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let mut all = self.history(thread_id).await?;
        all.retain(|cp| before.is_none_or(|b| cp.seq < b));
        all.reverse();
        all.truncate(limit);
        Ok(all)
    }
    /// The retained checkpoint with this seq, with its full state (`None` when the
    /// thread has no such step, or a bounded checkpointer no longer keeps it).
    ///
    /// The default reads the whole history; the stores in this workspace read only what
    /// that one state needs.
    async fn checkpoint_at(
        &self,
        thread_id: &str,
        seq: u64,
    ) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self
            .history(thread_id)
            .await?
            .into_iter()
            .find(|cp| cp.seq == seq))
    }
    /// Deletes every checkpoint of a thread, on every branch (part of deleting a
    /// session); returns how many steps went. The thread starts again from seq 0.
    async fn delete_thread(&self, thread_id: &str) -> Result<u64, StoreError>;

    /// Starts a new branch: applies `write.update` to the state of checkpoint `from`
    /// (any retained checkpoint of the thread) and stores the result as the thread's new
    /// head, whose parent is `from`. `write.parent` is the head the writer read: the
    /// write is a compare-and-swap on it, as for [`put`](Self::put), so of two writers
    /// that read the same head exactly one moves it ([`PutOutcome::Conflict`] for the
    /// other). Forking from the head is a `put`.
    ///
    /// A `from` the thread does not hold (or no longer keeps) is
    /// [`StoreError::Invalid`]. The default supports no fork (only `from` equal to
    /// `write.parent`); every store in this workspace implements it.
    async fn fork(
        &self,
        thread_id: &str,
        from: u64,
        write: CheckpointWrite,
    ) -> Result<PutOutcome, StoreError> {
        if write.parent == Some(from) {
            return self.put(thread_id, write).await;
        }
        Err(StoreError::Invalid(format!(
            "checkpoint {from} is not the head of thread {thread_id:?} and this checkpointer cannot fork"
        )))
    }

    /// Up to `limit` checkpoints of the branch that ends at `tip` (the current branch,
    /// ending at the head, when `None`): `tip` and its retained ancestors whose seq is
    /// below `before`, newest first, with their full state. A `tip` the thread does not
    /// hold gives an empty page.
    ///
    /// The default serves a checkpointer without forks, whose history is one branch.
    async fn branch_page(
        &self,
        thread_id: &str,
        tip: Option<u64>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let Some(tip) = tip else {
            return self.history_page(thread_id, before, limit).await;
        };
        let end = before.map_or(tip.saturating_add(1), |b| b.min(tip.saturating_add(1)));
        let page = self.history_page(thread_id, Some(end), limit).await?;
        if page.first().is_some_and(|cp| cp.seq == tip) || before.is_some_and(|b| b <= tip) {
            Ok(page)
        } else {
            Ok(Vec::new())
        }
    }

    /// Up to `limit` retained checkpoints of the thread on every branch whose seq is
    /// below `before` (every one when `None`), newest first, with their full state:
    /// LangGraph's thread history, which lists a fork's new branch and the branches it
    /// left together (a checkpoint's `parent` tells which branch it is on).
    ///
    /// The default serves a checkpointer without forks, whose history is one branch.
    async fn tree_page(
        &self,
        thread_id: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.history_page(thread_id, before, limit).await
    }

    /// Copies every checkpoint of thread `from`, on every branch, to thread `to`, which
    /// must hold none (`POST /threads/{id}/copy`); returns how many steps were copied.
    /// The copy is independent: writing to either thread leaves the other unchanged.
    ///
    /// The default cannot copy ([`StoreError::Invalid`]); every store in this workspace
    /// implements it.
    async fn copy_thread(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        Err(StoreError::Invalid(format!(
            "this checkpointer cannot copy thread {from:?} to {to:?}"
        )))
    }
}

/// The scope of chat history and session memory: `(flow_id, user_id, session_id,
/// context_id)`. Every read and write is filtered by all four; scope is a security
/// boundary, not a convenience.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionScope {
    /// The agent or flow.
    pub flow_id: String,
    /// The owner.
    pub user_id: String,
    /// The conversation.
    pub session_id: String,
    /// A sub-context within the session (empty for the default).
    #[serde(default)]
    pub context_id: String,
}

impl SessionScope {
    /// A scope from its four parts, in order. [`SessionScope::flow`] and the setters
    /// after it name each part instead:
    ///
    /// ```
    /// use keel_core::store::SessionScope;
    ///
    /// let scope = SessionScope::flow("support").user("ada").session("s-1");
    /// assert_eq!(scope, SessionScope::new("support", "ada", "s-1", ""));
    /// assert_eq!(scope.clone().context("billing").context_id, "billing");
    /// ```
    pub fn new(
        flow_id: impl Into<String>,
        user_id: impl Into<String>,
        session_id: impl Into<String>,
        context_id: impl Into<String>,
    ) -> Self {
        SessionScope {
            flow_id: flow_id.into(),
            user_id: user_id.into(),
            session_id: session_id.into(),
            context_id: context_id.into(),
        }
    }

    /// The scope of one agent or flow, for every user and session (the other parts
    /// empty until set).
    pub fn flow(flow_id: impl Into<String>) -> Self {
        SessionScope {
            flow_id: flow_id.into(),
            user_id: String::new(),
            session_id: String::new(),
            context_id: String::new(),
        }
    }

    /// This scope for `user_id`, the owner.
    pub fn user(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = user_id.into();
        self
    }

    /// This scope for the conversation `session_id`.
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = session_id.into();
        self
    }

    /// This scope for the sub-context `context_id` of its session.
    pub fn context(mut self, context_id: impl Into<String>) -> Self {
        self.context_id = context_id.into();
        self
    }
}

/// A position in a session's history: messages are ordered by `(timestamp_ms, id)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cursor {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// Message id (tie-breaker).
    pub message_id: String,
}

/// A message with the time it was stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The message (its id is the tie-breaker).
    pub message: Message,
}

impl StoredMessage {
    /// This message's position.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            timestamp_ms: self.timestamp_ms,
            message_id: self.message.id().to_owned(),
        }
    }
}

/// The first timestamp of a batch appended after a history whose newest timestamp is
/// `newest`: one past it, but never before `not_before_ms` (usually the clock).
pub fn stamp_base(newest: Option<i64>, not_before_ms: i64) -> i64 {
    newest
        .map_or(i64::MIN, |t| t.saturating_add(1))
        .max(not_before_ms)
}

/// `messages` as stored rows stamped `base, base + 1, ...` in list order.
pub fn stamp(messages: &[Message], base: i64) -> Vec<StoredMessage> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| StoredMessage {
            timestamp_ms: base.saturating_add(i64::try_from(i).unwrap_or(i64::MAX)),
            message: m.clone(),
        })
        .collect()
}

/// Append-only chat history per session scope.
#[async_trait]
pub trait ChatHistoryStore: Send + Sync {
    /// Appends messages (ids must be non-empty and new within the scope).
    async fn append(
        &self,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError>;
    /// Appends the messages whose id is not stored in the scope yet and skips the others
    /// (`ON CONFLICT DO NOTHING`), so a retried or concurrent turn with the same ids is a
    /// no-op instead of an error. Ids must be non-empty and unique within the batch.
    /// Returns how many were stored.
    async fn append_new(
        &self,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<u64, StoreError>;
    /// Deletes the chat history of every context of `(flow_id, user_id, session_id)`;
    /// returns how many messages went. Called by session deletion.
    async fn delete_session_history(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError>;
    /// The newest `n`, oldest first.
    async fn last_n(
        &self,
        scope: &SessionScope,
        n: usize,
    ) -> Result<Vec<StoredMessage>, StoreError>;
    /// The timestamp of the newest message, if any. Session memory reads it on every
    /// turn it records (new messages are stamped after it); SQL stores answer it from
    /// the index without reading a message body.
    async fn newest_timestamp(&self, scope: &SessionScope) -> Result<Option<i64>, StoreError> {
        Ok(self.last_n(scope, 1).await?.last().map(|m| m.timestamp_ms))
    }
    /// Appends the messages whose id is not stored in the scope yet (as
    /// [`append_new`](Self::append_new)), stamping them `t, t + 1, ...` in list order,
    /// where `t` is the later of `not_before_ms` and one past the newest stored
    /// timestamp. So stored timestamps stay strictly increasing in conversation order
    /// even when the caller's clock is behind the store's newest row. Returns the
    /// positions of the rows stored, oldest first (skipped ids are not in it).
    ///
    /// Ids must be non-empty and unique within the batch. The default reads the newest
    /// timestamp, appends and then reads back what it stored (three round trips); the
    /// SQL stores do it in one statement, which also keeps the read and the write in
    /// one step when several writers record the same session.
    async fn append_stamped(
        &self,
        scope: &SessionScope,
        messages: &[Message],
        not_before_ms: i64,
    ) -> Result<Vec<Cursor>, StoreError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let newest = self.newest_timestamp(scope).await?;
        let base = stamp_base(newest, not_before_ms);
        let rows = stamp(messages, base);
        let stored = self.append_new(scope, &rows).await?;
        if usize::try_from(stored).is_ok_and(|n| n == rows.len()) {
            return Ok(rows.iter().map(StoredMessage::cursor).collect());
        }
        // Some ids were stored before: keep the rows found at the positions just used
        // (read from one before the base to past the last of them).
        let last = rows.last().map_or(base, |m| m.timestamp_ms);
        let mut from = Cursor {
            timestamp_ms: base.saturating_sub(1),
            message_id: String::new(),
        };
        let mut found = HashSet::new();
        loop {
            const PAGE: usize = 256;
            let page = self.after(scope, Some(&from), PAGE).await?;
            found.extend(page.iter().map(StoredMessage::cursor));
            match page.last() {
                Some(m) if page.len() == PAGE && m.timestamp_ms <= last => from = m.cursor(),
                _ => break,
            }
        }
        Ok(rows
            .iter()
            .map(StoredMessage::cursor)
            .filter(|c| found.contains(c))
            .collect())
    }
    /// [`append_stamped`](Self::append_stamped), then how many rows of the scope lie
    /// strictly after `count_after` (all of them when `None`) once the rows are stored:
    /// the check a caller that keeps a session's newest rows makes before using them,
    /// asked together with the write that comes anyway. The count is taken after the
    /// insert but not in its transaction, so a row another writer stores in between is
    /// counted too (a check against it fails, never passes wrongly). The default makes
    /// the two calls; the SQLite store sends both statements in one round trip.
    async fn append_stamped_counting(
        &self,
        scope: &SessionScope,
        messages: &[Message],
        not_before_ms: i64,
        count_after: Option<&Cursor>,
    ) -> Result<(Vec<Cursor>, u64), StoreError> {
        let stored = self.append_stamped(scope, messages, not_before_ms).await?;
        let count = self.count_after(scope, count_after).await?;
        Ok((stored, count))
    }
    /// Up to `limit` messages strictly after `cursor` (from the start when `None`), oldest
    /// first.
    async fn after(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError>;
    /// How many messages lie strictly after `cursor`.
    async fn count_after(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
    ) -> Result<u64, StoreError>;
}

/// The rolling summary of one session scope.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionMemoryState {
    /// The bullet summary (clipped to the word budget).
    pub summary: String,
    /// Pinned keys (`project`, `customer`, ...): updated by the summarizer, never dropped.
    pub pinned: Map<String, Value>,
    /// The last message folded in; `None` before the first fold.
    pub covered_until: Option<Cursor>,
    /// How many messages have been folded in.
    pub absorbed_count: u64,
    /// The model that wrote the summary.
    pub summary_model: Option<String>,
    /// Compare-and-swap version: 0 means never saved.
    pub version: u64,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
}

/// The result of a compare-and-swap save.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaveOutcome {
    /// Saved; the row now has this version.
    Saved {
        /// The new version (`expected_version + 1`).
        version: u64,
    },
    /// Another writer saved first; nothing was written.
    Conflict,
}

/// Session-memory state storage with optimistic versioning.
#[async_trait]
pub trait SessionMemoryStore: Send + Sync {
    /// The state of a scope, if ever saved.
    async fn get_state(
        &self,
        scope: &SessionScope,
    ) -> Result<Option<SessionMemoryState>, StoreError>;
    /// Inserts when `expected_version` is 0, otherwise updates only where the stored
    /// version equals it. Never overwrites a newer state.
    async fn save_state(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        expected_version: u64,
    ) -> Result<SaveOutcome, StoreError>;
    /// Deletes the state of every context of `(flow_id, user_id, session_id)`; returns how
    /// many rows went. Called by session deletion.
    async fn delete_session_states(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError>;
}

/// A key-value store behind the in-process summary cache, so restarted or sibling
/// processes reuse summaries instead of paying for them again.
#[async_trait]
pub trait SummaryStore: Send + Sync {
    /// The value stored under `key`.
    async fn get_summary(&self, key: &str) -> Result<Option<Value>, StoreError>;
    /// Stores `value` under `key`, replacing the previous one.
    async fn put_summary(&self, key: &str, value: &Value) -> Result<(), StoreError>;
    /// Deletes every value whose key starts with `prefix` (the summaries of a deleted
    /// thread); returns how many went. An empty prefix is refused
    /// ([`StoreError::Invalid`]): it would empty the whole cache.
    async fn delete_summaries(&self, prefix: &str) -> Result<u64, StoreError>;

    /// Takes the lease on `key` for `holder` until `ttl` from now, unless another holder
    /// has one that has not expired; true when `holder` now holds it (taking it again
    /// renews it). Speculative summaries take one per cache key, so processes sharing
    /// this store write a thread's summary once. Deleting a key's summaries
    /// ([`delete_summaries`](Self::delete_summaries)) drops its leases too.
    ///
    /// The default, for a store no other process shares, always grants it.
    async fn try_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError> {
        let _ = (key, holder, ttl);
        Ok(true)
    }

    /// Gives back `holder`'s lease on `key` (nothing when another holder has it).
    async fn release_lease(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        let _ = (key, holder);
        Ok(())
    }
}
