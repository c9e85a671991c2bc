//! `ModelRetry`: retries failed model calls with exponential backoff (LangChain's
//! `ModelRetryMiddleware`).
//!
//! A failure whose kind is in `retry_on` (by default the kinds that may succeed unchanged:
//! rate limits, server errors, timeouts, connection failures) is retried up to
//! `max_retries` times; any other failure is returned at once. When the retries run out,
//! `on_failure` decides: `continue` (the default) answers with an AI message
//! `Model call failed after 3 attempts with ModelAPIError: ...`, `error` returns the
//! error. Error kinds are named as LangChain's `langchain_core.exceptions` classes, so a
//! migrated agent's messages read the same.

mod entry;

pub(crate) use entry::Entry;

use std::sync::Arc;

use keel_core::message::Message;
use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use keel_core::model::{ModelError, ModelErrorKind};
use serde_json::json;

use crate::backoff::{self, Backoff};
use crate::common::attempts_word;
use crate::error::ConfigError;
use crate::events;

/// The class LangChain raises for each kind, as named in failure messages.
pub fn langchain_class(kind: ModelErrorKind) -> &'static str {
    match kind {
        ModelErrorKind::Authentication => "ModelAuthenticationError",
        ModelErrorKind::RateLimited => "ModelRateLimitError",
        ModelErrorKind::ContextOverflow => "ContextOverflowError",
        ModelErrorKind::InvalidRequest => "ModelInvalidRequestError",
        ModelErrorKind::Server => "ModelAPIError",
        ModelErrorKind::Timeout => "ModelTimeoutError",
        ModelErrorKind::MalformedResponse => "OutputParserException",
        ModelErrorKind::Connection => "ModelConnectionError",
        ModelErrorKind::Rejected => "ModelError",
        ModelErrorKind::Refused => "ModelRefusalError",
    }
}

/// What to do when every attempt failed.
#[derive(Clone)]
pub enum ModelFailure {
    /// Answer with an AI message describing the failure (the default).
    Continue,
    /// Return the last error (the run fails unless an outer layer handles it).
    Error,
    /// Answer with an AI message whose text this function makes from the error.
    Message(Arc<dyn Fn(&ModelError) -> String + Send + Sync>),
}

impl std::fmt::Debug for ModelFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModelFailure::Continue => "Continue",
            ModelFailure::Error => "Error",
            ModelFailure::Message(_) => "Message(..)",
        })
    }
}

/// Retries model calls. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct ModelRetry {
    backoff: Backoff,
    retry_on: Vec<ModelErrorKind>,
    on_failure: ModelFailure,
}

/// The kinds retried by default: those [`ModelErrorKind::is_retryable`] accepts.
pub const DEFAULT_RETRY_ON: [ModelErrorKind; 4] = [
    ModelErrorKind::RateLimited,
    ModelErrorKind::Server,
    ModelErrorKind::Timeout,
    ModelErrorKind::Connection,
];

impl ModelRetry {
    /// A retry policy.
    pub fn new(
        backoff: Backoff,
        retry_on: Vec<ModelErrorKind>,
        on_failure: ModelFailure,
    ) -> Result<Self, ConfigError> {
        backoff.validate("model_retry")?;
        Ok(ModelRetry {
            backoff,
            retry_on,
            on_failure,
        })
    }

    /// LangChain's defaults: 2 retries, 1 s doubling up to 60 s with jitter, retryable
    /// kinds only, `continue` on failure.
    pub fn langchain_defaults() -> Self {
        ModelRetry {
            backoff: Backoff::default(),
            retry_on: DEFAULT_RETRY_ON.to_vec(),
            on_failure: ModelFailure::Continue,
        }
    }

    fn give_up(&self, error: ModelError, attempts: u64) -> Result<ModelResponse, ModelError> {
        let text = match &self.on_failure {
            ModelFailure::Error => return Err(error),
            ModelFailure::Message(f) => f(&error),
            ModelFailure::Continue => format!(
                "Model call failed after {attempts} {} with {}: {}",
                attempts_word(attempts),
                langchain_class(error.kind),
                error.message
            ),
        };
        Ok(ModelResponse::new(Message::ai(text)))
    }
}

#[keel_core::middleware]
impl Middleware for ModelRetry {
    fn name(&self) -> &str {
        "ModelRetryMiddleware"
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let mut attempt: u32 = 0;
        loop {
            let error = match next.clone().run(request.clone()).await {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
            if !self.retry_on.contains(&error.kind) {
                return Err(error);
            }
            if attempt >= self.backoff.max_retries {
                return self.give_up(error, u64::from(attempt) + 1);
            }
            events::counter(
                &request.runtime.writer,
                self.name(),
                "retries",
                1,
                json!({"attempt": attempt + 1, "kind": error.kind, "error": error.message}),
            );
            backoff::wait(self.backoff.delay(attempt)).await;
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests;
