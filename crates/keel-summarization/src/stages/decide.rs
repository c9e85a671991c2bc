//! Stage 2, decide: whether this call compacts at all.
//!
//! Threshold first: under every trigger the request passes untouched, with no cache
//! lookup and no summary. An interrupted run's unanswered calls are answered with a
//! synthetic "cancelled" result before anything is planned, so the plan never has to
//! cut around them (and never drops the recent window to get past one).

use keel_core::dangling::{Pending, dangling_tool_calls, patch_dangling_tool_calls};
use keel_core::middleware::ModelRequest;
use keel_core::state::COMPACTED_THROUGH;

use crate::events::CompactionReason;
use crate::middleware::Compactor;
use crate::plan::{self, Limit};
use crate::stages::Measured;

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

/// What the call does next.
pub(crate) enum Decision {
    /// Disabled, empty, or under every trigger: send the request as it is.
    PassThrough,
    /// Over a trigger (or forced after a context overflow): go on to reuse and plan.
    Compact,
    /// Tool calls without results were answered; decide again on this request.
    Patched(Box<ModelRequest>),
}

impl Compactor {
    /// Decides for `request`. `forced`: a token limit the request must get under (the
    /// retry after a provider's context-overflow error), added to the triggers.
    /// `manual`: a compaction asked for (`Agent::compact`), which compacts whatever the
    /// triggers say.
    pub(crate) fn decide(
        &self,
        request: &ModelRequest,
        m: &mut Measured,
        forced: Option<u64>,
        manual: bool,
    ) -> Decision {
        if !self.config.enabled || request.messages.is_empty() {
            return Decision::PassThrough;
        }
        if let Some(f) = forced {
            m.triggers.push(Limit::Tokens(f.max(1)));
            m.reason = CompactionReason::Overflow;
        } else if !plan::triggered(&m.triggers, m.total, request.messages.len()) {
            if !(manual || compacted_by_hand(request)) {
                return Decision::PassThrough;
            }
            m.reason = CompactionReason::Requested;
        }
        self.warn_fixed_cost(m);
        // Scan only from where the last call on this list found nothing dangling.
        let messages = &request.messages;
        let lineage = request.lineage();
        let from = self
            .threads
            .get(messages, lineage)
            .map_or(0, |memo| memo.clean);
        if dangling_tool_calls(&messages[from..], Pending::Keep).is_empty() {
            let block = messages[from..]
                .iter()
                .rposition(|msg| !msg.is_tool())
                .map_or(from, |i| from + i);
            self.threads
                .update(messages, lineage, |memo| memo.clean = block);
            return Decision::Compact;
        }
        match patch_dangling_tool_calls(messages, Pending::Keep) {
            Some(patched) => {
                tracing::warn!(
                    thread_id = %request.runtime.thread_id,
                    patched = patched.len() - request.messages.len(),
                    "summarization: tool calls without results were answered with a synthetic cancelled result"
                );
                Decision::Patched(Box::new(request.with_messages(patched)))
            }
            None => Decision::Compact,
        }
    }
}
