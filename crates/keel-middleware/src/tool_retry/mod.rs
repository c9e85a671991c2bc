//! `ToolRetry`: retries failed tool calls with exponential backoff (LangChain's
//! `ToolRetryMiddleware`), for every tool or the listed ones.
//!
//! A failure whose kind is in `retry_on` (by default `failed`: the tool ran and raised)
//! is retried up to `max_retries` times. When the retries run out, `on_failure`
//! `continue` (the default) answers with an error tool result
//! `Tool 'search' failed after 3 attempts with ToolException: ... Please try again.`;
//! `error` returns the error to the outer layers (the agent then turns it into its own
//! error result).

mod entry;

pub(crate) use entry::Entry;

use std::sync::Arc;

use keel_core::message::Message;
use keel_core::middleware::{Middleware, ToolCallRequest, ToolNext};
use keel_core::tool::ToolError;
use serde_json::json;

use crate::backoff::{self, Backoff};
use crate::common::{attempts_word, selects};
use crate::error::ConfigError;
use crate::events;

/// A kind of tool failure, for `retry_on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolFailureKind {
    /// The tool ran and failed (`ToolError::Failed`).
    Failed,
    /// The arguments did not fit the tool's schema.
    InvalidArguments,
    /// No tool has that name.
    Unknown,
}

impl ToolFailureKind {
    /// The kind of an error.
    pub fn of(error: &ToolError) -> Self {
        match error {
            ToolError::Failed { .. } => ToolFailureKind::Failed,
            ToolError::InvalidArguments { .. } => ToolFailureKind::InvalidArguments,
            ToolError::Unknown { .. } => ToolFailureKind::Unknown,
        }
    }

    /// The stack-file name (`failed`, `invalid_arguments`, `unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolFailureKind::Failed => "failed",
            ToolFailureKind::InvalidArguments => "invalid_arguments",
            ToolFailureKind::Unknown => "unknown",
        }
    }
}

/// The class name LangChain would show for an error, and its message.
pub(crate) fn describe(error: &ToolError) -> (&'static str, String) {
    match error {
        ToolError::Failed { message, .. } => ("ToolException", message.clone()),
        ToolError::InvalidArguments { message, .. } => ("ToolInvocationError", message.clone()),
        ToolError::Unknown { .. } => ("ToolException", error.to_string()),
    }
}

/// What to do when every attempt failed.
#[derive(Clone)]
pub enum ToolFailure {
    /// Answer with an error tool result describing the failure (the default).
    Continue,
    /// Return the last error.
    Error,
    /// Answer with an error tool result whose text this function makes from the error.
    Message(Arc<dyn Fn(&ToolError) -> String + Send + Sync>),
}

impl std::fmt::Debug for ToolFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ToolFailure::Continue => "Continue",
            ToolFailure::Error => "Error",
            ToolFailure::Message(_) => "Message(..)",
        })
    }
}

/// Retries tool calls. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct ToolRetry {
    backoff: Backoff,
    tools: Option<Vec<String>>,
    retry_on: Vec<ToolFailureKind>,
    on_failure: ToolFailure,
}

impl ToolRetry {
    /// A retry policy for `tools` (every tool when `None`).
    pub fn new(
        backoff: Backoff,
        tools: Option<Vec<String>>,
        retry_on: Vec<ToolFailureKind>,
        on_failure: ToolFailure,
    ) -> Result<Self, ConfigError> {
        backoff.validate("tool_retry")?;
        Ok(ToolRetry {
            backoff,
            tools,
            retry_on,
            on_failure,
        })
    }

    /// LangChain's defaults for every tool: 2 retries, 1 s doubling up to 60 s with
    /// jitter, `continue` on failure; tool failures (not unknown tools or bad arguments,
    /// which cannot succeed unchanged) are retried.
    pub fn langchain_defaults() -> Self {
        ToolRetry {
            backoff: Backoff::default(),
            tools: None,
            retry_on: vec![ToolFailureKind::Failed],
            on_failure: ToolFailure::Continue,
        }
    }

    fn give_up(
        &self,
        call_id: &str,
        tool: &str,
        error: ToolError,
        attempts: u64,
    ) -> Result<Message, ToolError> {
        let text = match &self.on_failure {
            ToolFailure::Error => return Err(error),
            ToolFailure::Message(f) => f(&error),
            ToolFailure::Continue => {
                let (class, message) = describe(&error);
                format!(
                    "Tool '{tool}' failed after {attempts} {} with {class}: {message}. Please try again.",
                    attempts_word(attempts)
                )
            }
        };
        Ok(Message::tool_error(call_id, text).with_name(tool))
    }
}

#[keel_core::middleware]
impl Middleware for ToolRetry {
    fn name(&self) -> &str {
        "ToolRetryMiddleware"
    }

    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        let tool = request.call.name.clone();
        if !selects(self.tools.as_deref(), &tool) {
            return next.run(request).await;
        }
        let call_id = request.call.id.clone();
        let writer = request.runtime.writer.clone();
        let mut attempt: u32 = 0;
        loop {
            let error = match next.clone().run(request.clone()).await {
                Ok(message) => return Ok(message),
                Err(error) => error,
            };
            if !self.retry_on.contains(&ToolFailureKind::of(&error)) {
                return Err(error);
            }
            if attempt >= self.backoff.max_retries {
                return self.give_up(&call_id, &tool, error, u64::from(attempt) + 1);
            }
            events::counter(
                &writer,
                self.name(),
                "retries",
                1,
                json!({"attempt": attempt + 1, "tool": tool, "error": error.to_string()}),
            );
            backoff::wait(self.backoff.delay(attempt)).await;
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests;
