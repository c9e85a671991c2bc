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
//! Checkpoints form a tree: [`CheckpointLog::fork`] starts a branch from any retained
//! checkpoint, and that branch becomes the current one (the head is its newest step).
//! Each branch keeps its own base state (the state it forked from, its messages shared
//! with the parent's) and its deltas, so a fork costs one pass over the parent's deltas
//! and a step on any branch still costs what it changed.
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
            parent: step.parent,
            depth: step.depth,
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
    parent: Option<u64>,
    depth: u64,
    run_id: String,
    node: String,
    created_at_ms: i64,
    ops: Vec<Op>,
    values: Map<String, Value>,
}

/// One branch: a base state and the steps after it, each the parent of the next.
#[derive(Clone, Debug, Default)]
struct Branch {
    /// The state before the branch's oldest retained step.
    base: State,
    /// The checkpoint the branch forked from (`None` for the thread's first branch).
    from: Option<u64>,
    steps: VecDeque<Step>,
}

impl Branch {
    fn holds(&self, seq: u64) -> bool {
        self.steps.binary_search_by_key(&seq, |s| s.seq).is_ok()
    }

    /// The last `want` of the branch's first `eligible` steps as checkpoints, newest
    /// first, the state rebuilt once from the base.
    fn newest(&self, eligible: usize, want: usize) -> Vec<Checkpoint> {
        let start = eligible.saturating_sub(want);
        let mut state = self.base.clone();
        let mut segment = Vec::with_capacity(eligible - start);
        for (i, step) in self.steps.iter().enumerate().take(eligible) {
            state.apply(&step.ops, &step.values);
            if i >= start {
                segment.push(state.checkpoint(step));
            }
        }
        segment.reverse();
        segment
    }

    /// The state after `seq` (a step of this branch).
    fn state_at(&self, seq: u64) -> State {
        let mut state = self.base.clone();
        for step in self.steps.iter().take_while(|s| s.seq <= seq) {
            state.apply(&step.ops, &step.values);
        }
        state
    }
}

/// One thread's checkpoints as deltas (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct CheckpointLog {
    /// Oldest first; the last is the current branch, whose newest step is the head.
    branches: Vec<Branch>,
    /// The state after the head.
    head: State,
    head_seq: Option<u64>,
    head_depth: u64,
    keep: usize,
}

impl CheckpointLog {
    /// An empty log keeping the last `keep` steps (0: keep every step).
    pub fn new(keep: usize) -> Self {
        CheckpointLog {
            branches: vec![Branch::default()],
            head: State::default(),
            head_seq: None,
            head_depth: 0,
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

    /// Steps retained, on every branch.
    pub fn retained(&self) -> usize {
        self.branches.iter().map(|b| b.steps.len()).sum()
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
        let seq = self.next_seq()?;
        let depth = match self.head_seq {
            None => 0,
            Some(_) => self.head_depth + 1,
        };
        let parent = self.head_seq;
        self.push(seq, parent, depth, write);
        Ok(PutOutcome::Saved { seq })
    }

    /// Starts a branch from checkpoint `from` (see
    /// [`Checkpointer::fork`](crate::store::Checkpointer::fork)): the step applies to
    /// `from`'s state and becomes the head, provided `write.parent` is still the head
    /// ([`PutOutcome::Conflict`] otherwise). A `from` not retained is
    /// [`StoreError::Invalid`].
    pub fn fork(&mut self, from: u64, write: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        if write.parent != self.head_seq {
            return Ok(PutOutcome::Conflict {
                head: self.head_seq,
            });
        }
        if Some(from) == self.head_seq {
            return self.put(write);
        }
        let Some((branch, step)) = self.find(from) else {
            return Err(StoreError::Invalid(format!(
                "checkpoint {from} is not a retained checkpoint of this thread"
            )));
        };
        let depth = step.depth + 1;
        let base = branch.state_at(from);
        check_ops(&base, &write.update.messages)?;
        let seq = self.next_seq()?;
        self.branches.push(Branch {
            base: base.clone(),
            from: Some(from),
            steps: VecDeque::new(),
        });
        self.head = base;
        self.push(seq, Some(from), depth, write);
        Ok(PutOutcome::Saved { seq })
    }

    fn next_seq(&self) -> Result<u64, StoreError> {
        match self.head_seq {
            None => Ok(0),
            Some(s) => s.checked_add(1).ok_or_else(|| {
                StoreError::Invalid(format!("thread seq {s} cannot be incremented"))
            }),
        }
    }

    /// Applies a checked write to the head and appends it to the current branch.
    fn push(&mut self, seq: u64, parent: Option<u64>, depth: u64, write: CheckpointWrite) {
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
        let step = Step {
            seq,
            parent,
            depth,
            run_id: write.run_id,
            node: write.node,
            created_at_ms: write.created_at_ms,
            ops,
            values: write.update.values,
        };
        if let Some(current) = self.branches.last_mut() {
            current.steps.push_back(step);
        }
        self.head_seq = Some(seq);
        self.head_depth = depth;
        self.fold();
    }

    /// Folds the oldest steps (of any branch) into their branch's base while more than
    /// `keep` are retained; a branch left without steps goes, unless it is the current
    /// one.
    fn fold(&mut self) {
        while self.keep > 0 && self.retained() > self.keep {
            let oldest = self
                .branches
                .iter()
                .enumerate()
                .filter_map(|(i, b)| b.steps.front().map(|s| (s.seq, i)))
                .min();
            let Some((_, i)) = oldest else { return };
            let branch = &mut self.branches[i];
            if let Some(old) = branch.steps.pop_front() {
                branch.base.apply(&old.ops, &old.values);
            }
            if branch.steps.is_empty() && i + 1 < self.branches.len() {
                self.branches.remove(i);
            }
        }
    }

    /// The branch holding step `seq`, and the step.
    fn find(&self, seq: u64) -> Option<(&Branch, &Step)> {
        self.branches.iter().find_map(|b| {
            let i = b.steps.binary_search_by_key(&seq, |s| s.seq).ok()?;
            Some((b, &b.steps[i]))
        })
    }

    /// The newest checkpoint with its full state.
    pub fn latest(&self) -> Option<Checkpoint> {
        let step = self.branches.last()?.steps.back()?;
        Some(self.head.checkpoint(step))
    }

    /// Up to `limit` retained checkpoints of the current branch with a seq below
    /// `before` (all when `None`), newest first.
    pub fn history_page(&self, before: Option<u64>, limit: usize) -> Vec<Checkpoint> {
        self.branch_page(None, before, limit)
    }

    /// Up to `limit` retained checkpoints of the branch ending at `tip` (the head when
    /// `None`) with a seq below `before`, newest first: `tip`, its parent, and so on.
    /// Each branch's states are rebuilt once, walking its deltas forward from its base,
    /// and only the checkpoints returned are materialised.
    pub fn branch_page(
        &self,
        tip: Option<u64>,
        before: Option<u64>,
        limit: usize,
    ) -> Vec<Checkpoint> {
        let mut page = Vec::new();
        let Some(mut cut) = tip.or(self.head_seq) else {
            return page;
        };
        if limit == 0 {
            return page;
        }
        if tip.is_none() && before.is_none() && limit == 1 {
            return self.latest().into_iter().collect();
        }
        while page.len() < limit {
            let Some(branch) = self.branches.iter().rev().find(|b| b.holds(cut)) else {
                break;
            };
            let end = before.map_or(cut, |b| cut.min(b.saturating_sub(1)));
            let eligible = if before.is_some_and(|b| b == 0) {
                0
            } else {
                branch.steps.partition_point(|s| s.seq <= end)
            };
            page.extend(branch.newest(eligible, limit - page.len()));
            match branch.from {
                Some(from) => cut = from,
                None => break,
            }
        }
        page
    }

    /// Up to `limit` retained checkpoints of every branch with a seq below `before` (all
    /// when `None`), newest first: LangGraph's thread history, where a fork's branch and
    /// the branches it left are listed together. A branch's steps are consecutive seqs
    /// (only the current branch grows), so newest first is branch by branch, newest
    /// branch first, each rebuilt once.
    pub fn tree_page(&self, before: Option<u64>, limit: usize) -> Vec<Checkpoint> {
        if before.is_none() && limit == 1 {
            return self.latest().into_iter().collect();
        }
        let mut page = Vec::new();
        for branch in self.branches.iter().rev() {
            if page.len() >= limit {
                break;
            }
            let eligible = before.map_or(branch.steps.len(), |b| {
                branch.steps.partition_point(|s| s.seq < b)
            });
            page.extend(branch.newest(eligible, limit - page.len()));
        }
        page
    }

    /// The retained checkpoint with this seq, on any branch.
    pub fn checkpoint_at(&self, seq: u64) -> Option<Checkpoint> {
        if Some(seq) == self.head_seq {
            return self.latest();
        }
        let (branch, step) = self.find(seq)?;
        Some(branch.state_at(seq).checkpoint(step))
    }

    /// Every retained checkpoint of the current branch with its full state, oldest
    /// first.
    pub fn history(&self) -> Vec<Checkpoint> {
        let mut all = self.branch_page(None, None, usize::MAX);
        all.reverse();
        all
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
