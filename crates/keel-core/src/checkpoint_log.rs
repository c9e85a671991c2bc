//! [`CheckpointLog`]: one thread's checkpoints as deltas in process memory, shared by the
//! in-memory checkpointers (`keel-agent`'s default and `keel-store`'s memory backend) so
//! both store, validate and bound checkpoints the same way.
//!
//! The log keeps the head state materialized (messages with an id index, values), so a
//! step costs what it changed, not the thread's length, and `latest` replays nothing.
//! Each retained step keeps only its delta; messages are shared (`Arc`) between the head,
//! the base and the deltas, so a message is held once however many steps mention it.
//! With a limit, the oldest steps are folded into a base state and dropped.
//!
//! ```
//! use keel_core::checkpoint_log::CheckpointLog;
//! use keel_core::message::Message;
//! use keel_core::state::StateUpdate;
//! use keel_core::store::{CheckpointWrite, PutOutcome};
//!
//! let step = |parent, text: &str, id: &str| CheckpointWrite {
//!     parent,
//!     run_id: "r".into(),
//!     node: "input".into(),
//!     update: StateUpdate::messages([Message::human(text).with_id(id)]),
//!     created_at_ms: 0,
//! };
//! let mut log = CheckpointLog::new(2);
//! assert_eq!(log.put(step(None, "a", "1")).unwrap(), PutOutcome::Saved { seq: 0 });
//! assert_eq!(log.put(step(Some(0), "b", "2")).unwrap(), PutOutcome::Saved { seq: 1 });
//! // A writer that read seq 0 is refused: seq 1 would be lost.
//! assert_eq!(log.put(step(Some(0), "c", "3")).unwrap(), PutOutcome::Conflict { head: Some(1) });
//! assert_eq!(log.put(step(Some(1), "c", "3")).unwrap(), PutOutcome::Saved { seq: 2 });
//! assert_eq!(log.latest().unwrap().messages.len(), 3);
//! // Only the last two steps are kept, each with its full state.
//! let history = log.history();
//! assert_eq!(history.iter().map(|c| (c.seq, c.messages.len())).collect::<Vec<_>>(), [(1, 2), (2, 3)]);
//! ```

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::message::Message;
use crate::state::MessageOp;
use crate::store::{Checkpoint, CheckpointWrite, PutOutcome, StoreError};

/// A message change with the message shared.
#[derive(Clone, Debug)]
enum Op {
    Upsert(Arc<Message>),
    Remove(String),
    RemoveAll,
}

/// A state: messages in order, an index from id to position, values.
#[derive(Clone, Debug, Default)]
struct State {
    messages: Vec<Arc<Message>>,
    index: HashMap<String, usize>,
    values: Map<String, Value>,
}

impl State {
    /// Applies checked ops (see [`check_ops`]) with the add-messages rules.
    fn apply(&mut self, ops: &[Op], values: &Map<String, Value>) {
        for op in ops {
            match op {
                Op::Upsert(m) => match self.index.get(m.id()) {
                    Some(&i) => self.messages[i] = m.clone(),
                    None => {
                        self.index.insert(m.id().to_owned(), self.messages.len());
                        self.messages.push(m.clone());
                    }
                },
                Op::Remove(id) => {
                    if let Some(i) = self.index.remove(id) {
                        self.messages.remove(i);
                        // Removal is rare; re-index the tail it shifted.
                        for (j, m) in self.messages.iter().enumerate().skip(i) {
                            self.index.insert(m.id().to_owned(), j);
                        }
                    }
                }
                Op::RemoveAll => {
                    self.messages.clear();
                    self.index.clear();
                }
            }
        }
        self.values
            .extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
    }

    fn checkpoint(&self, step: &Step) -> Checkpoint {
        Checkpoint {
            seq: step.seq,
            run_id: step.run_id.clone(),
            node: step.node.clone(),
            messages: self.messages.iter().map(|m| (**m).clone()).collect(),
            values: self.values.clone(),
            created_at_ms: step.created_at_ms,
        }
    }
}

/// One retained step: its delta and what it is.
#[derive(Clone, Debug)]
struct Step {
    seq: u64,
    run_id: String,
    node: String,
    created_at_ms: i64,
    ops: Vec<Op>,
    values: Map<String, Value>,
}

/// One thread's checkpoints as deltas (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct CheckpointLog {
    /// The state before the oldest retained step.
    base: State,
    /// The state after the newest step.
    head: State,
    steps: VecDeque<Step>,
    head_seq: Option<u64>,
    keep: usize,
}

impl CheckpointLog {
    /// An empty log keeping the last `keep` steps (0: keep every step).
    pub fn new(keep: usize) -> Self {
        CheckpointLog {
            base: State::default(),
            head: State::default(),
            steps: VecDeque::new(),
            head_seq: None,
            keep,
        }
    }

    /// The newest seq, `None` before the first step.
    pub fn head_seq(&self) -> Option<u64> {
        self.head_seq
    }

    /// Messages in the head state.
    pub fn len(&self) -> usize {
        self.head.messages.len()
    }

    /// True when the head state has no message.
    pub fn is_empty(&self) -> bool {
        self.head.messages.is_empty()
    }

    /// Steps retained.
    pub fn retained(&self) -> usize {
        self.steps.len()
    }

    /// Appends a step after `write.parent` if that is the head; a write whose parent is
    /// not the head is a [`PutOutcome::Conflict`] and changes nothing, as is a write that
    /// fails validation ([`StoreError::Invalid`]: an empty id, a removal of an unknown
    /// id).
    pub fn put(&mut self, write: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        if write.parent != self.head_seq {
            return Ok(PutOutcome::Conflict {
                head: self.head_seq,
            });
        }
        check_ops(&self.head, &write.update.messages)?;
        let seq = match self.head_seq {
            None => 0,
            Some(s) => s.checked_add(1).ok_or_else(|| {
                StoreError::Invalid(format!("thread seq {s} cannot be incremented"))
            })?,
        };
        let ops: Vec<Op> = write
            .update
            .messages
            .into_iter()
            .map(|op| match op {
                MessageOp::Upsert { message } => Op::Upsert(Arc::new(message)),
                MessageOp::Remove { id } => Op::Remove(id),
                MessageOp::RemoveAll => Op::RemoveAll,
            })
            .collect();
        self.head.apply(&ops, &write.update.values);
        self.steps.push_back(Step {
            seq,
            run_id: write.run_id,
            node: write.node,
            created_at_ms: write.created_at_ms,
            ops,
            values: write.update.values,
        });
        self.head_seq = Some(seq);
        while self.keep > 0 && self.steps.len() > self.keep {
            if let Some(old) = self.steps.pop_front() {
                self.base.apply(&old.ops, &old.values);
            }
        }
        Ok(PutOutcome::Saved { seq })
    }

    /// The newest checkpoint with its full state.
    pub fn latest(&self) -> Option<Checkpoint> {
        self.steps.back().map(|step| self.head.checkpoint(step))
    }

    /// Up to `limit` retained checkpoints with a seq below `before` (all when `None`),
    /// newest first. The state is rebuilt once, walking the deltas forward from the
    /// base, and only the checkpoints returned are materialised.
    pub fn history_page(&self, before: Option<u64>, limit: usize) -> Vec<Checkpoint> {
        let end = before.map_or(self.steps.len(), |b| {
            self.steps.partition_point(|s| s.seq < b)
        });
        let start = end.saturating_sub(limit);
        if start == end {
            return Vec::new();
        }
        if end == self.steps.len() && limit == 1 {
            return self.latest().into_iter().collect();
        }
        let mut state = self.base.clone();
        let mut page = Vec::with_capacity(end - start);
        for (i, step) in self.steps.iter().enumerate().take(end) {
            state.apply(&step.ops, &step.values);
            if i >= start {
                page.push(state.checkpoint(step));
            }
        }
        page.reverse();
        page
    }

    /// The retained checkpoint with this seq.
    pub fn checkpoint_at(&self, seq: u64) -> Option<Checkpoint> {
        let before = seq.checked_add(1)?;
        self.history_page(Some(before), 1)
            .into_iter()
            .find(|cp| cp.seq == seq)
    }

    /// Every retained checkpoint with its full state, oldest first.
    pub fn history(&self) -> Vec<Checkpoint> {
        let mut state = self.base.clone();
        self.steps
            .iter()
            .map(|step| {
                state.apply(&step.ops, &step.values);
                state.checkpoint(step)
            })
            .collect()
    }
}

/// Checks ops against a state before anything changes: upserted ids are non-empty, and
/// every removal names a message present at that point.
fn check_ops(state: &State, ops: &[MessageOp]) -> Result<(), StoreError> {
    let mut added: HashSet<&str> = HashSet::new();
    let mut removed: HashSet<&str> = HashSet::new();
    let mut cleared = false;
    for (i, op) in ops.iter().enumerate() {
        match op {
            MessageOp::Upsert { message } => {
                if message.id().is_empty() {
                    return Err(StoreError::Invalid(format!(
                        "update.messages[{i}] has an empty id; a checkpoint needs an id per message"
                    )));
                }
                removed.remove(message.id());
                added.insert(message.id());
            }
            MessageOp::Remove { id } => {
                let present = added.contains(id.as_str())
                    || (!cleared && !removed.contains(id.as_str()) && state.index.contains_key(id));
                if !present {
                    return Err(StoreError::Invalid(format!(
                        "update.messages[{i}] removes message {id:?}, which is not in the state"
                    )));
                }
                added.remove(id.as_str());
                removed.insert(id);
            }
            MessageOp::RemoveAll => {
                cleared = true;
                added.clear();
                removed.clear();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{AgentState, StateUpdate};

    fn write(parent: Option<u64>, update: StateUpdate) -> CheckpointWrite {
        CheckpointWrite {
            parent,
            run_id: "r".into(),
            node: "n".into(),
            update,
            created_at_ms: 7,
        }
    }

    fn ids(messages: &[Message]) -> Vec<&str> {
        messages.iter().map(Message::id).collect()
    }

    /// Every retained step's state equals the reducer applied to the same updates.
    #[test]
    fn states_match_the_reducer_and_old_steps_fold_into_the_base() {
        let updates = vec![
            StateUpdate::messages([
                Message::human("a").with_id("a"),
                Message::ai("b").with_id("b"),
            ]),
            StateUpdate::messages([Message::ai("B").with_id("b")]),
            StateUpdate {
                messages: vec![MessageOp::Remove { id: "a".into() }],
                values: [("k".to_owned(), Value::from(1))].into_iter().collect(),
            },
            StateUpdate {
                messages: vec![
                    MessageOp::RemoveAll,
                    MessageOp::Upsert {
                        message: Message::human("c").with_id("c"),
                    },
                ],
                ..Default::default()
            },
            StateUpdate::messages([Message::ai("d").with_id("d")]),
        ];
        let mut reference = AgentState::default();
        let mut expected = Vec::new();
        let mut full = CheckpointLog::new(0);
        let mut bounded = CheckpointLog::new(2);
        for (i, u) in updates.into_iter().enumerate() {
            let parent = i.checked_sub(1).map(|p| p as u64);
            reference.apply(u.clone()).unwrap();
            expected.push(reference.clone());
            assert_eq!(
                full.put(write(parent, u.clone())).unwrap(),
                PutOutcome::Saved { seq: i as u64 }
            );
            bounded.put(write(parent, u)).unwrap();
        }
        let history = full.history();
        assert_eq!(history.len(), 5);
        for (cp, want) in history.iter().zip(&expected) {
            assert_eq!(cp.messages, *want.messages);
            assert_eq!(cp.values, want.values);
        }
        assert_eq!(ids(&history[2].messages), ["b"]);
        assert_eq!(bounded.retained(), 2);
        assert_eq!(bounded.history(), history[3..].to_vec());
        // Pages are suffixes of the history before `before`, newest first.
        for before in [None, Some(0), Some(1), Some(3), Some(5), Some(99)] {
            for limit in [0, 1, 2, 5, 10] {
                let mut want: Vec<Checkpoint> = history
                    .iter()
                    .filter(|c| before.is_none_or(|b| c.seq < b))
                    .cloned()
                    .collect();
                want.reverse();
                want.truncate(limit);
                assert_eq!(full.history_page(before, limit), want, "{before:?} {limit}");
            }
        }
        assert_eq!(bounded.history_page(Some(4), 5), vec![history[3].clone()]);
        for cp in &history {
            assert_eq!(full.checkpoint_at(cp.seq).as_ref(), Some(cp));
        }
        assert_eq!(full.checkpoint_at(5), None);
        assert_eq!(bounded.checkpoint_at(2), None, "folded into the base");
        assert_eq!(bounded.checkpoint_at(3), Some(history[3].clone()));
        assert_eq!(bounded.latest(), history.last().cloned());
        assert_eq!(full.latest(), history.last().cloned());
    }

    #[test]
    fn a_stale_parent_or_an_invalid_update_changes_nothing() {
        let mut log = CheckpointLog::new(0);
        let first = StateUpdate::messages([Message::human("a").with_id("a")]);
        assert_eq!(
            log.put(write(Some(3), first.clone())).unwrap(),
            PutOutcome::Conflict { head: None }
        );
        log.put(write(None, first.clone())).unwrap();
        assert_eq!(
            log.put(write(None, first)).unwrap(),
            PutOutcome::Conflict { head: Some(0) }
        );
        let unknown = StateUpdate {
            messages: vec![MessageOp::Remove { id: "zz".into() }],
            ..Default::default()
        };
        assert!(matches!(
            log.put(write(Some(0), unknown)),
            Err(StoreError::Invalid(e)) if e.contains("\"zz\"")
        ));
        let no_id = StateUpdate::messages([Message::human("x").with_id("")]);
        assert!(matches!(
            log.put(write(Some(0), no_id)),
            Err(StoreError::Invalid(_))
        ));
        assert_eq!(log.head_seq(), Some(0));
        assert_eq!(log.history().len(), 1);
    }
}
