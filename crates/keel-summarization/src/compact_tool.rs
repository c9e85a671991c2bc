//! The `compact_conversation` tool (`compact_tool: true`), as deepagents offers it: the
//! model asks for a compaction, and the thread is compacted before its next step, as
//! `Agent::compact` would (the summary folded now, [`COMPACTED_THROUGH`](keel_core::state::COMPACTED_THROUGH) recorded in the
//! state through the model call's own update, so it holds for every later call).
//!
//! The tool is the middleware's own: its spec is added to every model request, and its
//! calls are answered in `wrap_tool_call` (so the tool-call limit, human-in-the-loop and
//! other tool middleware outside this one still see them); the compaction itself runs on
//! the next model call, which finds the call among the messages after the last
//! assistant message.

use std::sync::Arc;

use keel_core::message::Message;
use keel_core::middleware::ModelRequest;
use keel_core::tool::ToolSpec;
use serde_json::{Value, json};

/// The tool's name.
pub const COMPACT_TOOL: &str = "compact_conversation";

/// What the tool answers.
pub const COMPACT_TOOL_ANSWER: &str = "The conversation will be compacted before your next step: older messages are replaced by a summary.";

/// The tool's spec, as the model sees it.
pub fn compact_tool_spec() -> ToolSpec {
    ToolSpec::new(
        COMPACT_TOOL,
        "Compact the conversation: from your next step on, older messages are replaced by a summary of them, and recent ones are kept verbatim. Call it when the conversation has grown long and its older details are no longer needed word for word.",
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
    )
}

/// `request` with the tool's spec added (once).
pub(crate) fn with_spec(request: ModelRequest) -> ModelRequest {
    if request.tools.iter().any(|t| t.name == COMPACT_TOOL) {
        return request;
    }
    let mut tools = request.tools.as_ref().clone();
    tools.push(compact_tool_spec());
    ModelRequest {
        tools: Arc::new(tools),
        ..request
    }
}

/// True when the last assistant message called the tool and only tool results follow
/// it: the model asked for a compaction on its previous step. Reads only the messages
/// since the last assistant message.
pub(crate) fn asked(messages: &[Message]) -> bool {
    for m in messages.iter().rev() {
        if m.is_tool() {
            continue;
        }
        return m.is_ai() && m.tool_calls().iter().any(|c| c.name == COMPACT_TOOL);
    }
    false
}

/// The state value recording a compaction of `messages` (the shape
/// [`COMPACTED_THROUGH`](keel_core::state::COMPACTED_THROUGH) documents; `None` when the last message has no id).
pub(crate) fn mark(messages: &[Message]) -> Option<Value> {
    let last = messages.last()?;
    (!last.id().is_empty()).then(|| json!({"message_id": last.id(), "count": messages.len()}))
}
