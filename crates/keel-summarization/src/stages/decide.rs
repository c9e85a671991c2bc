//! Stage 2, decide: whether this call compacts at all.
//!
//! Threshold first: under every trigger the request passes untouched, with no cache
//! lookup and no summary. An interrupted run's unanswered calls are answered with a
//! synthetic "cancelled" result before anything is planned, so the plan never has to
//! cut around them (and never drops the recent window to get past one).

use std::borrow::Cow;
use std::ops::ControlFlow;

use keel_core::dangling::{Pending, dangling_tool_calls, patch_dangling_tool_calls};
use keel_core::middleware::ModelRequest;
use keel_core::state::COMPACTED_THROUGH;

use crate::events::CompactionReason;
use crate::middleware::{Action, Compactor};
use crate::rules::{self, Limit};
use crate::stages::{Call, Outcome, Step};

/// True when the thread was compacted by hand (its state holds
/// [`COMPACTED_THROUGH`]) and the request still starts with the messages it had then: one
/// map lookup and one id comparison, so the pass-through check stays O(1).
pub(crate) fn compacted_by_hand(request: &ModelRequest) -> bool {
    let Some(mark) = request.state.values.get(COMPACTED_THROUGH) else {
        return false;
    };
    let count = mark.get("count").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
    let id = mark
        .get("message_id")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    count > 0
        && !id.is_empty()
        && request
            .messages
            .get(count - 1)
            .is_some_and(|m| m.id() == id)
}

impl Compactor {
    /// Decides for the call: `Break` to pass the request through, else hands on with
    /// the thread's cache key set. `call.forced`: a token limit the request must get
    /// under (the retry after a provider's context-overflow error), added to the
    /// triggers. `call.manual`: a compaction asked for (`Agent::compact`), which
    /// compacts whatever the triggers say. Dangling tool calls are answered first; the
    /// answered request is measured and decided again.
    pub(crate) fn decide(&self, call: &mut Call<'_>) -> Step {
        loop {
            let request = &*call.request;
            let m = &mut call.measured;
            if !self.enabled() || request.messages.is_empty() {
                return self.pass_through(call);
            }
            if let Some(f) = call.forced {
                m.triggers.push(Limit::Tokens(f.max(1)));
                m.reason = CompactionReason::Overflow;
            } else if !rules::triggered(&m.triggers, m.total, request.messages.len()) {
                if !(call.manual || compacted_by_hand(request)) {
                    return self.pass_through(call);
                }
                m.reason = CompactionReason::Requested;
            }
            self.warn_fixed_cost(m);
            let Some(patched) = self.answer_dangling(request) else {
                call.key = self.cache_key(&request.runtime.thread_id, request, &*call.counter);
                return ControlFlow::Continue(());
            };
            call.measured = self.measure(&patched, &*call.counter);
            call.request = Cow::Owned(patched);
        }
    }

    /// Passes the call through, keeping its list's planning index up to date.
    fn pass_through(&self, call: &Call<'_>) -> Step {
        self.keep_plan_index(&call.request, &call.measured);
        ControlFlow::Break(Outcome::untouched(Action::PassThrough, None))
    }

    /// True when a tool call of `request` before its last block of calls has no result
    /// (`dangling_tool_calls` with [`Pending::Keep`] finds one). Scans only from where
    /// the last call on this list found nothing dangling, and remembers how far it finds
    /// nothing, so a call on a long thread reads what is new.
    pub(crate) fn dangles(&self, request: &ModelRequest) -> bool {
        let messages = &request.messages;
        let lineage = request.lineage();
        let memos = self.memos();
        let from = memos.get(messages, lineage).map_or(0, |memo| memo.clean);
        if !dangling_tool_calls(&messages[from..], Pending::Keep).is_empty() {
            return true;
        }
        let block = messages[from..]
            .iter()
            .rposition(|msg| !msg.is_tool())
            .map_or(from, |i| from + i);
        memos.update(messages, lineage, |memo| memo.clean = block);
        false
    }

    /// `request` with its tool calls without results answered by a synthetic
    /// "cancelled" result, or `None` when none dangles.
    fn answer_dangling(&self, request: &ModelRequest) -> Option<ModelRequest> {
        if !self.dangles(request) {
            return None;
        }
        let patched = patch_dangling_tool_calls(&request.messages, Pending::Keep)?;
        tracing::warn!(
            thread_id = %request.runtime.thread_id,
            patched = patched.len() - request.messages.len(),
            "summarization: tool calls without results were answered with a synthetic cancelled result"
        );
        Some(request.with_messages(patched))
    }
}
