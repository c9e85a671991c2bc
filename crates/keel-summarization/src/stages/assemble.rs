//! Stage 6, assemble: the request sent and its report.
//!
//! `[summary, *rescued, *recent]`, checked once more for the pair invariant, and never
//! larger than what fired (a compaction that would not shrink the request sends the
//! original). `context_compacted` is emitted here, and only here, for every call that
//! sends a summary.

use keel_core::message::Message;
use keel_core::middleware::ModelRequest;
use keel_core::pairs::check_pairs;

use crate::cache::CachedSummary;
use crate::events::{ContextCompacted, SummarySource};
use crate::middleware::{Action, CompactionReport, Compactor, Prepared};
use crate::plan::Limit;
use crate::stages::summarize::Summary;
use crate::stages::{Call, Measured};
use crate::summary_message;

impl Compactor {
    /// The request as it came, with a report saying why.
    pub(crate) fn untouched(
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
                kept_ids: if self.report_ids {
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

    /// The request for a summary just written and cached as `entry`.
    pub(crate) fn finish(
        &self,
        call: &Call<'_>,
        entry: &CachedSummary,
        written: Summary,
        headroom_unreachable: bool,
    ) -> Prepared {
        let (messages, counter) = (&call.request.messages, call.counter.as_ref());
        match self.assemble(
            call,
            &|i| counter.count_message(&messages[i]),
            entry,
            written.source,
            written.calls,
            written.error,
        ) {
            Ok(mut p) => {
                p.report.headroom_unreachable = headroom_unreachable;
                self.emit_compacted(call.request, &p.report);
                p
            }
            Err(why) => self.untouched(
                call.request,
                &call.measured,
                Action::NothingToSummarize,
                Some(why.into()),
            ),
        }
    }

    /// Builds `[summary, *uncovered]` for `entry`. Fails (and the caller sends the
    /// original) when the result would break the pair invariant although the input
    /// satisfies it, or would not be smaller than the original: compaction never makes a
    /// request grow.
    pub(crate) fn assemble(
        &self,
        call: &Call<'_>,
        tokens_of: &dyn Fn(usize) -> u64,
        entry: &CachedSummary,
        source: SummarySource,
        summary_calls: u32,
        error: Option<String>,
    ) -> Result<Prepared, &'static str> {
        let request = call.request;
        let m = &call.measured;
        let messages: &[Message] = &request.messages;
        let summary = summary_message(&entry.summary);
        let mut out = Vec::with_capacity(messages.len() + 1 - entry.boundary.min(messages.len()));
        let mut tokens = m.fixed + call.counter.count_message(&summary);
        out.push(summary);
        let mut summarized_ids = Vec::new();
        let mut rescued_ids = Vec::new();
        let mut kept_ids = Vec::new();
        let ids = self.report_ids;
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
        if let Err(v) = check_pairs(&out[1..])
            && check_pairs(messages).is_ok()
        {
            tracing::error!(violation = %v, "compaction would send an orphan; sending the original request");
            return Err("the compacted request failed the pair check");
        }
        // Compaction must shrink what fired: never more tokens when a token trigger was
        // reached, never as many messages when a message trigger was.
        let grows = m.triggers.iter().any(|t| match *t {
            Limit::Tokens(n) => m.total >= n && tokens >= m.total,
            Limit::Messages(n) => messages.len() as u64 >= n && out.len() >= messages.len(),
        });
        if grows {
            return Err("the compacted request would not be smaller than the original");
        }
        let action = if source == SummarySource::Cache {
            Action::CacheReused
        } else {
            Action::Compacted
        };
        let messages_after = out.len();
        Ok(Prepared {
            request: request.with_messages(out),
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

    /// `context_compacted`, for a report that sends a summary.
    pub(crate) fn emit_compacted(&self, request: &ModelRequest, report: &CompactionReport) {
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
