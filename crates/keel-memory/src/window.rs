//! The recent window: a run of the history that a provider will accept.
//!
//! A window can start inside a tool run (its first messages are results whose call was
//! folded or lies before it) or hold a call whose result never came (an interrupted
//! turn: a crash, a cancelled run). A leading result is dropped (its call is older
//! history). A dangling call is answered with a synthetic "cancelled" result, as
//! LangChain's deepagents `PatchToolCallsMiddleware` does (keel-core's
//! [`dangling`](keel_core::dangling) module), so the messages before it stay in the
//! window instead of being cut off. Whatever is still invalid after that (a duplicated
//! result, an orphan in the middle) moves the window's start forward past it, as a last
//! resort, with a warning.

use keel_core::dangling::{
    Pending, cancelled_result, dangling_tool_calls, insert_at_calls, patch_dangling_tool_calls,
};
use keel_core::message::Message;
use keel_core::pairs::{PairViolation, check_pairs_strict};
use keel_core::store::StoredMessage;

/// The first index from which `messages[index..]` passes the strict pair check
/// (dangling calls included: patch them first with [`provider_safe`] to keep them).
pub fn pair_safe_start(messages: &[Message]) -> usize {
    let mut start = 0;
    loop {
        while start < messages.len() && messages[start].is_tool() {
            start += 1;
        }
        match check_pairs_strict(&messages[start..]) {
            Ok(()) => return start,
            Err(violation) => {
                let (PairViolation::OrphanResult { index, .. }
                | PairViolation::MissingResult { index, .. }
                | PairViolation::DuplicateResult { index, .. }) = &violation;
                tracing::warn!(%violation, "session memory: recent window trimmed to keep tool calls and results together");
                start = (start + index + 1).min(messages.len());
            }
        }
    }
}

/// `messages` made acceptable to a provider: leading results dropped, dangling calls
/// answered with a synthetic cancelled result, anything still invalid cut off the front.
pub fn provider_safe(messages: &[Message]) -> Vec<Message> {
    let lead = messages.iter().take_while(|m| m.is_tool()).count();
    let rest = &messages[lead..];
    let mut out = match patch_dangling_tool_calls(rest, Pending::Patch) {
        Some(patched) => patched,
        None => rest.to_vec(),
    };
    let start = pair_safe_start(&out);
    out.drain(..start);
    out
}

/// The last `n` of `messages`, made provider-safe (the no-store fallback).
pub fn last_n_pair_safe(messages: &[Message], n: usize) -> Vec<Message> {
    provider_safe(&messages[messages.len().saturating_sub(n)..])
}

/// [`provider_safe`] for stored rows: a synthetic result is a row that is sent, never
/// stored, with the timestamp of the call it answers.
pub fn provider_safe_rows(mut rows: Vec<StoredMessage>) -> Vec<StoredMessage> {
    let lead = rows.iter().take_while(|m| m.message.is_tool()).count();
    rows.drain(..lead);
    let messages: Vec<Message> = rows.iter().map(|r| r.message.clone()).collect();
    let dangling = dangling_tool_calls(&messages, Pending::Patch);
    if !dangling.is_empty() {
        tracing::warn!(
            calls = dangling.len(),
            "session memory: tool calls without results (an interrupted turn) are sent with a synthetic cancelled result"
        );
        let patched = insert_at_calls(rows, &dangling, |d, before: &[StoredMessage]| {
            StoredMessage {
                timestamp_ms: before.last().map_or(0, |r| r.timestamp_ms),
                message: cancelled_result(d),
            }
        });
        rows = patched;
    }
    let messages: Vec<Message> = rows.iter().map(|r| r.message.clone()).collect();
    rows.drain(..pair_safe_start(&messages));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::ToolCall;
    use serde_json::json;

    fn call(ids: &[&str]) -> Message {
        Message::ai("").with_tool_calls(
            ids.iter()
                .map(|i| ToolCall::new(*i, "t", json!({})))
                .collect(),
        )
    }

    #[test]
    fn leading_results_are_dropped_and_dangling_calls_patched() {
        let msgs = vec![
            Message::human("q"),
            call(&["a", "b"]),
            Message::tool("a", "1"),
            Message::tool("b", "2"),
            Message::ai("done"),
            call(&["c"]), // interrupted: no result
            Message::human("next"),
            Message::ai("ok"),
        ];
        // The strict check alone would cut everything before the interrupted call.
        assert_eq!(pair_safe_start(&msgs), 6);
        let safe = provider_safe(&msgs);
        assert_eq!(safe.len(), 9, "nothing dropped, one synthetic result added");
        assert_eq!(safe[6].tool_call_id(), Some("c"));
        assert!(safe[6].flag(keel_core::dangling::PATCHED));
        assert!(check_pairs_strict(&safe).is_ok());
        assert_eq!(
            last_n_pair_safe(&msgs[..5], 3).len(),
            1,
            "starts after the tool run"
        );
        assert_eq!(last_n_pair_safe(&msgs[..5], 4).len(), 4);
        assert!(last_n_pair_safe(&msgs[2..4], 2).is_empty());
    }

    #[test]
    fn rows_get_synthetic_results_that_are_not_stored_rows() {
        let rows: Vec<StoredMessage> = [
            Message::tool("x", "orphan"),
            Message::human("deploy"),
            call(&["d"]),
            Message::human("still there?"),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, m)| StoredMessage {
            timestamp_ms: 10 + i as i64,
            message: m,
        })
        .collect();
        let safe = provider_safe_rows(rows);
        assert_eq!(safe.len(), 4);
        assert!(safe[0].message.is_human());
        assert_eq!(safe[2].message.id(), "cancelled-d");
        assert_eq!(safe[2].timestamp_ms, 12);
    }
}
