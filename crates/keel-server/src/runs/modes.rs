//! The stream modes of the Agent Server protocol that Keel produces, as the SDKs name
//! them (`stream_mode="messages-tuple"`, ...).

use keel_core::stream::StreamMode;
use serde_json::Value;

use crate::wire::kind;

/// A protocol stream mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WireMode {
    /// `values`: the whole state after each step.
    Values,
    /// `updates`: each node's update, keyed by node name.
    Updates,
    /// `messages`: `messages/metadata`, `messages/partial` (the message so far) and
    /// `messages/complete` events.
    Messages,
    /// `messages-tuple`: `messages` events of `[chunk, metadata]`.
    MessagesTuple,
    /// `custom`: payloads written by middleware (`context_compacting`, ...).
    Custom,
    /// `events`: LangChain callback events (`on_chat_model_stream`, `on_chain_end`,
    /// `on_custom_event`).
    Events,
    /// `tasks`: each node's start (`{id, name, input, triggers}`) and result (`{id,
    /// name, error, result, interrupts}`).
    Tasks,
    /// `checkpoints`: each checkpoint as written (`{config, parent_config, values,
    /// metadata, next, tasks}`).
    Checkpoints,
    /// `debug`: checkpoints and tasks as `{type: checkpoint|task|task_result, timestamp,
    /// step, payload}`.
    Debug,
}

/// Every mode, in the order the docs list them.
pub const ALL_MODES: [WireMode; 9] = [
    WireMode::Values,
    WireMode::Updates,
    WireMode::Messages,
    WireMode::MessagesTuple,
    WireMode::Custom,
    WireMode::Events,
    WireMode::Tasks,
    WireMode::Checkpoints,
    WireMode::Debug,
];

impl WireMode {
    /// The protocol's name.
    pub fn as_str(self) -> &'static str {
        match self {
            WireMode::Values => "values",
            WireMode::Updates => "updates",
            WireMode::Messages => "messages",
            WireMode::MessagesTuple => "messages-tuple",
            WireMode::Custom => "custom",
            WireMode::Events => "events",
            WireMode::Tasks => "tasks",
            WireMode::Checkpoints => "checkpoints",
            WireMode::Debug => "debug",
        }
    }

    /// The mode a protocol name stands for.
    pub fn parse(name: &str) -> Result<WireMode, String> {
        ALL_MODES
            .into_iter()
            .find(|m| m.as_str() == name)
            .ok_or_else(|| {
                format!(
                    "stream_mode {name:?} is not supported; use any of values, updates, messages, messages-tuple, custom, events, tasks, checkpoints, debug"
                )
            })
    }
}

/// A set of modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModeSet(u16);

impl ModeSet {
    /// The set holding these modes.
    pub fn of(modes: &[WireMode]) -> Self {
        ModeSet(modes.iter().fold(0, |acc, m| acc | (1 << *m as u16)))
    }

    /// True when `mode` is in the set.
    pub fn has(self, mode: WireMode) -> bool {
        self.0 & (1 << mode as u16) != 0
    }

    /// The modes in the set.
    pub fn modes(self) -> Vec<WireMode> {
        ALL_MODES.into_iter().filter(|m| self.has(*m)).collect()
    }

    /// The names of the modes, for the run's `kwargs`.
    pub fn names(self) -> Vec<&'static str> {
        self.modes().into_iter().map(WireMode::as_str).collect()
    }

    /// Reads `stream_mode` (a name or a list of names); `values` when absent, as the
    /// SDKs default.
    pub fn from_json(value: Option<&Value>) -> Result<ModeSet, String> {
        match value {
            None | Some(Value::Null) => Ok(ModeSet::of(&[WireMode::Values])),
            Some(Value::String(name)) => Ok(ModeSet::of(&[WireMode::parse(name)?])),
            Some(Value::Array(items)) => {
                let mut modes = Vec::new();
                for item in items {
                    let name = item.as_str().ok_or_else(|| {
                        format!("stream_mode entries must be strings, not {}", kind(item))
                    })?;
                    modes.push(WireMode::parse(name)?);
                }
                if modes.is_empty() {
                    return Ok(ModeSet::of(&[WireMode::Values]));
                }
                Ok(ModeSet::of(&modes))
            }
            Some(other) => Err(format!(
                "stream_mode must be a string or a list of strings, not {}",
                kind(other)
            )),
        }
    }

    /// The agent's stream modes needed to produce these protocol modes.
    pub fn agent_modes(self) -> Vec<StreamMode> {
        let mut out = Vec::new();
        if self.has(WireMode::Values) {
            out.push(StreamMode::Values);
        }
        // Tool results reach `messages`/`messages-tuple` whole, from the tools node's update.
        if self.has(WireMode::Updates)
            || self.has(WireMode::Messages)
            || self.has(WireMode::MessagesTuple)
            || self.has(WireMode::Events)
        {
            out.push(StreamMode::Updates);
        }
        if self.has(WireMode::Messages)
            || self.has(WireMode::MessagesTuple)
            || self.has(WireMode::Events)
        {
            out.push(StreamMode::Messages);
        }
        if self.has(WireMode::Custom) || self.has(WireMode::Events) {
            out.push(StreamMode::Custom);
        }
        if self.has(WireMode::Tasks) || self.has(WireMode::Debug) {
            out.push(StreamMode::Tasks);
        }
        if self.has(WireMode::Checkpoints) || self.has(WireMode::Debug) {
            out.push(StreamMode::Checkpoints);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_names_and_lists() {
        let set = ModeSet::from_json(Some(&json!(["values", "messages-tuple"]))).unwrap();
        assert_eq!(set.names(), ["values", "messages-tuple"]);
        assert_eq!(ModeSet::from_json(None).unwrap().names(), ["values"]);
        let err = ModeSet::from_json(Some(&json!("tracing"))).unwrap_err();
        assert!(err.contains("\"tracing\""), "{err}");
        assert_eq!(
            ModeSet::of(&[WireMode::Debug]).agent_modes(),
            [StreamMode::Tasks, StreamMode::Checkpoints]
        );
        assert_eq!(
            ModeSet::of(&[WireMode::Events]).agent_modes(),
            [
                StreamMode::Updates,
                StreamMode::Messages,
                StreamMode::Custom
            ]
        );
    }
}
