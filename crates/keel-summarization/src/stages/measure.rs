//! Stage 1, measure: what the request costs, and which triggers apply to it.

use std::sync::atomic::{AtomicBool, Ordering};

use keel_core::middleware::ModelRequest;
use keel_core::tokens::TokenCounter;

use crate::middleware::Compactor;
use crate::plan::{Limit, resolve};

/// Everything counted about one request.
pub(crate) struct Measured {
    /// The system prompt and tool schemas: sent whatever compaction does.
    pub fixed: u64,
    /// The whole request.
    pub total: u64,
    /// The triggers, resolved against the model's context window.
    pub triggers: Vec<Limit>,
    /// The model's context window, when known.
    pub window: Option<u64>,
}

impl Compactor {
    /// Counts the request: system prompt, tool schemas and every message.
    pub(crate) fn measure(&self, request: &ModelRequest, counter: &dyn TokenCounter) -> Measured {
        let fixed = request
            .system
            .as_ref()
            .map_or(0, |s| counter.count_message(s))
            + counter.count_tools(&request.tools);
        let total = fixed + counter.count_messages_in(&request.messages, request.lineage());
        let window = request.model.profile().max_input_tokens;
        Measured {
            fixed,
            total,
            triggers: self.resolve_triggers(window),
            window,
        }
    }

    pub(crate) fn resolve_triggers(&self, window: Option<u64>) -> Vec<Limit> {
        let mut out = Vec::with_capacity(self.config.trigger.len());
        for t in &self.config.trigger {
            match resolve(*t, window) {
                Some(l) => out.push(l),
                None => self.warn_fraction("trigger"),
            }
        }
        out
    }

    /// Once per process: a token trigger that the fixed part of the request (system
    /// prompt and tool schemas) alone nearly fills can never be met by compaction.
    pub(crate) fn warn_fixed_cost(&self, m: &Measured) {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let headroom = self.config.stickiness_headroom.unwrap_or(1.0);
        let too_small = m.triggers.iter().find_map(|t| match *t {
            Limit::Tokens(n) if m.fixed as f64 >= headroom * n as f64 => Some(n),
            _ => None,
        });
        if let Some(n) = too_small
            && !WARNED.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                fixed_tokens = m.fixed,
                trigger_tokens = n,
                "summarization.trigger: the system prompt and tool schemas alone cost {} tokens, over {headroom} x the {n}-token trigger; compaction cannot bring a request below it, so nearly every call will compact. Raise the trigger well above {:.0} tokens.",
                m.fixed,
                m.fixed as f64 / headroom,
            );
        }
    }
}
