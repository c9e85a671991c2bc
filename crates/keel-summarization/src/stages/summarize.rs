//! Stage 5, summarize: fold the newly evicted messages into the previous summary.
//!
//! The extractive summarizer needs no model. A model summary goes through the shared
//! [`SummaryCaller`](crate::summary_call::SummaryCaller) (deadline, retries, circuit
//! breaker, fallback model) and announces itself with `context_compacting`. When it
//! fails: the last good summary is reused; else, if the request fits the model's
//! window, it is sent uncompressed; else an extractive summary stands in.
//!
//! [`write`](Compactor::write) runs it as one writer per thread across processes sharing
//! the store (a summary another process is writing is waited for and served), then
//! caches the new entry.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use keel_core::message::Message;
use keel_core::middleware::ModelRequest;

use crate::cache::{CachedSummary, prefix_hash};
use crate::events::SummarySource;
use crate::extractive;
use crate::middleware::{Action, Compactor};
use crate::stages::{Call, Outcome, Planned, Step};
use crate::summary_call::{ResponseSchema, SummaryCallError};
use crate::transcript::SummaryPrompt;
use crate::writer::{ModelCall, WriteError, Written};

/// A new summary.
pub(crate) struct Summary {
    /// The text.
    pub text: String,
    /// Who wrote it.
    pub source: SummarySource,
    /// Summary model calls made.
    pub calls: u32,
    /// Why the model's summary was not used, when it was not.
    pub error: Option<String>,
}

impl Compactor {
    /// Writes the summary for `planned`, folding into `cached`'s text; `Break` when the
    /// call ends with a fallback that needs no new summary.
    pub(crate) async fn summarize(
        &self,
        call: &Call<'_>,
        cached: Option<&Arc<CachedSummary>>,
        planned: &Planned,
    ) -> Step<Summary> {
        let messages: &[Message] = &call.request.messages;
        let existing = self.existing_with_overflow(messages, cached, planned);
        let fold: Vec<Message> = planned
            .fold_input
            .iter()
            .map(|&i| messages[i].clone())
            .collect();
        let extract =
            || extractive::summarize(existing.as_deref(), &fold, &self.extractive_options());
        let request = &*call.request;
        let thread = &request.runtime.thread_id;
        let caller = self.caller();
        // Announced unless speculative, or the circuit is open (no call is then made).
        let announce = (!call.background && caller.breaker().peek(thread).is_ok())
            .then(|| (self.compacting_message(), &request.runtime.writer));
        // Structured output where the provider takes it: a small local model's answer
        // is then one JSON string, unwrapped back to the summary text.
        let schema = ResponseSchema::summary_text();
        let model_call = ModelCall {
            max_output_tokens: caller.options().max_output_tokens,
            schema: Some(&schema),
            announce,
            ..ModelCall::new(caller, thread, &request.model)
        };
        let prompt = || {
            SummaryPrompt::new(
                self.prompt(),
                existing.as_deref(),
                &fold,
                &self.transcript_options(),
            )
        };
        let err = match self.summarizer().write(model_call, prompt, &extract).await {
            Ok(Written::Extracted(text)) => {
                return ControlFlow::Continue(Summary {
                    text,
                    source: SummarySource::Extractive,
                    calls: 0,
                    error: None,
                });
            }
            Ok(Written::Model(out)) => {
                return ControlFlow::Continue(Summary {
                    text: out.text,
                    source: SummarySource::Model,
                    calls: out.attempts,
                    error: None,
                });
            }
            Err(WriteError::Prompt(e)) => {
                return ControlFlow::Break(Outcome::untouched(
                    Action::PassThrough,
                    Some(e.to_string()),
                ));
            }
            Err(WriteError::Call(err)) => err,
        };
        self.after_failure(call, cached, &err, extract)
    }

    /// The previous summary, followed by the overflow (evicted messages beyond the trim
    /// budget) condensed without a model, so nothing (least of all the previous
    /// summary) silently drops out; what is beyond even that is said, not hidden.
    #[inline]
    fn existing_with_overflow(
        &self,
        messages: &[Message],
        cached: Option<&Arc<CachedSummary>>,
        planned: &Planned,
    ) -> Option<String> {
        let existing = cached.map(|e| e.summary.clone());
        if planned.overflow.is_empty() && planned.omitted == 0 {
            return existing;
        }
        let older: Vec<&Message> = planned.overflow.iter().map(|&i| &messages[i]).collect();
        let mut notes = extractive::summarize_refs(None, &older, &self.extractive_options());
        if planned.omitted > 0 {
            notes = format!(
                "{notes}\n- ({} earlier messages were compacted without being read into this summary.)",
                planned.omitted
            );
        }
        Some(match existing {
            Some(p) => format!("{p}\n{notes}"),
            None => notes,
        })
    }

    /// A failed summary call: a background one leaves the request alone; otherwise
    /// the last good summary, else the request untouched while it still fits the
    /// window, else the extractive summary.
    fn after_failure(
        &self,
        call: &Call<'_>,
        cached: Option<&Arc<CachedSummary>>,
        err: &SummaryCallError,
        extract: impl FnOnce() -> String,
    ) -> Step<Summary> {
        let thread = &call.request.runtime.thread_id;
        let calls = match err {
            SummaryCallError::Failed { attempts, .. } => *attempts,
            SummaryCallError::CircuitOpen { .. } => 0,
        };
        let reason = err.to_string();
        if call.background {
            tracing::warn!(thread_id = %thread, error = %reason, "speculative summary failed; the crossing call will summarize");
            return ControlFlow::Break(Outcome::untouched(
                Action::UncompressedAfterFailure,
                Some(reason),
            ));
        }
        tracing::warn!(thread_id = %thread, error = %reason, "summary failed; using the fallback");
        if let Some(e) = cached
            && let Some(mut a) = self.serve(call, e, SummarySource::LastGood, Some(reason.clone()))
        {
            a.report.summary_calls = calls;
            return ControlFlow::Break(Outcome::Summarized(a));
        }
        let m = &call.measured;
        if m.window.is_none_or(|w| m.total < w) {
            return ControlFlow::Break(Outcome::Untouched {
                action: Action::UncompressedAfterFailure,
                error: Some(reason),
                summary_calls: calls,
            });
        }
        ControlFlow::Continue(Summary {
            text: extract(),
            source: SummarySource::Extractive,
            calls,
            error: Some(reason),
        })
    }

    /// Stage 5 with its bookkeeping: the summary of `planned`, written by one writer
    /// per thread, cached, and recorded as matching the request's list.
    pub(crate) async fn write(
        &self,
        call: &Call<'_>,
        cached: Option<&Arc<CachedSummary>>,
        planned: &Planned,
    ) -> Step<(Arc<CachedSummary>, Summary)> {
        let leased = self.one_writer(call).await?;
        let written = match self.summarize(call, cached, planned).await {
            ControlFlow::Continue(written) => written,
            ControlFlow::Break(outcome) => {
                self.release_writer(call, leased).await;
                return ControlFlow::Break(outcome);
            }
        };
        let request = &*call.request;
        let entry = self.new_entry(request, cached.map(|e| &**e), planned, written.text.clone());
        let entry = self.cache().put(&call.key, entry).await;
        self.release_writer(call, leased).await;
        self.memos()
            .set_verified(&request.messages, request.lineage(), &entry);
        ControlFlow::Continue((entry, written))
    }

    /// Before a model summary, with a store shared by other processes: takes the
    /// thread's lease, or, while another process holds it (writing the same summary,
    /// often ahead of time), waits for that summary and serves it (`Break`). Gives up
    /// waiting after `summary_deadline_seconds` and writes its own. `true`: the lease
    /// is held and must be given back.
    async fn one_writer(&self, call: &Call<'_>) -> Step<bool> {
        if self.summarizer().is_extractive() || !self.cache().has_store() {
            return ControlFlow::Continue(false);
        }
        let holder = &self.precompute().holder;
        let deadline = Duration::from_secs_f64(self.summary_deadline_secs());
        let ttl = deadline + Duration::from_secs(10);
        let until = tokio::time::Instant::now() + deadline;
        loop {
            match self.cache().try_lease(&call.key, holder, ttl).await {
                Some(false) => {}
                Some(true) => return ControlFlow::Continue(true),
                None => return ControlFlow::Continue(false),
            }
            if tokio::time::Instant::now() >= until {
                return ControlFlow::Continue(false);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            // Read the store again: the other process's summary is not in this one's.
            self.cache().invalidate(&call.key);
            self.lookup(call, None).await?;
        }
    }

    async fn release_writer(&self, call: &Call<'_>, leased: bool) {
        if leased {
            self.cache()
                .release_lease(&call.key, &self.precompute().holder)
                .await;
        }
    }

    /// The cache entry for a summary `text` of `planned`'s cut.
    pub(crate) fn new_entry(
        &self,
        request: &ModelRequest,
        cached: Option<&CachedSummary>,
        planned: &Planned,
        text: String,
    ) -> CachedSummary {
        match cached {
            // The previous entry matched this list, so the new one extends its hash.
            Some(previous) => CachedSummary::extending(
                previous,
                text,
                &request.messages,
                planned.cut,
                planned.rescued.clone(),
            ),
            // The kept planning index already holds the prefix hash; else hash it here.
            None => {
                let cut = planned.cut.min(request.messages.len());
                let hash = planned
                    .index
                    .as_ref()
                    .and_then(|ix| ix.prefix_hash(cut))
                    .unwrap_or_else(|| prefix_hash(&request.messages[..cut]));
                CachedSummary::with_prefix_hash(text, cut, planned.rescued.clone(), hash)
            }
        }
    }
}
