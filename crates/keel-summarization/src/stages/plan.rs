//! Stage 4, plan: where to cut, what to rescue, what the summary call reads.
//!
//! The cut follows the keep policy, never goes below the floor of the recent window
//! (headroom may shrink what is kept, never empty it), never re-sends what the previous
//! summary covers, and only ever moves whole tool bundles ([`crate::plan::Planner`]
//! holds those rules as pure functions).

use keel_core::message::Message;

use crate::cache::CachedSummary;
use crate::middleware::{SUMMARY_TOKENS_ESTIMATE, SummarizationMiddleware};
use crate::plan::{self, Limit, Planner, resolve};
use crate::stages::Call;
use crate::summary_message;

/// A planned cut.
pub(crate) struct Planned {
    /// Messages before `cut` are summarized, except `rescued`.
    pub cut: usize,
    /// Sent verbatim although before the cut.
    pub rescued: Vec<usize>,
    /// Newly evicted messages the summary call reads (the newest, within
    /// `trim_tokens_to_summarize`, starting on a whole bundle).
    pub fold_input: Vec<usize>,
    /// Older newly evicted messages beyond that budget, condensed without a model.
    pub overflow: Vec<usize>,
    /// Tokens of each message of the request.
    pub per_message: Vec<u64>,
    /// Headroom wanted a smaller window than the floor allows.
    pub headroom_unreachable: bool,
}

impl Planned {
    /// True when nothing new leaves the window (the previous summary, if any, stands).
    pub fn evicts_nothing(&self) -> bool {
        self.fold_input.is_empty() && self.overflow.is_empty()
    }
}

impl SummarizationMiddleware {
    /// Plans the cut for `call`, given the previous summary of the thread.
    pub(crate) fn plan_cut(&self, call: &Call<'_>, cached: Option<&CachedSummary>) -> Planned {
        let messages: &[Message] = &call.request.messages;
        let m = &call.measured;
        let counter = call.counter.as_ref();
        let per_message = counter.count_each(messages);
        let planner = Planner::new(messages, &per_message, &self.rescue);
        let exclude = |i: usize| cached.is_some_and(|e| e.covers(i));
        let keep = match resolve(self.config.keep, m.window) {
            Some(k) => k,
            None => {
                self.warn_fraction("keep");
                Limit::Messages(plan::DEFAULT_MESSAGES_TO_KEEP)
            }
        };
        let floor = planner.floor_cut(keep);
        let mut cut = planner.keep_cut(keep).min(floor);
        if let Some(e) = cached {
            // What the summary already covers is never sent verbatim again.
            cut = cut.max(planner.pairs().safe_cut_forward(e.boundary));
        }
        let mut plan = planner.plan_at(cut, &exclude);
        let summary_estimate = cached.map_or(SUMMARY_TOKENS_ESTIMATE, |e| {
            counter.count_message(&summary_message(&e.summary))
        });
        let mut headroom_unreachable = false;
        if let Some(h) = self.config.stickiness_headroom {
            let reached;
            (plan, reached) = planner.apply_headroom(
                plan,
                &m.triggers,
                h,
                m.fixed,
                summary_estimate,
                floor.max(cut),
                &exclude,
            );
            if !reached {
                headroom_unreachable = true;
                let thread = &call.request.runtime.thread_id;
                self.warn_headroom(thread, h, m, &planner, &plan, summary_estimate);
            }
        }
        plan = planner.avoid_task_only(plan, floor, &exclude);
        let evicted: Vec<usize> = plan
            .summarized
            .iter()
            .copied()
            .filter(|&i| !exclude(i))
            .collect();
        let (fold_input, overflow) = self.trim(messages, &per_message, &evicted, &planner);
        Planned {
            cut: plan.cut,
            rescued: plan.rescued,
            fold_input,
            overflow,
            per_message,
            headroom_unreachable,
        }
    }

    /// Splits the evicted messages into what the summary call reads (the newest within
    /// `trim_tokens_to_summarize`, starting on a whole bundle) and the older overflow.
    fn trim(
        &self,
        messages: &[Message],
        per_message: &[u64],
        evicted: &[usize],
        planner: &Planner<'_>,
    ) -> (Vec<usize>, Vec<usize>) {
        let Some(budget) = self.config.trim_tokens_to_summarize else {
            return (evicted.to_vec(), Vec::new());
        };
        let mut used = 0u64;
        let mut start = evicted.len();
        while start > 0 {
            let t = per_message[evicted[start - 1]];
            if used + t > budget && start < evicted.len() {
                break;
            }
            used += t;
            start -= 1;
        }
        // Do not open the transcript with results whose call was trimmed away.
        while start < evicted.len()
            && messages[evicted[start]].is_tool()
            && planner
                .pairs()
                .caller_of(evicted[start])
                .is_none_or(|ai| !evicted[start..].contains(&ai))
        {
            start += 1;
        }
        (evicted[start..].to_vec(), evicted[..start].to_vec())
    }
}
