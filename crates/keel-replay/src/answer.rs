//! The innermost call of a replayed model step: it records what the middleware chain
//! would have sent and answers with what the model actually said back then.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::message::Message;
use keel_core::middleware::{ModelHandler, ModelRequest, ModelResponse};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelErrorKind, ModelProfile};
use parking_lot::Mutex;

/// The terminal handler of one replayed model call.
///
/// A replay asks "what would this middleware stack have sent?", not "what would the
/// model say now?": the answer is already in the transcript. So the terminal keeps the
/// request exactly as the chain hands it over (after every `wrap_model_call`) and
/// returns the transcript's AI message, which the replay then appends to the history as
/// a live agent would append the model's answer.
pub struct TranscriptAnswer {
    answer: Message,
    sent: Mutex<Option<ModelRequest>>,
}

impl TranscriptAnswer {
    /// A terminal that answers with `answer`.
    pub fn new(answer: Message) -> Self {
        TranscriptAnswer {
            answer,
            sent: Mutex::new(None),
        }
    }

    /// The request that reached the model last (a retrying middleware may call the model
    /// more than once; the last request is the one whose answer counted). `None` when a
    /// middleware answered without calling the model.
    pub fn take_sent(&self) -> Option<ModelRequest> {
        self.sent.lock().take()
    }
}

#[async_trait]
impl ModelHandler for TranscriptAnswer {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        *self.sent.lock() = Some(request);
        Ok(ModelResponse::new(self.answer.clone()))
    }
}

/// The answering model as middleware see it in `ModelRequest::model` during a replay.
///
/// It carries the profile (name, context window for fraction triggers) but refuses to
/// be called: answers come from the transcript. A middleware that calls the run's model
/// itself (for a summary, say) gets a [`ModelErrorKind::Rejected`] error and takes its
/// failure path, as it would if the provider were down; configure a summarizer instead.
pub struct TranscriptModel {
    profile: ModelProfile,
}

impl TranscriptModel {
    /// A model with this profile.
    pub fn new(profile: ModelProfile) -> Arc<Self> {
        Arc::new(TranscriptModel { profile })
    }
}

#[async_trait]
impl ChatModel for TranscriptModel {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }

    async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
        Err(ModelError::new(
            ModelErrorKind::Rejected,
            "keel replay answers model calls from the transcript and never calls the \
             answering model; give summaries their own model (--summary-model) or use the \
             built-in extractive summarizer",
        ))
    }
}
