//! Agent state and its reducer.
//!
//! State is the message list plus named values that middleware declare. Updates are
//! applied with LangGraph's add-messages rules: append; a message whose id is already
//! present replaces it in place; [`MessageOp::Remove`] deletes by id;
//! [`MessageOp::RemoveAll`] clears the list (the ops after it rebuild it). Removal only
//! changes the *current* state: checkpoints before it keep every message.

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
        if update
            .messages
            .iter()
            .any(|op| matches!(op, MessageOp::Remove { .. }))
        {
            self.check_removals(&update.messages)?;
        }
        if !update.messages.is_empty() {
            // Copies the list only when a model request still shares it.
            let list = Arc::make_mut(&mut self.messages);
            let mut appended_only = true;
            for op in update.messages {
                match op {
                    MessageOp::Upsert { mut message } => {
                        if message.id().is_empty() {
                            message.set_id(new_id());
                        }
                        match list.iter().rposition(|m| m.id() == message.id()) {
                            Some(i) => {
                                list[i] = message;
                                appended_only = false;
                            }
                            None => list.push(message),
                        }
                    }
                    MessageOp::Remove { id } => {
                        if let Some(i) = list.iter().position(|m| m.id() == id) {
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
            if !appended_only {
                self.renew_lineage();
            }
        }
        self.values.extend(update.values);
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

#[cfg(test)]
mod tests {
    use super::*;

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
