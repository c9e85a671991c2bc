//! The `clear_tool_uses` edit.

use keel_core::message::{Content, Message, MessageBody};
use keel_core::tokens::TokenCounter;
use serde_json::{Map, Value, json};

use crate::error::ConfigError;

/// LangChain's placeholder for a cleared result.
pub const DEFAULT_PLACEHOLDER: &str = "[cleared]";

/// Clears the content of older tool results (LangChain's `ClearToolUsesEdit`).
///
/// When the messages count more than `trigger` tokens, every tool result but the last
/// `keep` gets `placeholder` as content, oldest first, skipping results already cleared,
/// results whose call is not found in the nearest AI message before them, and tools in
/// `exclude_tools`. With `clear_at_least` > 0 it stops once that many tokens are
/// reclaimed. With `clear_tool_inputs` the cleared call's arguments become `{}` too.
#[derive(Clone, Debug, PartialEq)]
pub struct ClearToolUses {
    /// Token count above which clearing starts (LangChain's default 100,000).
    pub trigger: u64,
    /// Stop once this many tokens are reclaimed (0: clear every candidate).
    pub clear_at_least: u64,
    /// The most recent tool results left alone (default 3).
    pub keep: usize,
    /// Also clear the arguments of the cleared calls.
    pub clear_tool_inputs: bool,
    /// Tools whose results are never cleared.
    pub exclude_tools: Vec<String>,
    /// The content a cleared result gets.
    pub placeholder: String,
}

impl Default for ClearToolUses {
    fn default() -> Self {
        ClearToolUses {
            trigger: 100_000,
            clear_at_least: 0,
            keep: 3,
            clear_tool_inputs: false,
            exclude_tools: Vec::new(),
            placeholder: DEFAULT_PLACEHOLDER.into(),
        }
    }
}

fn is_cleared(message: &Message) -> bool {
    message
        .metadata()
        .get("context_editing")
        .and_then(|c| c.get("cleared"))
        .and_then(Value::as_bool)
        == Some(true)
}

impl ClearToolUses {
    /// Checks the settings (the placeholder may be empty; counts are unsigned).
    pub fn validate(&self) -> Result<(), ConfigError> {
        const MAX: u64 = 1_000_000_000;
        for (field, value) in [
            ("trigger", self.trigger),
            ("clear_at_least", self.clear_at_least),
        ] {
            if value > MAX {
                return Err(ConfigError::new(
                    "context_editing",
                    format!("clear_tool_uses.{field}"),
                    value,
                    "is too large",
                    format!("a whole number in [0, {MAX}]"),
                ));
            }
        }
        Ok(())
    }

    /// The edited messages and how many results were cleared, or `None` when nothing
    /// changed (under the trigger, or no candidate).
    pub fn apply(
        &self,
        messages: &[Message],
        counter: &dyn TokenCounter,
    ) -> Option<(Vec<Message>, u64)> {
        let tokens = counter.count_messages(messages);
        if tokens <= self.trigger {
            return None;
        }
        let candidates: Vec<usize> = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_tool())
            .map(|(i, _)| i)
            .collect();
        let candidates = if self.keep >= candidates.len() {
            &[][..]
        } else {
            &candidates[..candidates.len() - self.keep]
        };
        let mut out: Option<Vec<Message>> = None;
        let mut cleared = 0u64;
        for &idx in candidates {
            let current = out.as_deref().unwrap_or(messages);
            let result = &current[idx];
            if is_cleared(result) {
                continue;
            }
            let Some(ai_idx) = current[..idx].iter().rposition(Message::is_ai) else {
                continue;
            };
            let call_id = result.tool_call_id().unwrap_or_default().to_owned();
            let Some(call) = current[ai_idx]
                .tool_calls()
                .iter()
                .find(|c| c.id == call_id)
            else {
                continue;
            };
            let tool = result.name().unwrap_or(&call.name).to_owned();
            if self.exclude_tools.contains(&tool) {
                continue;
            }
            let list = out.get_or_insert_with(|| messages.to_vec());
            if let MessageBody::Tool(t) = list[idx].body_mut() {
                t.content = Content::Text(self.placeholder.clone());
                t.metadata.insert(
                    "context_editing".into(),
                    json!({"cleared": true, "strategy": "clear_tool_uses"}),
                );
            }
            if self.clear_tool_inputs {
                clear_input(&mut list[ai_idx], &call_id);
            }
            cleared += 1;
            if self.clear_at_least > 0 {
                let now = counter.count_messages(list);
                if tokens.saturating_sub(now) >= self.clear_at_least {
                    break;
                }
            }
        }
        out.map(|list| (list, cleared))
    }
}

fn clear_input(ai: &mut Message, call_id: &str) {
    let MessageBody::Ai(body) = ai.body_mut() else {
        return;
    };
    let mut any = false;
    for call in &mut body.tool_calls {
        if call.id == call_id {
            call.args = Value::Object(Map::new());
            any = true;
        }
    }
    if !any {
        return;
    }
    let entry = body
        .response_metadata
        .entry("context_editing")
        .or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    if let Value::Object(o) = entry {
        let mut ids: Vec<String> = o
            .get("cleared_tool_inputs")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if !ids.iter().any(|i| i == call_id) {
            ids.push(call_id.to_owned());
        }
        ids.sort();
        o.insert("cleared_tool_inputs".into(), json!(ids));
    }
}
