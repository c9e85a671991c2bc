//! Agent state and its reducer.
//!
//! State is the message list plus named values that middleware declare. Updates are
//! applied with LangGraph's add-messages rules: append; a message whose id is already
//! present replaces it in place; [`MessageOp::Remove`] deletes by id;
//! [`MessageOp::RemoveAll`] clears the list (the ops after it rebuild it). Removal only
//! changes the *current* state: checkpoints before it keep every message.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::{Message, new_id};

/// The state value that marks a run paused on purpose, waiting for a decision (LangGraph's
/// `__interrupt__`; human-in-the-loop middleware writes it). While it is set, the next
/// run resumes the last AI message's pending tool calls instead of answering them as
/// cancelled, which is what happens to the calls of a run that crashed or was stopped.
pub const INTERRUPT_KEY: &str = "__interrupt__";

/// One change to the message list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
// Nearly every op is an upsert: boxing its message would add an allocation to each one
// to shrink the two rare variants.
#[allow(clippy::large_enum_variant)]
pub enum MessageOp {
    /// Append, or replace the message with the same id.
    Upsert {
        /// The message.
        message: Message,
    },
    /// Delete the message with this id (unknown ids are an error at apply time).
    Remove {
        /// The id.
        id: String,
    },
    /// Delete every message.
    RemoveAll,
}

/// The state value recording a manual compaction (`Agent::compact`): `{"message_id":
/// ID, "count": N}`, how many messages the thread had then and the id of the last one.
/// Transient summarization compacts every later call whose messages still hold that
/// message at that position, even under its triggers.
pub const COMPACTED_THROUGH: &str = "compacted_through";

/// A state update returned by a hook or a node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateUpdate {
    /// Message changes, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<MessageOp>,
    /// Named values to set (replacing the previous value).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub values: Map<String, Value>,
}

impl StateUpdate {
    /// An update appending (or replacing by id) these messages.
    pub fn messages(messages: impl IntoIterator<Item = Message>) -> Self {
        StateUpdate {
            messages: messages
                .into_iter()
                .map(|message| MessageOp::Upsert { message })
                .collect(),
            values: Map::new(),
        }
    }

    /// An update that restores an earlier state (a rollback): the message list becomes
    /// exactly `messages`, and `values` are set again. Keys set since stay, since an
    /// update can set values, not unset them.
    pub fn restoring(
        messages: impl IntoIterator<Item = Message>,
        values: Map<String, Value>,
    ) -> Self {
        let mut update = StateUpdate::messages(messages);
        update.messages.insert(0, MessageOp::RemoveAll);
        update.values = values;
        update
    }

    /// An update setting one value.
    pub fn value(key: impl Into<String>, value: Value) -> Self {
        let mut values = Map::new();
        values.insert(key.into(), value);
        StateUpdate {
            messages: Vec::new(),
            values,
        }
    }

    /// True when the update changes nothing.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.values.is_empty()
    }

    /// Appends another update's changes after this one's.
    pub fn merge(&mut self, other: StateUpdate) {
        self.messages.extend(other.messages);
        self.values.extend(other.values);
    }
}

/// A reducer failure.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StateError {
    /// A remove named an id that is not in the list.
    #[error("cannot remove message {0:?}: no message has that id")]
    UnknownId(String),
}

/// Names an append-only history of a message list.
///
/// Two lists with the same lineage are one list at two moments: the shorter is a prefix
/// of the longer. [`AgentState::apply`] keeps the lineage while it only appends and
/// takes a fresh one on any replacement or removal, so code that remembers what it
/// computed for a list (token counts, the pair scan, the summary cache's prefix check)
/// can work on the new messages alone, and an edited history is recomputed from
/// scratch. A default lineage is fresh: unknown lists never match.
///
/// Code that changes [`AgentState::messages`] other than by appending must call
/// [`AgentState::renew_lineage`] (`apply` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lineage(u64);

impl Lineage {
    /// A lineage no other list has.
    pub fn fresh() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Lineage(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Default for Lineage {
    fn default() -> Self {
        Self::fresh()
    }
}

/// The agent's state: messages plus named values.
///
/// Messages sit behind an `Arc` so a model request shares them without copying; the
/// reducer copies on write only when a request still holds the old list.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AgentState {
    /// The conversation (without the system prompt).
    pub messages: Arc<Vec<Message>>,
    /// Values declared by middleware.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub values: Map<String, Value>,
    /// The append-only history `messages` belongs to (see [`Lineage`]). Not stored: a
    /// state read back from a checkpoint starts a fresh one.
    #[serde(skip)]
    pub lineage: Lineage,
}

/// States are equal when their messages and values are (the lineage is bookkeeping).
impl PartialEq for AgentState {
    fn eq(&self, other: &Self) -> bool {
        self.messages == other.messages && self.values == other.values
    }
}

impl AgentState {
    /// A state holding these messages.
    pub fn with_messages(messages: Vec<Message>) -> Self {
        AgentState {
            messages: Arc::new(messages),
            values: Map::new(),
            lineage: Lineage::fresh(),
        }
    }

    /// Starts a fresh [`Lineage`]: call it after changing `messages` other than by
    /// appending.
    pub fn renew_lineage(&mut self) {
        self.lineage = Lineage::fresh();
    }

    /// A named value, deserialized.
    pub fn get<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        self.values
            .get(key)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }

    /// Applies an update with the add-messages rules. Messages without an id get a fresh
    /// one. On error nothing is changed.
    pub fn apply(&mut self, update: StateUpdate) -> Result<(), StateError> {
        self.check(&update)?;
        if !update.messages.is_empty() {
            // Copies the list only when a model request still shares it.
            let list = Arc::make_mut(&mut self.messages);
            let appended_only = if update.messages.len() > SCAN_OPS {
                apply_indexed(list, update.messages)
            } else {
                apply_scanning(list, update.messages)
            };
            if !appended_only {
                self.renew_lineage();
            }
        }
        self.values.extend(update.values);
        Ok(())
    }

    /// The error [`apply`](Self::apply) would return for this update, without applying
    /// it. An update that passes can be applied in consecutive slices of its ops (values
    /// last) with the same result as at once, none of them failing.
    pub fn check(&self, update: &StateUpdate) -> Result<(), StateError> {
        if update
            .messages
            .iter()
            .any(|op| matches!(op, MessageOp::Remove { .. }))
        {
            self.check_removals(&update.messages)?;
        }
        Ok(())
    }

    /// Replays the ops on the id set alone, so an update that would fail changes nothing.
    fn check_removals(&self, ops: &[MessageOp]) -> Result<(), StateError> {
        let mut ids: std::collections::HashSet<&str> =
            self.messages.iter().map(Message::id).collect();
        for op in ops {
            match op {
                MessageOp::Upsert { message } => {
                    ids.insert(message.id());
                }
                MessageOp::Remove { id } => {
                    if !ids.remove(id.as_str()) {
                        return Err(StateError::UnknownId(id.clone()));
                    }
                }
                MessageOp::RemoveAll => ids.clear(),
            }
        }
        Ok(())
    }
}

/// Updates with at most this many message ops look ids up by scanning the list (one
/// pass per op, no allocation: the common case of a step adding a message or two);
/// longer ones build an id index once, so applying `k` ops to `n` messages costs
/// `O(n + k)` instead of `O(n * k)`.
const SCAN_OPS: usize = 8;

/// Counts id comparisons and index probes in tests, so linearity is proven by counting
/// work rather than by timing it.
#[cfg(test)]
fn probe() {
    tests::PROBES.with(|c| c.set(c.get() + 1));
}
#[cfg(not(test))]
#[inline(always)]
fn probe() {}

/// Assigns a fresh id to a message without one.
fn with_id(mut message: Message) -> Message {
    if message.id().is_empty() {
        message.set_id(new_id());
    }
    message
}

/// The add-messages rules by scanning: an upsert replaces the last message with its id,
/// a removal deletes the first. Returns true when the ops only appended.
fn apply_scanning(list: &mut Vec<Message>, ops: Vec<MessageOp>) -> bool {
    let mut appended_only = true;
    for op in ops {
        match op {
            MessageOp::Upsert { message } => {
                let message = with_id(message);
                match list.iter().rposition(|m| {
                    probe();
                    m.id() == message.id()
                }) {
                    Some(i) => {
                        list[i] = message;
                        appended_only = false;
                    }
                    None => list.push(message),
                }
            }
            MessageOp::Remove { id } => {
                if let Some(i) = list.iter().position(|m| {
                    probe();
                    m.id() == id
                }) {
                    list.remove(i);
                }
                appended_only = false;
            }
            MessageOp::RemoveAll => {
                list.clear();
                appended_only = false;
            }
        }
    }
    appended_only
}

/// The same rules as [`apply_scanning`] with an id index built once: a removal leaves a
/// tombstone and the list is compacted once at the end, so order is kept without
/// shifting the tail per removal. A list that already holds two messages with one id
/// (only a hand-built state can) goes to [`apply_scanning`], whose first/last choice
/// the index cannot mirror.
fn apply_indexed(list: &mut Vec<Message>, ops: Vec<MessageOp>) -> bool {
    let mut index: HashMap<String, usize> = HashMap::with_capacity(list.len() + ops.len());
    for (i, m) in list.iter().enumerate() {
        probe();
        if index.insert(m.id().to_owned(), i).is_some() {
            return apply_scanning(list, ops);
        }
    }
    let mut appended_only = true;
    // Positions removed since the last clear.
    let mut dead: Vec<bool> = Vec::new();
    for op in ops {
        match op {
            MessageOp::Upsert { message } => {
                let message = with_id(message);
                probe();
                match index.get(message.id()) {
                    Some(&i) => {
                        list[i] = message;
                        appended_only = false;
                    }
                    None => {
                        index.insert(message.id().to_owned(), list.len());
                        list.push(message);
                    }
                }
            }
            MessageOp::Remove { id } => {
                probe();
                if let Some(i) = index.remove(&id) {
                    if dead.len() < list.len() {
                        dead.resize(list.len(), false);
                    }
                    dead[i] = true;
                }
                appended_only = false;
            }
            MessageOp::RemoveAll => {
                list.clear();
                index.clear();
                dead.clear();
                appended_only = false;
            }
        }
    }
    if dead.contains(&true) {
        let mut position = 0;
        list.retain(|_| {
            let keep = !dead.get(position).copied().unwrap_or(false);
            position += 1;
            keep
        });
    }
    appended_only
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    thread_local! {
        /// Id comparisons and index probes made by `apply` on this thread.
        pub(super) static PROBES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn probes() -> u64 {
        PROBES.with(std::cell::Cell::get)
    }

    /// The reducer as it was written first: one scan of the list per op.
    fn reference(list: &mut Vec<Message>, ops: &[MessageOp]) {
        for op in ops {
            match op {
                MessageOp::Upsert { message } => {
                    match list.iter().rposition(|m| m.id() == message.id()) {
                        Some(i) => list[i] = message.clone(),
                        None => list.push(message.clone()),
                    }
                }
                MessageOp::Remove { id } => {
                    if let Some(i) = list.iter().position(|m| m.id() == *id) {
                        list.remove(i);
                    }
                }
                MessageOp::RemoveAll => list.clear(),
            }
        }
    }

    fn op() -> impl Strategy<Value = MessageOp> {
        // Few ids, so replacements and removals of present ids are common.
        prop_oneof![
            6 => (0u8..12, 0u8..4).prop_map(|(id, text)| MessageOp::Upsert {
                message: Message::human(format!("t{text}")).with_id(format!("m{id}")),
            }),
            2 => (0u8..12).prop_map(|id| MessageOp::Remove { id: format!("m{id}") }),
            1 => Just(MessageOp::RemoveAll),
        ]
    }

    proptest! {
        /// Both lookup strategies give exactly the reducer's result, and a failing
        /// update changes nothing, whatever the mix of upserts, removals and clears.
        #[test]
        fn indexed_and_scanning_apply_match_the_reducer(
            start in proptest::collection::vec(0u8..12, 0..10),
            ops in proptest::collection::vec(op(), 0..40),
        ) {
            let mut ids: Vec<u8> = start;
            ids.sort_unstable();
            ids.dedup();
            let initial: Vec<Message> =
                ids.iter().map(|i| Message::ai("s").with_id(format!("m{i}"))).collect();
            let mut state = AgentState::with_messages(initial.clone());
            let update = StateUpdate { messages: ops.clone(), values: Map::new() };
            let mut expected = initial.clone();
            reference(&mut expected, &ops);
            match state.apply(update) {
                Ok(()) => prop_assert_eq!(&*state.messages, &expected),
                Err(StateError::UnknownId(_)) => prop_assert_eq!(&*state.messages, &initial),
            }
            // The scanning path on its own, on every prefix length the index skips.
            let mut scanned = initial.clone();
            let mut want = initial;
            let short: Vec<MessageOp> = ops.iter().take(SCAN_OPS).cloned().collect();
            reference(&mut want, &short);
            apply_scanning(&mut scanned, short);
            prop_assert_eq!(scanned, want);
        }
    }

    /// Upserting many messages costs work proportional to their number: 20,000 new
    /// messages then 20,000 replacements make a few probes each, where a scan per
    /// message makes about 400 million.
    #[test]
    fn many_upserts_are_linear() {
        let n = 20_000;
        let batch = |text: &str| {
            StateUpdate::messages((0..n).map(|i| Message::human(text).with_id(format!("m{i}"))))
        };
        let mut s = AgentState::default();
        let before = probes();
        s.apply(batch("a")).unwrap();
        s.apply(batch("b")).unwrap();
        let made = probes() - before;
        assert_eq!(s.messages.len(), n);
        assert!(s.messages.iter().all(|m| m.text() == "b"));
        assert!(made <= 4 * n as u64, "{made} probes for {n} messages twice");
    }

    /// A duplicate id in a hand-built list keeps the scanning rules: the last copy is
    /// replaced, the first is removed.
    #[test]
    fn duplicate_ids_keep_the_scanning_rules() {
        let list = vec![
            Message::human("first").with_id("d"),
            Message::human("second").with_id("d"),
        ];
        let mut ops: Vec<MessageOp> = (0..SCAN_OPS)
            .map(|i| MessageOp::Upsert {
                message: Message::ai("x").with_id(format!("n{i}")),
            })
            .collect();
        ops.push(MessageOp::Upsert {
            message: Message::ai("replaced").with_id("d"),
        });
        ops.push(MessageOp::Remove { id: "d".into() });
        let mut expected = list.clone();
        reference(&mut expected, &ops);
        let mut s = AgentState::with_messages(list);
        s.apply(StateUpdate {
            messages: ops,
            values: Map::new(),
        })
        .unwrap();
        assert_eq!(*s.messages, expected);
        assert_eq!(s.messages[0].text(), "replaced");
    }

    #[test]
    fn add_messages_rules() {
        let mut s = AgentState::default();
        s.apply(StateUpdate::messages([
            Message::human("a").with_id("1"),
            Message::ai("b").with_id("2"),
        ]))
        .unwrap();
        s.apply(StateUpdate::messages([Message::ai("B").with_id("2")]))
            .unwrap();
        assert_eq!(s.messages[1].text(), "B");
        assert_eq!(s.messages.len(), 2);
        let err = s
            .apply(StateUpdate {
                messages: vec![MessageOp::Remove { id: "nope".into() }],
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(err, StateError::UnknownId("nope".into()));
        assert_eq!(s.messages.len(), 2, "a failed update changes nothing");
        s.apply(StateUpdate {
            messages: vec![
                MessageOp::RemoveAll,
                MessageOp::Upsert {
                    message: Message::human("c"),
                },
            ],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.messages.len(), 1);
        assert!(!s.messages[0].id().is_empty(), "ids are assigned");
    }
}
