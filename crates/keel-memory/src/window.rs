//! The recent window: a suffix of the history that a provider will accept.
//!
//! A suffix can start inside a tool run (its first messages are results whose call lies
//! before it) or hold a call whose result never came (an interrupted turn). Either is an
//! HTTP 400 at the provider, so the window's start moves forward until the suffix passes
//! keel-summarization's strict pair check. What is cut off counts as older history.

use keel_core::message::Message;
use keel_summarization::pairs::{PairViolation, check_pairs_strict};

/// The first index from which `messages[index..]` passes the strict pair check.
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

/// The last `n` of `messages`, moved forward to a pair-safe start (the no-store fallback).
pub fn last_n_pair_safe(messages: &[Message], n: usize) -> &[Message] {
    let tail = &messages[messages.len().saturating_sub(n)..];
    &tail[pair_safe_start(tail)..]
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
    fn leading_results_and_dangling_calls_are_cut() {
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
        assert_eq!(pair_safe_start(&msgs), 6);
        assert_eq!(pair_safe_start(&msgs[..5]), 0);
        assert_eq!(
            last_n_pair_safe(&msgs[..5], 3).len(),
            1,
            "starts after the tool run"
        );
        assert_eq!(last_n_pair_safe(&msgs[..5], 4).len(), 4);
        assert!(last_n_pair_safe(&msgs[2..4], 2).is_empty());
    }
}
