//! The `compaction` span: one per request the middleware prepares, recording what it
//! did (see `docs/operations.md`, "Tracing"). A child of the agent's `invoke_agent`
//! span, and the parent of the summary model's `chat` spans.

use keel_core::middleware::ModelRequest;
use keel_core::telemetry::{self, Counter, attribute_int as int};
use keel_summary::events::SummarySource;
use tracing::Span;
use tracing::field::Empty;

use crate::middleware::{Action, CompactionReport, Compactor};
use crate::rules::{Limit, resolve};

/// Opens the span of one prepare; `forced` is the token limit of a retry after a
/// context overflow.
pub(crate) fn compaction_span(forced: Option<u64>) -> Span {
    tracing::info_span!(
        target: telemetry::TARGET,
        "compaction",
        otel.kind = "internal",
        keel.compaction.action = Empty,
        keel.compaction.reason = Empty,
        keel.compaction.trigger = Empty,
        keel.compaction.forced_limit = forced.map(int),
        keel.compaction.tokens_before = Empty,
        keel.compaction.tokens_after = Empty,
        keel.compaction.messages_before = Empty,
        keel.compaction.messages_after = Empty,
        keel.compaction.kept_messages = Empty,
        keel.compaction.summarized_messages = Empty,
        keel.compaction.rescued_messages = Empty,
        keel.compaction.cache = Empty,
        keel.compaction.summary_source = Empty,
        keel.compaction.summary_calls = Empty,
        keel.compaction.headroom_reachable = Empty,
        keel.compaction.error = Empty,
    )
}

impl Compactor {
    /// Records `report` on the span, with the reason the middleware compacted (or did
    /// not), and counts a cache hit.
    pub(crate) fn record_compaction(
        &self,
        span: &Span,
        request: &ModelRequest,
        forced: Option<u64>,
        report: &CompactionReport,
    ) {
        if span.is_disabled() {
            return;
        }
        span.record("keel.compaction.action", action_name(report.action));
        span.record("keel.compaction.tokens_before", int(report.tokens_before));
        span.record("keel.compaction.tokens_after", int(report.tokens_after));
        span.record(
            "keel.compaction.messages_before",
            int(report.messages_before as u64),
        );
        span.record(
            "keel.compaction.messages_after",
            int(report.messages_after as u64),
        );
        span.record("keel.compaction.kept_messages", int(report.kept as u64));
        let (reason, trigger) = self.reason(request, forced, report);
        span.record("keel.compaction.reason", reason);
        if let Some(n) = trigger {
            span.record("keel.compaction.trigger", int(n));
        }
        if report.action == Action::PassThrough {
            return;
        }
        span.record(
            "keel.compaction.summarized_messages",
            int(report.summarized as u64),
        );
        span.record(
            "keel.compaction.rescued_messages",
            int(report.rescued as u64),
        );
        span.record(
            "keel.compaction.summary_calls",
            int(u64::from(report.summary_calls)),
        );
        span.record(
            "keel.compaction.headroom_reachable",
            !report.headroom_unreachable,
        );
        if let Some(source) = report.source {
            span.record("keel.compaction.summary_source", source_name(source));
        }
        let hit =
            report.action == Action::CacheReused || report.source == Some(SummarySource::Cache);
        span.record("keel.compaction.cache", if hit { "hit" } else { "miss" });
        if hit {
            telemetry::count(Counter::CacheHits, 1);
        }
        if let Some(error) = &report.error {
            span.record("keel.compaction.error", error.as_str());
        }
    }

    /// Why the middleware compacted: `context_overflow` (the provider refused the
    /// request), the kind of the first trigger the request reached (`tokens` or
    /// `messages`, with its resolved value), `requested` (a compaction asked for), or
    /// `under_trigger` / `disabled`.
    fn reason(
        &self,
        request: &ModelRequest,
        forced: Option<u64>,
        report: &CompactionReport,
    ) -> (&'static str, Option<u64>) {
        if !self.enabled() {
            return ("disabled", None);
        }
        if forced.is_some() {
            return ("context_overflow", forced);
        }
        if report.reason == crate::events::CompactionReason::Requested {
            return ("requested", None);
        }
        let window = request.model.profile().max_input_tokens;
        let reached = self
            .configured_triggers()
            .iter()
            .filter_map(|t| resolve(*t, window))
            .find(|limit| match *limit {
                Limit::Tokens(n) => report.tokens_before >= n,
                Limit::Messages(n) => report.messages_before as u64 >= n,
            });
        match reached {
            Some(Limit::Tokens(n)) => ("tokens", Some(n)),
            Some(Limit::Messages(n)) => ("messages", Some(n)),
            None => ("under_trigger", None),
        }
    }
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::PassThrough => "pass_through",
        Action::NothingToSummarize => "nothing_to_summarize",
        Action::CacheReused => "cache_reused",
        Action::Compacted => "compacted",
        Action::UncompressedAfterFailure => "uncompressed_after_failure",
    }
}

fn source_name(source: SummarySource) -> &'static str {
    match source {
        SummarySource::Model => "model",
        SummarySource::Cache => "cache",
        SummarySource::Extractive => "extractive",
        SummarySource::LastGood => "last_good",
    }
}
