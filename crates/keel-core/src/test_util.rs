//! Message builders shared by this crate's unit tests.

use serde_json::json;

use crate::message::{Message, ToolCall};

/// An AI message calling tool `t` once per id, with empty arguments.
pub(crate) fn ai(ids: &[&str]) -> Message {
    Message::ai("").with_tool_calls(
        ids.iter()
            .map(|i| ToolCall::new(*i, "t", json!({})))
            .collect(),
    )
}
