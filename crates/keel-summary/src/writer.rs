//! Who writes a summary, and the one path that writes it.
//!
//! Transient summarization and session memory both compact a conversation with either a
//! model (through the shared [`SummaryCaller`]: deadline, retries, circuit breaker,
//! fallback to the run's model) or the [extractive](crate::extractive) summarizer,
//! which needs no model. [`SummaryWriter`] says which, and [`SummaryWriter::write`] is
//! the single place that branches on it: each caller only says how to build its prompt
//! (called only when a model writes) and what its extractive result is (called only
//! when no model does).
//!
//! ```
//! use std::sync::Arc;
//! use keel_core::message::Message;
//! use keel_core::model::ChatModel;
//! use keel_summary::summary_call::{SummaryCallOptions, SummaryCaller};
//! use keel_summary::transcript::{SummaryPrompt, TranscriptOptions, DEFAULT_SUMMARY_PROMPT};
//! use keel_summary::writer::{ModelCall, SummaryWriter, Written};
//! use keel_testkit::ScriptedModel;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = Arc::new(ScriptedModel::new([Message::ai("- the user wants a haiku")]));
//! let run_model: Arc<dyn ChatModel> = model.clone();
//! let caller = SummaryCaller::new(SummaryCallOptions::default());
//! let messages = [Message::human("write a haiku")];
//! let prompt = || {
//!     SummaryPrompt::new(DEFAULT_SUMMARY_PROMPT, None, &messages, &TranscriptOptions::default())
//! };
//! let extract = || "- extracted".to_owned();
//!
//! // Extractive: no prompt is built and no model is called.
//! let call = ModelCall::new(&caller, "thread-1", &run_model);
//! let written = SummaryWriter::Extractive.write(call, prompt, extract).await.unwrap();
//! assert!(matches!(written, Written::Extracted(ref text) if text == "- extracted"));
//! assert_eq!(model.internal_calls(), 0);
//!
//! // The run's model: one summary call through the caller.
//! let call = ModelCall::new(&caller, "thread-1", &run_model);
//! let written = SummaryWriter::Model(None).write(call, prompt, extract).await.unwrap();
//! assert!(matches!(written, Written::Model(ref out) if out.text == "- the user wants a haiku"));
//! assert_eq!(model.internal_calls(), 1);
//! # });
//! ```

use std::sync::Arc;

use keel_core::model::ChatModel;
use keel_core::stream::StreamWriter;

use crate::events::ContextCompacting;
use crate::summary_call::{
    OutputCheck, ResponseSchema, SummaryCallError, SummaryCaller, SummaryModels, SummaryOutput,
};
use crate::transcript::{MissingSlot, SummaryPrompt};

/// Who writes summaries.
#[derive(Clone)]
pub enum SummaryWriter {
    /// A model: this summary model first, falling back to the run's model when it
    /// fails, or (`None`) the run's model alone.
    Model(Option<Arc<dyn ChatModel>>),
    /// The deterministic extractive summarizer: no model call, same input same output.
    Extractive,
}

impl std::fmt::Debug for SummaryWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SummaryWriter::Model(Some(m)) => write!(f, "Model({})", m.profile().name),
            SummaryWriter::Model(None) => f.write_str("Model(run model)"),
            SummaryWriter::Extractive => f.write_str("Extractive"),
        }
    }
}

/// The model side of a write: where the call goes and what it asks for. Unused when
/// the extractive summarizer writes.
pub struct ModelCall<'a> {
    /// The shared caller (retries, deadline, circuit breaker).
    pub caller: &'a SummaryCaller,
    /// The circuit breaker's key (a thread, or a session).
    pub key: &'a str,
    /// The run's model: the writer when no summary model is set, else the fallback.
    pub run_model: &'a Arc<dyn ChatModel>,
    /// Checks each answer; a refused answer counts as a failed attempt.
    pub check: Option<OutputCheck<'a>>,
    /// The answer's token limit.
    pub max_output_tokens: Option<u32>,
    /// The answer's JSON schema, where the provider takes one.
    pub schema: Option<&'a ResponseSchema>,
    /// A `context_compacting` event sent before the model is called: the text, and the
    /// stream it goes to.
    pub announce: Option<(&'a str, &'a StreamWriter)>,
}

impl<'a> ModelCall<'a> {
    /// A call through `caller` under breaker key `key`, with no check, no output limit,
    /// no schema and no announcement.
    pub fn new(caller: &'a SummaryCaller, key: &'a str, run_model: &'a Arc<dyn ChatModel>) -> Self {
        ModelCall {
            caller,
            key,
            run_model,
            check: None,
            max_output_tokens: None,
            schema: None,
            announce: None,
        }
    }
}

/// What [`SummaryWriter::write`] produced.
#[derive(Debug)]
pub enum Written<T> {
    /// The extractive result (no model was called).
    Extracted(T),
    /// A model's validated answer.
    Model(SummaryOutput),
}

/// Why a model could not write the summary.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The prompt could not be built (its template has no `{messages}` slot).
    #[error(transparent)]
    Prompt(#[from] MissingSlot),
    /// Every model failed, or the circuit is open.
    #[error(transparent)]
    Call(#[from] SummaryCallError),
}

impl SummaryWriter {
    /// True when no model writes.
    pub fn is_extractive(&self) -> bool {
        matches!(self, SummaryWriter::Extractive)
    }

    /// The models a model write tries, in order; `None` for the extractive summarizer.
    pub fn models(&self, run_model: &Arc<dyn ChatModel>) -> Option<SummaryModels> {
        match self {
            SummaryWriter::Extractive => None,
            SummaryWriter::Model(Some(m)) => {
                Some(SummaryModels::with_fallback(m.clone(), run_model.clone()))
            }
            SummaryWriter::Model(None) => Some(SummaryModels::single(run_model.clone())),
        }
    }

    /// Writes one summary: `extract()` when the extractive summarizer writes, else the
    /// prompt `prompt()` builds, sent through `call` (announced first when it says so).
    pub async fn write<T>(
        &self,
        call: ModelCall<'_>,
        prompt: impl FnOnce() -> Result<SummaryPrompt, MissingSlot>,
        extract: impl FnOnce() -> T,
    ) -> Result<Written<T>, WriteError> {
        let Some(models) = self.models(call.run_model) else {
            return Ok(Written::Extracted(extract()));
        };
        let prompt = prompt()?;
        if let Some((message, stream)) = call.announce {
            ContextCompacting::new(message).emit(stream);
        }
        let output = call
            .caller
            .call_shaped(
                call.key,
                &models,
                &prompt,
                call.check,
                call.max_output_tokens,
                call.schema,
            )
            .await?;
        Ok(Written::Model(output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::Message;
    use keel_core::model::ModelError;
    use keel_core::stream::StreamEvent;
    use keel_testkit::ScriptedModel;
    use tokio::sync::mpsc;

    use crate::summary_call::SummaryCallOptions;
    use crate::transcript::{DEFAULT_SUMMARY_PROMPT, TranscriptOptions};

    fn prompt() -> Result<SummaryPrompt, MissingSlot> {
        SummaryPrompt::new(
            DEFAULT_SUMMARY_PROMPT,
            None,
            &[Message::human("the ticket is TCK-7")],
            &TranscriptOptions::default(),
        )
    }

    /// A caller with one try per model, and a stream that counts what is announced.
    struct Fixture {
        caller: SummaryCaller,
        run_model: Arc<dyn ChatModel>,
        stream: StreamWriter,
        rx: mpsc::UnboundedReceiver<StreamEvent>,
    }

    impl Fixture {
        fn new(run_model: Arc<dyn ChatModel>) -> Self {
            let (tx, rx) = mpsc::unbounded_channel();
            Fixture {
                caller: SummaryCaller::new(SummaryCallOptions {
                    max_attempts: 1,
                    ..SummaryCallOptions::default()
                }),
                run_model,
                stream: StreamWriter::new(tx),
                rx,
            }
        }

        /// A call that announces `compacting` on the fixture's stream.
        fn call(&self) -> ModelCall<'_> {
            ModelCall {
                announce: Some(("compacting", &self.stream)),
                ..ModelCall::new(&self.caller, "t", &self.run_model)
            }
        }

        /// Events announced so far.
        fn events(&mut self) -> usize {
            std::iter::from_fn(|| self.rx.try_recv().ok()).count()
        }
    }

    #[tokio::test]
    async fn the_extractive_writer_builds_no_prompt_calls_no_model_and_announces_nothing() {
        let model = Arc::new(ScriptedModel::new([Message::ai("unused")]));
        let run_model: Arc<dyn ChatModel> = model.clone();
        let mut fixture = Fixture::new(run_model);
        let written = SummaryWriter::Extractive
            .write(fixture.call(), || Err(MissingSlot), || 7)
            .await;
        assert!(matches!(written, Ok(Written::Extracted(7))), "{written:?}");
        assert_eq!(model.internal_calls(), 0);
        assert_eq!(fixture.events(), 0);
    }

    #[tokio::test]
    async fn a_summary_model_that_fails_falls_back_to_the_run_model_after_one_announcement() {
        let summary_model = Arc::new(ScriptedModel::with_results([Err(ModelError::new(
            keel_core::model::ModelErrorKind::Authentication,
            "down",
        ))]));
        let run = Arc::new(ScriptedModel::new([Message::ai("- ticket TCK-7")]));
        let run_model: Arc<dyn ChatModel> = run.clone();
        let mut fixture = Fixture::new(run_model);
        let written = SummaryWriter::Model(Some(summary_model.clone()))
            .write(fixture.call(), prompt, || unreachable!("a model writes"))
            .await;
        let Ok(Written::Model(out)) = written else {
            panic!("expected a model summary, got {written:?}");
        };
        assert_eq!(out.text, "- ticket TCK-7");
        assert!(out.used_fallback);
        assert_eq!(summary_model.internal_calls(), 1);
        assert_eq!(run.internal_calls(), 1);
        assert_eq!(fixture.events(), 1);
    }

    #[tokio::test]
    async fn a_template_without_its_slot_is_a_prompt_error_before_any_call_or_announcement() {
        let model = Arc::new(ScriptedModel::new([Message::ai("unused")]));
        let run_model: Arc<dyn ChatModel> = model.clone();
        let mut fixture = Fixture::new(run_model);
        let written = SummaryWriter::Model(None)
            .write(fixture.call(), || Err(MissingSlot), || ())
            .await;
        assert!(
            matches!(written, Err(WriteError::Prompt(MissingSlot))),
            "{written:?}"
        );
        assert_eq!(model.internal_calls(), 0);
        assert_eq!(fixture.events(), 0);
    }
}
