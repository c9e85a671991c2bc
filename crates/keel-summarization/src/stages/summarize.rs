//! Stage 5, summarize: fold the newly evicted messages into the previous summary.
//!
//! The extractive summarizer needs no model. A model summary goes through the shared
//! [`SummaryCaller`](crate::summary_call::SummaryCaller) (deadline, retries, circuit
//! breaker, fallback model) and announces itself with `context_compacting`. When it
//! fails: the last good summary is reused; else, if the request fits the model's
//! window, it is sent uncompressed; else an extractive summary stands in.

use std::ops::ControlFlow;
use std::sync::Arc;

use keel_core::message::Message;

use crate::cache::CachedSummary;
use crate::events::{ContextCompacting, SummarySource};
use crate::extractive;
use crate::middleware::{Action, Compactor, Summarizer};
use crate::stages::{Call, Outcome, Planned, Step};
use crate::summary_call::{ResponseSchema, SummaryCallError, SummaryModels};
use crate::transcript::SummaryPrompt;

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
        let mut existing = cached.map(|e| e.summary.clone());
        if !planned.overflow.is_empty() || planned.omitted > 0 {
            // Older evicted messages beyond the trim budget are condensed without a
            // model, so nothing (least of all the previous summary) silently drops out;
            // what is beyond even that is said, not hidden.
            let older: Vec<&Message> = planned.overflow.iter().map(|&i| &messages[i]).collect();
            let mut notes = extractive::summarize_refs(None, &older, &self.extractive_options());
            if planned.omitted > 0 {
                notes = format!(
                    "{notes}\n- ({} earlier messages were compacted without being read into this summary.)",
                    planned.omitted
                );
            }
            existing = Some(match existing {
                Some(p) => format!("{p}\n{notes}"),
                None => notes,
            });
        }
        let fold: Vec<Message> = planned
            .fold_input
            .iter()
            .map(|&i| messages[i].clone())
            .collect();
        let extract =
            || extractive::summarize(existing.as_deref(), &fold, &self.extractive_options());

        let summary_model = match self.summarizer() {
            Summarizer::Extractive => {
                return ControlFlow::Continue(Summary {
                    text: extract(),
                    source: SummarySource::Extractive,
                    calls: 0,
                    error: None,
                });
            }
            Summarizer::Model(m) => m,
        };
        let request = &*call.request;
        let prompt = match SummaryPrompt::new(
            self.prompt(),
            existing.as_deref(),
            &fold,
            &self.transcript_options(),
        ) {
            Ok(p) => p,
            Err(e) => {
                return ControlFlow::Break(Outcome::untouched(
                    Action::PassThrough,
                    Some(e.to_string()),
                ));
            }
        };
        let models = match summary_model {
            Some(sm) => SummaryModels::with_fallback(sm.clone(), request.model.clone()),
            None => SummaryModels::single(request.model.clone()),
        };
        let thread = &request.runtime.thread_id;
        let caller = self.caller();
        if !call.background && caller.breaker().peek(thread).is_ok() {
            ContextCompacting::new(self.compacting_message().to_owned())
                .emit(&request.runtime.writer);
        }
        // Structured output where the provider takes it: a small local model's answer
        // is then one JSON string, unwrapped back to the summary text.
        let schema = ResponseSchema::summary_text();
        let cap = caller.options().max_output_tokens;
        let err = match caller
            .call_shaped(thread, &models, &prompt, None, cap, Some(&schema))
            .await
        {
            Ok(out) => {
                return ControlFlow::Continue(Summary {
                    text: out.text,
                    source: SummarySource::Model,
                    calls: out.attempts,
                    error: None,
                });
            }
            Err(err) => err,
        };
        let calls = match &err {
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
}
