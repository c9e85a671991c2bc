//! Stage 4, plan: where to cut, what to rescue, what the summary call reads.
//!
//! The cut follows the keep policy, never goes below the floor of the recent window
//! (headroom may shrink what is kept, never empty it), never re-sends what the previous
//! summary covers, and only ever moves whole tool bundles ([`crate::rules::Planner`]
//! holds those rules as pure functions). When nothing new leaves the window the call
//! is decided here: the previous summary, if any, is sent as it is.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::sync::Arc;

use keel_core::message::Message;
use keel_core::middleware::ModelRequest;

use crate::cache::CachedSummary;
use crate::events::SummarySource;
use crate::middleware::Action;
use crate::middleware::{Compactor, SUMMARY_TOKENS_ESTIMATE};
use crate::rules::{self, Limit, PlanIndex, Planner, resolve};
use crate::stages::{Call, Measured, Outcome, Step};
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
    /// Older newly evicted messages beyond that budget, condensed without a model: the
    /// task (the first user messages among them) and the newest, within
    /// [`OVERFLOW_CONDENSE_FACTOR`](rules::OVERFLOW_CONDENSE_FACTOR) x the trim budget.
    pub overflow: Vec<usize>,
    /// Evicted messages beyond even that (only on the first compaction of a thread that
    /// is already long): counted in the summary, not read.
    pub omitted: usize,
    /// Headroom wanted a smaller window than the floor allows.
    pub headroom_unreachable: bool,
    /// The planning index of the whole request, when it was kept for the list.
    pub index: Option<Arc<PlanIndex>>,
}

impl Planned {
    /// True when nothing new leaves the window (the previous summary, if any, stands).
    pub fn evicts_nothing(&self) -> bool {
        self.fold_input.is_empty() && self.overflow.is_empty() && self.omitted == 0
    }
}

impl Compactor {
    /// Plans the cut for `call`, given the previous summary of the thread.
    ///
    /// With a previous summary, only what it does not cover can move: its holes
    /// (rescued messages) and the messages after its boundary. Planning then runs on
    /// that view alone, so a summary on a long thread costs what is recent, not the
    /// whole thread (the covered prefix used to be indexed, counted and listed again
    /// on every summary call).
    pub(crate) fn plan_cut(&self, call: &Call<'_>, cached: Option<&CachedSummary>) -> Planned {
        let messages: &[Message] = &call.request.messages;
        match cached.and_then(|e| self.uncovered_view(messages, e)) {
            Some((view, map)) => {
                let covered = cached.map_or(0, |e| {
                    e.boundary - map.iter().take_while(|&&i| i < e.boundary).count()
                });
                let planned = self.plan_on(call, &view, None, covered > 0, cached);
                let real = |v: &usize| map[*v];
                let tail_start = map
                    .iter()
                    .position(|&i| i >= cached.map_or(0, |e| e.boundary))
                    .unwrap_or(map.len());
                let cut = if planned.cut >= tail_start {
                    map.get(planned.cut).copied().unwrap_or(messages.len())
                } else {
                    // Never before the previous boundary (the plan clamps it there).
                    cached.map_or(0, |e| e.boundary)
                };
                Planned {
                    cut,
                    rescued: planned.rescued.iter().map(real).collect(),
                    fold_input: planned.fold_input.iter().map(real).collect(),
                    overflow: planned.overflow.iter().map(real).collect(),
                    omitted: planned.omitted,
                    headroom_unreachable: planned.headroom_unreachable,
                    index: None,
                }
            }
            None => self.plan_on(call, messages, cached, false, cached),
        }
    }

    /// The messages `entry` does not cover (its holes, then everything from its
    /// boundary) with their indices in `messages`, or `None` when the view would not
    /// plan exactly as the whole list does: the list starts with a result whose call
    /// the summary covers, or the latest user message is not preserved by rescue.
    fn uncovered_view(
        &self,
        messages: &[Message],
        entry: &CachedSummary,
    ) -> Option<(Vec<Message>, Vec<usize>)> {
        let boundary = entry.boundary;
        if boundary == 0
            || boundary > messages.len()
            || !self.rescue().latest_user_message
            || messages.get(boundary).is_some_and(Message::is_tool)
        {
            return None;
        }
        let map: Vec<usize> = entry
            .holes
            .iter()
            .copied()
            .filter(|&h| h < boundary)
            .chain(boundary..messages.len())
            .collect();
        let view = map.iter().map(|&i| messages[i].clone()).collect();
        Some((view, map))
    }

    /// Plans on `messages` (the whole request, or the uncovered view). `exclude_by`:
    /// the summary whose covered messages may not move (whole-list planning only).
    /// `prefix_covered`: the view follows a covered prefix, so the summarized side is
    /// never "only the user's task". `cached`: the previous summary (its size, and its
    /// boundary in whole-list planning).
    fn plan_on(
        &self,
        call: &Call<'_>,
        messages: &[Message],
        exclude_by: Option<&CachedSummary>,
        prefix_covered: bool,
        cached: Option<&CachedSummary>,
    ) -> Planned {
        let m = &call.measured;
        let counter = call.counter.as_ref();
        let per_message = token_counts(call, messages, exclude_by.is_some() || cached.is_none());
        // The request's own list (not a view of it) has its index kept between calls.
        let own = std::ptr::eq(messages, call.request.messages.as_slice());
        let kept = match call.request.lineage() {
            Some(lineage) if own => {
                Some(self.plan_indexes().index(messages, lineage, self.rescue()))
            }
            _ => None,
        };
        let planner = match kept.as_deref() {
            Some(ix) => {
                Planner::with_index(messages, &per_message, self.rescue(), Cow::Borrowed(ix))
            }
            None => Planner::new(messages, &per_message, self.rescue()),
        };
        let exclude = |i: usize| exclude_by.is_some_and(|e| e.covers(i));
        let keep = self.keep_limit(call);
        let floor = planner.floor_cut(keep);
        let mut cut = planner.keep_cut(keep).min(floor);
        // What the summary already covers is never sent verbatim again.
        if let Some(b) = covered_boundary(exclude_by, cached) {
            cut = cut.max(planner.pairs().safe_cut_forward(b));
        }
        let mut plan = planner.plan_at(cut, &exclude);
        let summary_estimate = cached.map_or(SUMMARY_TOKENS_ESTIMATE, |e| {
            counter.count_message(&summary_message(&e.summary))
        });
        let mut headroom_unreachable = false;
        if let Some(h) = self.headroom() {
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
        if !prefix_covered {
            plan = planner.avoid_task_only(plan, floor, &exclude);
        }
        // Nothing is excluded: everything summarized is evicted (no copy of a list as
        // long as the thread).
        let evicted: Vec<usize> = match exclude_by {
            None => std::mem::take(&mut plan.summarized),
            Some(_) => plan.summarized.drain(..).filter(|&i| !exclude(i)).collect(),
        };
        let budget = self.trim_budget();
        let (fold_input, overflow) = rules::trim(budget, messages, &per_message, evicted, &planner);
        let (overflow, omitted) = rules::bound_overflow(budget, messages, &per_message, overflow);
        Planned {
            cut: plan.cut,
            rescued: plan.rescued,
            fold_input,
            overflow,
            omitted,
            headroom_unreachable,
            index: kept,
        }
    }

    /// How much recent history to keep: the call's own limit, else the policy resolved
    /// for the window (a fraction without a window falls back to the default, warned).
    #[inline]
    fn keep_limit(&self, call: &Call<'_>) -> Limit {
        match call
            .keep
            .or_else(|| resolve(self.keep_policy(), call.measured.window))
        {
            Some(k) => k,
            None => {
                self.warn_fraction("keep");
                Limit::Messages(rules::DEFAULT_MESSAGES_TO_KEEP)
            }
        }
    }

    /// When nothing new leaves the window, the call is decided: the previous summary, if
    /// any, is sent as it is.
    pub(crate) fn keep_previous(
        &self,
        call: &Call<'_>,
        cached: Option<&CachedSummary>,
        planned: &Planned,
    ) -> Step {
        if !planned.evicts_nothing() {
            return ControlFlow::Continue(());
        }
        ControlFlow::Break(
            match cached.and_then(|e| self.serve(call, e, SummarySource::Cache, None)) {
                Some(mut a) => {
                    a.report.headroom_unreachable = planned.headroom_unreachable;
                    Outcome::Summarized(a)
                }
                None => Outcome::untouched(Action::NothingToSummarize, None),
            },
        )
    }

    /// On a call that passes through: once the request is within half of a trigger,
    /// keep its list's planning index up to date (the new messages only), so that the
    /// compaction to come plans without reading the whole thread again. Shorter threads
    /// keep no index: most never compact.
    pub(crate) fn keep_plan_index(&self, request: &ModelRequest, m: &Measured) {
        let Some(lineage) = request.lineage() else {
            return;
        };
        if !self.enabled() || request.messages.is_empty() {
            return;
        }
        let len = request.messages.len() as u64;
        let near = m.triggers.iter().any(|t| match *t {
            Limit::Tokens(n) => m.total >= n / 2,
            Limit::Messages(n) => len >= n / 2,
        });
        if near {
            self.plan_indexes()
                .index(&request.messages, lineage, self.rescue());
        }
    }
}

/// The tokens of each message: counted through the lineage's per-message cache when
/// `whole_list` (planning on the request's own list), one by one on a view.
#[inline]
fn token_counts(call: &Call<'_>, messages: &[Message], whole_list: bool) -> Vec<u64> {
    let counter = call.counter.as_ref();
    if whole_list {
        counter.count_each_in(messages, call.request.lineage())
    } else {
        messages
            .iter()
            .map(|msg| counter.count_message(msg))
            .collect()
    }
}

/// Where what the summary already covers ends (it is never sent verbatim again): the
/// excluded summary's boundary, or the previous summary's, counted on the view.
#[inline]
fn covered_boundary(
    exclude_by: Option<&CachedSummary>,
    cached: Option<&CachedSummary>,
) -> Option<usize> {
    match (exclude_by, cached) {
        (Some(e), _) => Some(e.boundary),
        (None, Some(e)) => Some(e.holes.iter().filter(|&&h| h < e.boundary).count()),
        (None, None) => None,
    }
}
