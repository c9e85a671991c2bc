//! Stage 2, decide: whether this call compacts at all.
//!
//! Threshold first: under every trigger the request passes untouched, with no cache
//! lookup and no summary. An interrupted run's unanswered calls are answered with a
//! synthetic "cancelled" result before anything is planned, so the plan never has to
//! cut around them (and never drops the recent window to get past one).

use keel_core::dangling::{Pending, dangling_tool_calls, patch_dangling_tool_calls};
use keel_core::middleware::ModelRequest;

use crate::events::CompactionReason;
use crate::middleware::SummarizationMiddleware;
use crate::plan::{self, Limit};
use crate::stages::Measured;

/// What the call does next.
pub(crate) enum Decision {
    /// Disabled, empty, or under every trigger: send the request as it is.
    PassThrough,
    /// Over a trigger (or forced after a context overflow): go on to reuse and plan.
    Compact,
    /// Tool calls without results were answered; decide again on this request.
    Patched(Box<ModelRequest>),
}

impl SummarizationMiddleware {
    /// Decides for `request`. `forced`: a token limit the request must get under (the
    /// retry after a provider's context-overflow error), added to the triggers.
    pub(crate) fn decide(
        &self,
        request: &ModelRequest,
        m: &mut Measured,
        forced: Option<u64>,
    ) -> Decision {
        if !self.config.enabled || request.messages.is_empty() {
            return Decision::PassThrough;
        }
        if let Some(f) = forced {
            m.triggers.push(Limit::Tokens(f.max(1)));
            m.reason = CompactionReason::Overflow;
        } else if !plan::triggered(&m.triggers, m.total, request.messages.len()) {
            return Decision::PassThrough;
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
