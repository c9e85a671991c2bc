//! Small helpers the built-ins share.

use keel_core::message::Message;
use keel_core::state::AgentState;
use serde_json::{Value, json};

/// The index of the last AI message.
pub(crate) fn last_ai_index(messages: &[Message]) -> Option<usize> {
    messages.iter().rposition(Message::is_ai)
}

/// True when a middleware configured for `tools` (every tool when `None`, LangChain's
/// default) applies to a call of `tool`.
pub(crate) fn selects(tools: Option<&[String]>, tool: &str) -> bool {
    tools.is_none_or(|t| t.iter().any(|name| name == tool))
}

/// A per-run counter kept in state. LangGraph keeps run-scoped counts in an untracked
/// channel that every run starts at zero; Keel checkpoints every value, so a run-scoped
/// count is stored with the run id it belongs to and reads as 0 in any other run.
pub(crate) fn run_count(state: &AgentState, key: &str, run_id: &str) -> u64 {
    match state.values.get(key) {
        Some(Value::Object(o)) if o.get("run_id").and_then(Value::as_str) == Some(run_id) => {
            o.get("count").and_then(Value::as_u64).unwrap_or(0)
        }
        _ => 0,
    }
}

/// The stored form of a per-run counter (see [`run_count`]).
pub(crate) fn run_count_value(run_id: &str, count: u64) -> Value {
    json!({"run_id": run_id, "count": count})
}

/// A thread-scoped counter kept in state (0 when absent).
pub(crate) fn thread_count(state: &AgentState, key: &str) -> u64 {
    state.values.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// "attempt" or "attempts", as LangChain words its failure messages.
pub(crate) fn attempts_word(n: u64) -> &'static str {
    if n == 1 { "attempt" } else { "attempts" }
}
