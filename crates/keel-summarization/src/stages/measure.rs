//! Stage 1, measure: what the request costs, and which triggers apply to it.

use std::sync::atomic::{AtomicBool, Ordering};

use keel_core::middleware::ModelRequest;
use keel_core::tokens::TokenCounter;

use crate::events::CompactionReason;
use crate::middleware::Compactor;
use crate::rules::{Limit, resolve};

/// Everything counted about one request.
pub(crate) struct Measured {
    /// The system prompt and tool schemas: sent whatever compaction does.
    pub fixed: u64,
    /// The whole request.
    pub total: u64,
    /// The triggers, resolved against the usable window, and none above it.
    pub triggers: Vec<Limit>,
    /// What a request to the model may carry, when its window is known: the window less
    /// the request's `max_tokens` or the model's output limit
    /// ([`ModelProfile::usable_input_tokens`](keel_core::model::ModelProfile::usable_input_tokens)).
    pub window: Option<u64>,
    /// Why this call compacts, if it does: a trigger, or the provider's overflow error.
    pub reason: CompactionReason,
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
        let window = request
            .model
            .profile()
            .usable_input_tokens(request.settings.max_tokens);
        Measured {
            fixed,
            total,
            triggers: self.resolve_triggers(window),
            window,
            reason: CompactionReason::Trigger,
        }
    }

    /// The configured triggers against the usable window. A token trigger above the
    /// window is lowered to it (once-per-process warning): the provider would reject
    /// the request before the trigger fired.
    pub(crate) fn resolve_triggers(&self, window: Option<u64>) -> Vec<Limit> {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let configured = self.configured_triggers();
        let mut out = Vec::with_capacity(configured.len());
        for t in configured {
            match resolve(*t, window) {
                Some(Limit::Tokens(n)) if window.is_some_and(|w| n > w) => {
                    let w = window.unwrap_or(n);
                    if !WARNED.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            trigger_tokens = n,
                            usable_tokens = w,
                            "summarization.trigger: {n} tokens is above what the model accepts ({w} tokens: its window less the answer's room, max_tokens or the model's output limit); compacting at {w} instead"
                        );
                    }
                    out.push(Limit::Tokens(w));
                }
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
        let headroom = self.headroom().unwrap_or(1.0);
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
