//! An in-memory [`Checkpointer`]: the default for agents that need no persistence.

use std::num::NonZeroUsize;

use async_trait::async_trait;
use keel_core::checkpoint_log::CheckpointLog;
use keel_core::store::{Checkpoint, CheckpointWrite, Checkpointer, PutOutcome, StoreError};
use lru::LruCache;
use parking_lot::Mutex;

/// Checkpoints kept per thread by [`InMemoryCheckpointer::new`].
pub const DEFAULT_KEEP_CHECKPOINTS: usize = 32;
/// Threads kept by [`InMemoryCheckpointer::new`].
pub const DEFAULT_MAX_THREADS: usize = 10_000;

/// Keeps checkpoints in process memory, bounded: the last `keep` checkpoints of each
/// thread (older ones are folded into the state before them) and the `max_threads`
/// most recently used threads (the least recently used thread is forgotten whole when
/// one more starts).
///
/// Each thread holds its current state once (messages shared with the retained deltas)
/// plus the state before its oldest retained checkpoint, so its memory is about twice
/// its messages plus what its last `keep` steps added; a step costs what it changed,
/// not the thread's length. Lost on restart, and a forgotten thread starts empty: use a
/// `keel-store` database when a conversation must outlive the process or the bound.
#[derive(Debug)]
pub struct InMemoryCheckpointer {
    threads: Mutex<LruCache<String, CheckpointLog>>,
    keep: usize,
}

impl Default for InMemoryCheckpointer {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryCheckpointer {
    /// What `read` gives of thread `thread_id`'s checkpoint log (the default, empty, for
    /// a thread without one), without touching its place in the LRU: every checkpoint
    /// reader's one path to the log.
    fn read_log<T: Default>(
        &self,
        thread_id: &str,
        read: impl FnOnce(&CheckpointLog) -> T,
    ) -> Result<T, StoreError> {
        Ok(self
            .threads
            .lock()
            .peek(thread_id)
            .map(read)
            .unwrap_or_default())
    }

    /// A checkpointer keeping [`DEFAULT_KEEP_CHECKPOINTS`] checkpoints per thread and
    /// [`DEFAULT_MAX_THREADS`] threads.
    pub fn new() -> Self {
        Self::with_limits(DEFAULT_KEEP_CHECKPOINTS, DEFAULT_MAX_THREADS)
    }

    /// A checkpointer keeping the last `keep` checkpoints per thread (0: all of them,
    /// for tests that read a whole history) and at most `max_threads` threads (at least
    /// 1).
    pub fn with_limits(keep: usize, max_threads: usize) -> Self {
        InMemoryCheckpointer {
            threads: Mutex::new(LruCache::new(
                NonZeroUsize::new(max_threads).unwrap_or(NonZeroUsize::MIN),
            )),
            keep,
        }
    }

    /// How many threads have at least one checkpoint.
    pub fn thread_count(&self) -> usize {
        self.threads.lock().len()
    }
}

#[async_trait]
impl Checkpointer for InMemoryCheckpointer {
    async fn put(&self, thread_id: &str, write: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        let mut threads = self.threads.lock();
        if let Some(log) = threads.get_mut(thread_id) {
            return log.put(write);
        }
        let mut log = CheckpointLog::new(self.keep);
        let outcome = log.put(write)?;
        if matches!(outcome, PutOutcome::Saved { .. }) {
            threads.put(thread_id.to_owned(), log);
        }
        Ok(outcome)
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self
            .threads
            .lock()
            .get(thread_id)
            .and_then(CheckpointLog::latest))
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
        Ok(self
            .threads
            .lock()
            .pop(thread_id)
            .and_then(|log| log.head_seq())
            .map_or(0, |seq| seq + 1))
    }

    async fn fork(
        &self,
        thread_id: &str,
        from: u64,
        write: CheckpointWrite,
    ) -> Result<PutOutcome, StoreError> {
        match self.threads.lock().get_mut(thread_id) {
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
        let mut threads = self.threads.lock();
        if threads.contains(to) {
            return Err(StoreError::Invalid(format!(
                "thread {to:?} already has checkpoints; a copy needs a thread without any"
            )));
        }
        let Some(log) = threads.peek(from).cloned() else {
            return Ok(0);
        };
        let steps = log.retained() as u64;
        threads.put(to.to_owned(), log);
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::Message;
    use keel_core::state::StateUpdate;

    fn write(parent: Option<u64>, node: &str) -> CheckpointWrite {
        CheckpointWrite {
            parent,
            run_id: "r".into(),
            node: node.into(),
            update: StateUpdate::messages([Message::human("hi")]),
            created_at_ms: 0,
        }
    }

    #[tokio::test]
    async fn appends_per_thread_and_forgets_the_least_recently_used_thread() {
        let c = InMemoryCheckpointer::with_limits(0, 2);
        assert_eq!(
            c.put("t", write(None, "input")).await.unwrap(),
            PutOutcome::Saved { seq: 0 }
        );
        assert_eq!(
            c.put("t", write(Some(0), "model")).await.unwrap(),
            PutOutcome::Saved { seq: 1 }
        );
        assert_eq!(
            c.put("t", write(Some(0), "model")).await.unwrap(),
            PutOutcome::Conflict { head: Some(1) }
        );
        assert_eq!(
            c.put("u", write(None, "input")).await.unwrap(),
            PutOutcome::Saved { seq: 0 }
        );
        let h = c.history("t").await.unwrap();
        assert_eq!(h.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(
            c.history_page("t", None, 1).await.unwrap(),
            vec![h[1].clone()]
        );
        assert_eq!(
            c.history_page("t", Some(1), 5).await.unwrap(),
            vec![h[0].clone()]
        );
        assert_eq!(c.checkpoint_at("t", 0).await.unwrap().as_ref(), Some(&h[0]));
        assert_eq!(c.checkpoint_at("t", 2).await.unwrap(), None);
        assert_eq!(c.latest("t").await.unwrap().unwrap().messages.len(), 2);
        assert!(c.latest("none").await.unwrap().is_none());
        // "t" was used last; a third thread pushes "u" out.
        c.put("v", write(None, "input")).await.unwrap();
        assert_eq!(c.thread_count(), 2);
        assert!(c.latest("u").await.unwrap().is_none());
        assert_eq!(c.delete_thread("t").await.unwrap(), 2);
        assert!(c.latest("t").await.unwrap().is_none());
    }
}
