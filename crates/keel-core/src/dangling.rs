//! Dangling tool calls: an assistant message whose tool calls never got results.
//!
//! A crash, a cancelled run or an interrupt leaves an AI message with calls and no
//! answers. Providers reject such a request (HTTP 400: every call must be answered by
//! the tool messages right after it), so it must never be sent as is. LangChain's
//! deepagents answers each such call with a synthetic tool message saying the call was
//! cancelled (`PatchToolCallsMiddleware`); Keel does the same, with two differences:
//!
//! - the stored history is never rewritten (it is append-only): patching happens on the
//!   copy handed to the model, and a list with nothing dangling is returned untouched
//!   (no allocation, no rewrite streamed to UIs);
//! - a synthetic result has a deterministic id (`cancelled-` + the call id), so the
//!   patched list is the same on every call and caches keyed on message fingerprints
//!   keep working.
//!
//! [`patch_dangling_tool_calls`] is the one implementation; the
//! [`PatchToolCallsMiddleware`] (every model call), summarization's plan, session
//! memory's recent window and `keel replay` / `keel compact` all call it.
//!
//! ```
//! use keel_core::dangling::{Pending, dangling_tool_calls, patch_dangling_tool_calls};
//! use keel_core::message::{Message, ToolCall};
//! use serde_json::json;
//!
//! let msgs = vec![
//!     Message::human("deploy"),
//!     Message::ai("").with_tool_calls(vec![ToolCall::new("c1", "deploy", json!({}))]),
//!     // the process died here: no result for c1
//!     Message::human("are you there?"),
//! ];
//! assert_eq!(dangling_tool_calls(&msgs, Pending::Patch).len(), 1);
//! let patched = patch_dangling_tool_calls(&msgs, Pending::Patch).unwrap();
//! assert_eq!(patched.len(), 4);
//! assert_eq!(patched[2].tool_call_id(), Some("c1"));
//! assert!(patched[2].text().contains("cancelled"));
//! ```

use std::borrow::Cow;

use crate::message::{Message, ToolMessage, ToolStatus};
use crate::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use crate::model::ModelError;

/// Metadata key set to `true` on every synthetic result.
pub const PATCHED: &str = "patched_tool_call";

/// Prefix of a synthetic result's id; the call id follows.
pub const PATCHED_ID_PREFIX: &str = "cancelled-";

/// What to do with the calls of the last AI message when nothing but (some of) its
/// results follow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// They are dangling too: the list is about to be sent to a model, which never
    /// happens while a step's tools are still running.
    Patch,
    /// They are the pending calls of the current step (a transcript or a request that
    /// ends mid-step): leave them alone.
    Keep,
}

/// One call without a result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DanglingCall {
    /// Position of the AI message that made the call.
    pub ai_index: usize,
    /// Position after the AI message's tool run: where the synthetic result goes.
    pub insert_at: usize,
    /// The call id.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
}

/// The text of a synthetic result.
pub fn cancelled_text(tool_name: &str, call_id: &str) -> String {
    format!(
        "Tool call {tool_name} with id {call_id} was cancelled: the run stopped (or another \
         message came in) before it returned a result. It did not complete; call it again \
         if it is still needed."
    )
}

/// The synthetic result for a dangling call.
pub fn cancelled_result(call: &DanglingCall) -> Message {
    let mut metadata = serde_json::Map::new();
    metadata.insert(PATCHED.to_owned(), serde_json::Value::Bool(true));
    ToolMessage {
        content: cancelled_text(&call.tool_name, &call.call_id).into(),
        tool_call_id: call.call_id.clone(),
        id: format!("{PATCHED_ID_PREFIX}{}", call.call_id),
        name: Some(call.tool_name.clone()),
        status: ToolStatus::Error,
        metadata,
    }
    .into()
}

/// Every call in `messages` that the tool run right after its AI message does not
/// answer, in order. A run answers exactly its AI message's calls in the usual case,
/// which is recognised from the cached digests without reading an id, so a long thread
/// with nothing dangling costs one pass over cached hashes.
pub fn dangling_tool_calls(messages: &[Message], pending: Pending) -> Vec<DanglingCall> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let calls = messages[i].tool_calls();
        if calls.is_empty() {
            i += 1;
            continue;
        }
        let ai = i;
        let mut end = ai + 1;
        let mut sum = 0u64;
        while end < messages.len() && messages[end].is_tool() {
            sum = sum.wrapping_add(messages[end].digest().call_ids);
            end += 1;
        }
        i = end;
        let is_last = end == messages.len();
        if is_last && pending == Pending::Keep {
            continue;
        }
        if end - ai - 1 == calls.len() && sum == messages[ai].digest().call_ids {
            continue;
        }
        let answered: Vec<&str> = messages[ai + 1..end]
            .iter()
            .filter_map(Message::tool_call_id)
            .collect();
        for call in calls {
            if !answered.contains(&call.id.as_str()) {
                out.push(DanglingCall {
                    ai_index: ai,
                    insert_at: end,
                    call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                });
            }
        }
    }
    out
}

/// `messages` with a synthetic "cancelled" result after each dangling call's tool run;
/// `None` when nothing dangles (the input is fine as it is).
pub fn patch_dangling_tool_calls(messages: &[Message], pending: Pending) -> Option<Vec<Message>> {
    let dangling = dangling_tool_calls(messages, pending);
    if dangling.is_empty() {
        return None;
    }
    Some(insert_at_calls(
        messages.iter().cloned(),
        &dangling,
        |d, _| cancelled_result(d),
    ))
}

/// `items` (one per message, in order) with `make(call, items so far)` inserted where
/// each dangling call's synthetic result goes. The one insertion walk behind every
/// patched list: messages, stored rows, source line numbers.
pub fn insert_at_calls<T>(
    items: impl IntoIterator<Item = T>,
    dangling: &[DanglingCall],
    mut make: impl FnMut(&DanglingCall, &[T]) -> T,
) -> Vec<T> {
    let items = items.into_iter();
    let mut out = Vec::with_capacity(items.size_hint().0 + dangling.len());
    let mut next = dangling.iter().peekable();
    for (i, item) in items.enumerate() {
        while let Some(d) = next.next_if(|d| d.insert_at == i) {
            let patched = make(d, &out);
            out.push(patched);
        }
        out.push(item);
    }
    for d in next {
        let patched = make(d, &out);
        out.push(patched);
    }
    out
}

/// [`patch_dangling_tool_calls`] as a copy-on-write list.
pub fn patched(messages: &[Message], pending: Pending) -> Cow<'_, [Message]> {
    match patch_dangling_tool_calls(messages, pending) {
        Some(v) => Cow::Owned(v),
        None => Cow::Borrowed(messages),
    }
}

/// Answers every dangling tool call of a model request with a synthetic "cancelled"
/// result before the model sees it. The stored history is untouched; a request with
/// nothing dangling passes through as is.
///
/// Place it outermost (first in the list) so every other middleware, and the model,
/// sees a provider-valid list.
#[derive(Clone, Copy, Debug, Default)]
pub struct PatchToolCallsMiddleware;

#[keel_core::middleware]
impl Middleware for PatchToolCallsMiddleware {
    fn name(&self) -> &str {
        "PatchToolCallsMiddleware"
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        match patch_dangling_tool_calls(&request.messages, Pending::Patch) {
            None => next.run(request).await,
            Some(messages) => next.run(request.with_messages(messages)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::ai;

    #[test]
    fn complete_runs_are_untouched() {
        let msgs = vec![
            Message::human("q"),
            ai(&["a", "b"]),
            Message::tool("b", "2"),
            Message::tool("a", "1"),
            Message::ai("done"),
        ];
        assert!(patch_dangling_tool_calls(&msgs, Pending::Patch).is_none());
        assert!(matches!(patched(&msgs, Pending::Patch), Cow::Borrowed(_)));
    }

    #[test]
    fn partial_runs_get_the_missing_results_after_the_run() {
        let msgs = vec![
            Message::human("q"),
            ai(&["a", "b", "c"]),
            Message::tool("b", "2"),
            Message::human("stop that"),
            ai(&["d"]),
        ];
        let out = patch_dangling_tool_calls(&msgs, Pending::Patch).unwrap();
        let ids: Vec<Option<&str>> = out.iter().map(Message::tool_call_id).collect();
        assert_eq!(
            ids,
            vec![
                None,
                None,
                Some("b"),
                Some("a"),
                Some("c"),
                None,
                None,
                Some("d")
            ]
        );
        assert_eq!(out[3].id(), "cancelled-a");
        assert!(out[3].flag(PATCHED));
        assert_eq!(out[3].name(), Some("t"));
        // The trailing call is the current step's when asked to keep it.
        let kept = patch_dangling_tool_calls(&msgs, Pending::Keep).unwrap();
        assert_eq!(kept.len(), 7);
    }

    #[test]
    fn patching_is_deterministic_and_idempotent() {
        let msgs = vec![ai(&["a"]), Message::human("hi")];
        let once = patch_dangling_tool_calls(&msgs, Pending::Patch).unwrap();
        let twice = patch_dangling_tool_calls(&msgs, Pending::Patch).unwrap();
        assert_eq!(once, twice);
        assert_eq!(once[1].fingerprint(), twice[1].fingerprint());
        assert!(patch_dangling_tool_calls(&once, Pending::Patch).is_none());
    }
}
