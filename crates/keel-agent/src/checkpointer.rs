//! An in-memory [`Checkpointer`]: the default for agents that need no persistence.

use std::collections::HashMap;

use async_trait::async_trait;
use keel_core::store::{Checkpoint, Checkpointer, StoreError};
use parking_lot::Mutex;

/// Keeps every checkpoint of every thread in process memory, append-only.
///
/// Lost on restart; SQL checkpointers live in `keel-store`.
#[derive(Debug, Default)]
pub struct InMemoryCheckpointer {
    threads: Mutex<HashMap<String, Vec<Checkpoint>>>,
}

impl InMemoryCheckpointer {
    /// An empty checkpointer.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many threads have at least one checkpoint.
    pub fn thread_count(&self) -> usize {
        self.threads.lock().len()
    }
}

#[async_trait]
impl Checkpointer for InMemoryCheckpointer {
    async fn put(&self, thread_id: &str, mut checkpoint: Checkpoint) -> Result<u64, StoreError> {
        let mut threads = self.threads.lock();
        let history = threads.entry(thread_id.to_owned()).or_default();
        let seq = history.len() as u64;
        checkpoint.seq = seq;
        history.push(checkpoint);
        Ok(seq)
    }

    async fn latest(&self, thread_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self
            .threads
            .lock()
            .get(thread_id)
            .and_then(|h| h.last().cloned()))
    }

    async fn history(&self, thread_id: &str) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(self
            .threads
            .lock()
            .get(thread_id)
            .cloned()
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::Message;

    fn cp(node: &str) -> Checkpoint {
        Checkpoint {
            seq: 99,
            run_id: "r".into(),
            node: node.into(),
            messages: vec![Message::human("hi")],
            values: Default::default(),
            created_at_ms: 0,
        }
    }

    #[tokio::test]
    async fn appends_and_assigns_seq_per_thread() {
        let c = InMemoryCheckpointer::new();
        assert_eq!(c.put("t", cp("input")).await.unwrap(), 0);
        assert_eq!(c.put("t", cp("model")).await.unwrap(), 1);
        assert_eq!(c.put("u", cp("input")).await.unwrap(), 0);
        let h = c.history("t").await.unwrap();
        assert_eq!(h.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(c.latest("t").await.unwrap().unwrap().node, "model");
        assert!(c.latest("none").await.unwrap().is_none());
        assert_eq!(c.thread_count(), 2);
    }
}
