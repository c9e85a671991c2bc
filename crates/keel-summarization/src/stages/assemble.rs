//! Stage 6, assemble: the request sent and its report.
//!
//! [`assemble`](Compactor::assemble) lays out `[summary, *rescued, *recent]`, checks it
//! once more for the pair invariant, and refuses what would be no smaller than what
//! fired (the original is sent instead); the stages use it to ask whether a summary
//! serves. [`finish`](Compactor::finish), the pipeline's one exit, turns a call's
//! [`Outcome`] into the request sent and emits `context_compacted` for every call that
//! sends a summary: nowhere else.

use keel_core::message::Message;
use keel_core::middleware::ModelRequest;
use keel_core::pairs::check_pairs;

use crate::cache::CachedSummary;
use crate::events::{ContextCompacted, SummarySource};
use crate::middleware::{Action, CompactionReport, Compactor, Prepared};
use crate::rules;
use crate::stages::{Assembled, Call, Measured, Outcome, Summary};
use crate::summary_message;

impl Compactor {
    /// The request as it came, with a report saying why.
    fn untouched(
        &self,
        request: &ModelRequest,
        m: &Measured,
        action: Action,
        error: Option<String>,
    ) -> Prepared {
        let messages = &request.messages;
        Prepared {
            request: request.clone(),
            report: CompactionReport {
                action,
                reason: m.reason,
                tokens_before: m.total,
                tokens_after: m.total,
                messages_before: messages.len(),
                messages_after: messages.len(),
                source: None,
                summarized: 0,
                rescued: 0,
                kept: messages.len(),
                summarized_ids: Vec::new(),
                rescued_ids: Vec::new(),
                kept_ids: if self.report_ids() {
                    messages.iter().map(|m| m.id().to_owned()).collect()
                } else {
                    Vec::new()
                },
                summary_calls: 0,
                error,
                summary: None,
                headroom_unreachable: false,
                precomputed: false,
            },
        }
    }

    /// The pipeline's one exit: the request sent for `outcome`, and its report.
    /// Emits `context_compacted` when a summary is sent.
    pub(crate) fn finish(&self, call: &Call<'_>, outcome: Outcome) -> Prepared {
        match outcome {
            Outcome::Untouched {
                action,
                error,
                summary_calls,
            } => {
                let mut p = self.untouched(&call.request, &call.measured, action, error);
                p.report.summary_calls = summary_calls;
                p
            }
            Outcome::Summarized(Assembled { messages, report }) => {
                self.emit_compacted(&call.request, &report);
                Prepared {
                    request: call.request.with_messages(messages),
                    report,
                }
            }
        }
    }

    /// The last stage, for a summary just written and cached as `entry`: sent with it,
    /// or the original when assembling refuses.
    pub(crate) fn assembled(
        &self,
        call: &Call<'_>,
        entry: &CachedSummary,
        written: Summary,
        headroom_unreachable: bool,
    ) -> Outcome {
        match self.assemble(call, entry, written.source, written.calls, written.error) {
            Ok(mut a) => {
                a.report.headroom_unreachable = headroom_unreachable;
                Outcome::Summarized(a)
            }
            Err(why) => Outcome::untouched(Action::NothingToSummarize, Some(why.into())),
        }
    }

    /// Builds `[summary, *uncovered]` for `entry`. Fails (and the caller sends the
    /// original) when the result would break the pair invariant although the input
    /// satisfies it, or would not be smaller than the original: compaction never makes a
    /// request grow.
    pub(crate) fn assemble(
        &self,
        call: &Call<'_>,
        entry: &CachedSummary,
        source: SummarySource,
        summary_calls: u32,
        error: Option<String>,
    ) -> Result<Assembled, &'static str> {
        let m = &call.measured;
        let messages: &[Message] = &call.request.messages;
        let Built {
            out,
            tokens,
            summarized,
            rescued,
            summarized_ids,
            rescued_ids,
            kept_ids,
        } = self.build_list(call, entry);
        if let Err(v) = check_pairs(&out[1..])
            && check_pairs(messages).is_ok()
        {
            tracing::error!(violation = %v, "compaction would send an orphan; sending the original request");
            return Err("the compacted request failed the pair check");
        }
        let sent = (m.total, messages.len());
        if rules::grows(&m.triggers, sent, (tokens, out.len())) {
            return Err("the compacted request would not be smaller than the original");
        }
        let action = if source == SummarySource::Cache {
            Action::CacheReused
        } else {
            Action::Compacted
        };
        let messages_after = out.len();
        Ok(Assembled {
            messages: out,
            report: CompactionReport {
                action,
                reason: m.reason,
                tokens_before: m.total,
                tokens_after: tokens,
                messages_before: messages.len(),
                messages_after,
                source: Some(source),
                summarized,
                rescued,
                kept: messages.len() - entry.boundary.min(messages.len()),
                summarized_ids,
                rescued_ids,
                kept_ids,
                summary_calls,
                error,
                summary: Some(entry.summary.clone()),
                headroom_unreachable: false,
                precomputed: entry.precomputed,
            },
        })
    }

    /// `[summary, *holes, *messages after the boundary]`, its tokens (with the fixed
    /// part of the request), and which messages it summarizes, rescues and keeps (their
    /// ids only when the reports carry ids).
    #[inline]
    fn build_list(&self, call: &Call<'_>, entry: &CachedSummary) -> Built {
        let m = &call.measured;
        let messages: &[Message] = &call.request.messages;
        // Counts are cached per message: only what is sent is counted.
        let tokens_of = |i: usize| call.counter.count_message(&messages[i]);
        let summary = summary_message(&entry.summary);
        let mut out = Vec::with_capacity(messages.len() + 1 - entry.boundary.min(messages.len()));
        let mut tokens = m.fixed + call.counter.count_message(&summary);
        out.push(summary);
        let mut summarized_ids = Vec::new();
        let mut rescued_ids = Vec::new();
        let mut kept_ids = Vec::new();
        let ids = self.report_ids();
        // Only the holes (rescued messages) before the boundary are visited; the covered
        // prefix is skipped in bulk.
        let boundary = entry.boundary.min(messages.len());
        let holes: Vec<usize> = entry
            .holes
            .iter()
            .copied()
            .filter(|&h| h < boundary)
            .collect();
        let rescued = holes.len();
        let summarized = boundary - rescued;
        for &h in &holes {
            tokens += tokens_of(h);
            if ids {
                rescued_ids.push(messages[h].id().to_owned());
            }
            out.push(messages[h].clone());
        }
        if ids {
            summarized_ids.extend(
                (0..boundary)
                    .filter(|&i| entry.covers(i))
                    .map(|i| messages[i].id().to_owned()),
            );
        }
        for (i, msg) in messages.iter().enumerate().skip(entry.boundary) {
            tokens += tokens_of(i);
            if ids {
                kept_ids.push(msg.id().to_owned());
            }
            out.push(msg.clone());
        }
        Built {
            out,
            tokens,
            summarized,
            rescued,
            summarized_ids,
            rescued_ids,
            kept_ids,
        }
    }

    /// `context_compacted`, for a report that sends a summary.
    fn emit_compacted(&self, request: &ModelRequest, report: &CompactionReport) {
        let Some(source) = report.source else { return };
        ContextCompacted {
            kind: crate::events::EVENT_COMPACTED.to_owned(),
            reason: report.reason,
            tokens_before: report.tokens_before,
            tokens_after: report.tokens_after,
            cache_hit: source == SummarySource::Cache,
            source,
            summarized: report.summarized,
            kept: report.kept,
            rescued: report.rescued,
            error: report.error.clone(),
            headroom_unreachable: report.headroom_unreachable,
            precomputed: report.precomputed,
        }
        .emit(&request.runtime.writer);
    }
}

/// A compacted message list and what it is made of.
struct Built {
    out: Vec<Message>,
    tokens: u64,
    summarized: usize,
    rescued: usize,
    summarized_ids: Vec<String>,
    rescued_ids: Vec<String>,
    kept_ids: Vec<String>,
}
