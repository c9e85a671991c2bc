//! The conformance suite can fail: stores with a classic bug each trip it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::message::Message;
use keel_core::store::{
    ChatHistoryStore, Checkpoint, CheckpointWrite, Checkpointer, Cursor, PutOutcome, SaveOutcome,
    SessionMemoryState, SessionMemoryStore, SessionScope, StoreError, StoredMessage, SummaryStore,
};
use keel_store::memory::MemoryStore;
use keel_store::{Backend, Storage, conformance};
use serde_json::Value;

#[derive(Clone, Copy)]
enum Bug {
    /// Saves without checking the version (last writer wins).
    BlindOverwrite,
    /// Reads history by (flow, user, session), ignoring the context (the scope leak).
    IgnoresContext,
    /// Reads after a cursor by timestamp only, dropping rows that tie on it.
    TimestampOnlyCursor,
    /// Appends a checkpoint after whatever the head is (no parent check).
    CheckpointLastWriterWins,
    /// Stamps recorded messages with the caller's clock, not after the newest row.
    StampsAtTheClock,
    /// A fork ignores the checkpoint it starts from and continues the head.
    ForkContinuesTheHead,
    /// Keeps the trait's default `tree_page`, which lists the current branch only: right
    /// for a checkpointer without forks, wrong for one that forks.
    TreeIsTheCurrentBranch,
    /// Keeps the trait's default lease, which grants every caller: right for a store
    /// no other process shares, wrong for a shared one.
    LeaseAlwaysGranted,
    /// No bug: the trait's default methods (`append_stamped`) over a correct store.
    None,
}

/// Makes `Bug::CheckpointLastWriterWins` a store that never reports a conflict.
static LAST_WRITER_WINS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Buggy {
    inner: MemoryStore,
    bug: Bug,
}

fn without_context(scope: &SessionScope) -> SessionScope {
    SessionScope {
        context_id: String::new(),
        ..scope.clone()
    }
}

impl Buggy {
    fn scope(&self, scope: &SessionScope) -> SessionScope {
        match self.bug {
            Bug::IgnoresContext => without_context(scope),
            _ => scope.clone(),
        }
    }
}

#[async_trait]
impl Checkpointer for Buggy {
    async fn put(&self, t: &str, mut w: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        if let Bug::CheckpointLastWriterWins = self.bug {
            // Read the head and write after it as one step: whoever writes last wins,
            // every time (without the lock, two worker threads interleaving the read and
            // the write would sometimes produce the conflict the suite looks for).
            let _one_at_a_time = LAST_WRITER_WINS.lock().await;
            w.parent = self.inner.latest(t).await?.map(|c| c.seq);
            return self.inner.put(t, w).await;
        }
        self.inner.put(t, w).await
    }
    async fn latest(&self, t: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.inner.latest(t).await
    }
    async fn history(&self, t: &str) -> Result<Vec<Checkpoint>, StoreError> {
        self.inner.history(t).await
    }
    async fn delete_thread(&self, t: &str) -> Result<u64, StoreError> {
        self.inner.delete_thread(t).await
    }
    async fn fork(&self, t: &str, from: u64, w: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        if let Bug::ForkContinuesTheHead = self.bug {
            return self.inner.put(t, w).await;
        }
        self.inner.fork(t, from, w).await
    }
    async fn checkpoint_at(&self, t: &str, seq: u64) -> Result<Option<Checkpoint>, StoreError> {
        self.inner.checkpoint_at(t, seq).await
    }
    async fn branch_page(
        &self,
        t: &str,
        tip: Option<u64>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.inner.branch_page(t, tip, before, limit).await
    }
    async fn tree_page(
        &self,
        t: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        if let Bug::TreeIsTheCurrentBranch = self.bug {
            return self.inner.history_page(t, before, limit).await;
        }
        self.inner.tree_page(t, before, limit).await
    }
    async fn copy_thread(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        self.inner.copy_thread(from, to).await
    }
}

#[async_trait]
impl ChatHistoryStore for Buggy {
    async fn append(&self, s: &SessionScope, m: &[StoredMessage]) -> Result<(), StoreError> {
        self.inner.append(&self.scope(s), m).await
    }
    async fn append_new(&self, s: &SessionScope, m: &[StoredMessage]) -> Result<u64, StoreError> {
        self.inner.append_new(&self.scope(s), m).await
    }
    async fn append_stamped(
        &self,
        s: &SessionScope,
        m: &[Message],
        not_before: i64,
    ) -> Result<Vec<Cursor>, StoreError> {
        let rows = keel_core::store::stamp(m, not_before);
        match self.bug {
            Bug::StampsAtTheClock => {
                self.append_new(s, &rows).await?;
                Ok(rows.iter().map(StoredMessage::cursor).collect())
            }
            // The trait's default, as a store that does not write its own gets it.
            _ => default_append_stamped(self, s, m, not_before).await,
        }
    }
    async fn delete_session_history(&self, f: &str, u: &str, s: &str) -> Result<u64, StoreError> {
        self.inner.delete_session_history(f, u, s).await
    }
    async fn last_n(&self, s: &SessionScope, n: usize) -> Result<Vec<StoredMessage>, StoreError> {
        self.inner.last_n(&self.scope(s), n).await
    }
    async fn after(
        &self,
        s: &SessionScope,
        c: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = self.inner.after(&self.scope(s), c, usize::MAX).await?;
        Ok(match (self.bug, c) {
            (Bug::TimestampOnlyCursor, Some(c)) => rows
                .into_iter()
                .filter(|m| m.timestamp_ms > c.timestamp_ms)
                .take(limit)
                .collect(),
            _ => rows.into_iter().take(limit).collect(),
        })
    }
    async fn count_after(&self, s: &SessionScope, c: Option<&Cursor>) -> Result<u64, StoreError> {
        Ok(self.after(s, c, usize::MAX).await?.len() as u64)
    }
}

/// The default `append_stamped`, reached through a store that keeps every other default.
async fn default_append_stamped(
    store: &Buggy,
    s: &SessionScope,
    m: &[Message],
    not_before: i64,
) -> Result<Vec<Cursor>, StoreError> {
    struct Defaults<'a>(&'a Buggy);
    #[async_trait]
    impl ChatHistoryStore for Defaults<'_> {
        async fn append(&self, s: &SessionScope, m: &[StoredMessage]) -> Result<(), StoreError> {
            self.0.append(s, m).await
        }
        async fn append_new(
            &self,
            s: &SessionScope,
            m: &[StoredMessage],
        ) -> Result<u64, StoreError> {
            self.0.append_new(s, m).await
        }
        async fn delete_session_history(
            &self,
            f: &str,
            u: &str,
            s: &str,
        ) -> Result<u64, StoreError> {
            self.0.delete_session_history(f, u, s).await
        }
        async fn last_n(
            &self,
            s: &SessionScope,
            n: usize,
        ) -> Result<Vec<StoredMessage>, StoreError> {
            self.0.last_n(s, n).await
        }
        async fn after(
            &self,
            s: &SessionScope,
            c: Option<&Cursor>,
            limit: usize,
        ) -> Result<Vec<StoredMessage>, StoreError> {
            self.0.after(s, c, limit).await
        }
        async fn count_after(
            &self,
            s: &SessionScope,
            c: Option<&Cursor>,
        ) -> Result<u64, StoreError> {
            self.0.count_after(s, c).await
        }
    }
    Defaults(store).append_stamped(s, m, not_before).await
}

#[async_trait]
impl SessionMemoryStore for Buggy {
    async fn get_state(&self, s: &SessionScope) -> Result<Option<SessionMemoryState>, StoreError> {
        self.inner.get_state(s).await
    }
    async fn save_state(
        &self,
        s: &SessionScope,
        state: &SessionMemoryState,
        expected: u64,
    ) -> Result<SaveOutcome, StoreError> {
        match self.bug {
            Bug::BlindOverwrite => {
                let current = self.inner.get_state(s).await?.map_or(0, |c| c.version);
                self.inner.save_state(s, state, current).await?;
                Ok(SaveOutcome::Saved {
                    version: expected + 1,
                })
            }
            _ => self.inner.save_state(s, state, expected).await,
        }
    }
    async fn delete_session_states(&self, f: &str, u: &str, s: &str) -> Result<u64, StoreError> {
        self.inner.delete_session_states(f, u, s).await
    }
}

#[async_trait]
impl SummaryStore for Buggy {
    async fn get_summary(&self, k: &str) -> Result<Option<Value>, StoreError> {
        self.inner.get_summary(k).await
    }
    async fn put_summary(&self, k: &str, v: &Value) -> Result<(), StoreError> {
        self.inner.put_summary(k, v).await
    }
    async fn delete_summaries(&self, p: &str) -> Result<u64, StoreError> {
        self.inner.delete_summaries(p).await
    }
    async fn try_lease(
        &self,
        k: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError> {
        if matches!(self.bug, Bug::LeaseAlwaysGranted) {
            return Ok(true);
        }
        self.inner.try_lease(k, holder, ttl).await
    }
    async fn release_lease(&self, k: &str, holder: &str) -> Result<(), StoreError> {
        self.inner.release_lease(k, holder).await
    }
}

#[async_trait]
impl Storage for Buggy {
    fn backend(&self) -> Backend {
        Backend::Memory
    }
    async fn migrate(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

async fn failure(bug: Bug) -> conformance::Failure {
    let store = Arc::new(Buggy {
        inner: MemoryStore::new(),
        bug,
    });
    conformance::run_all(store)
        .await
        .expect_err("the suite passed a store with a known bug")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blind_overwrite_is_caught() {
    let f = failure(Bug::BlindOverwrite).await;
    assert!(
        ["scope_isolation", "state_compare_and_swap"].contains(&f.check),
        "{f}"
    );
    // Each check on its own catches it too.
    let store = Buggy {
        inner: MemoryStore::new(),
        bug: Bug::BlindOverwrite,
    };
    let f = conformance::state_compare_and_swap(&store)
        .await
        .unwrap_err();
    assert!(
        f.detail.contains("Conflict") || f.detail.contains("gave"),
        "{f}"
    );
    let f = conformance::concurrent_cas(Arc::new(store), 16)
        .await
        .unwrap_err();
    assert_eq!(f.check, "concurrent_cas", "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_leak_is_caught() {
    let f = failure(Bug::IgnoresContext).await;
    assert!(
        ["chat_history", "scope_isolation"].contains(&f.check),
        "{f}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_timestamp_ties_is_caught() {
    let f = failure(Bug::TimestampOnlyCursor).await;
    assert_eq!(f.check, "chat_history", "{f}");
    assert!(f.detail.contains("tie"), "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_without_a_parent_check_is_caught() {
    let f = failure(Bug::CheckpointLastWriterWins).await;
    assert_eq!(f.check, "checkpoint_compare_and_swap", "{f}");
    let f = conformance::concurrent_checkpoints(
        Arc::new(Buggy {
            inner: MemoryStore::new(),
            bug: Bug::CheckpointLastWriterWins,
        }),
        16,
    )
    .await
    .unwrap_err();
    assert_eq!(f.check, "concurrent_checkpoints", "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stamping_with_the_clock_is_caught() {
    let f = failure(Bug::StampsAtTheClock).await;
    assert_eq!(f.check, "stamped_history", "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_that_continues_the_head_is_caught() {
    let f = failure(Bug::ForkContinuesTheHead).await;
    assert_eq!(f.check, "checkpoint_forks", "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_of_the_current_branch_only_is_caught() {
    let f = failure(Bug::TreeIsTheCurrentBranch).await;
    assert_eq!(f.check, "checkpoint_forks", "{f}");
    assert!(f.to_string().contains("tree_page"), "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_granted_to_everyone_is_caught() {
    let f = failure(Bug::LeaseAlwaysGranted).await;
    assert_eq!(f.check, "summary_leases", "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_append_stamped_passes() {
    let store = Buggy {
        inner: MemoryStore::new(),
        bug: Bug::None,
    };
    conformance::stamped_history(&store).await.unwrap();
    conformance::run_all(Arc::new(store)).await.unwrap();
}
