//! `ContextEditing`: clears older tool results from the request once the conversation
//! grows past a token threshold (LangChain's `ContextEditingMiddleware` with
//! `ClearToolUsesEdit`, after Anthropic's context editing).
//!
//! Like Keel's summarization it is transient: it runs in `wrap_model_call` and edits
//! only the request; state and checkpoints keep every tool result. It is pair-safe by
//! construction: a cleared result keeps its message, id and `tool_call_id` (its content
//! becomes the placeholder) and a cleared input keeps its call (its arguments become
//! `{}`), so every call still has its result.
//!
//! Composed with summarization, put `context_editing` *outside* (before) `summarization`
//! in the stack: clearing runs first, so the summarizer counts and summarizes the
//! cleared request, and often need not run at all.

mod entry;

pub(crate) use entry::Entry;

mod clear_tool_uses;

use std::sync::Arc;

use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use keel_core::model::ModelError;
use keel_core::tokens::TokenCounter;
use keel_tokens::ApproximateCounter;
use serde_json::json;

pub use clear_tool_uses::{ClearToolUses, DEFAULT_PLACEHOLDER};

use crate::events;

/// Edits the request's messages. See the [module docs](self).
#[derive(Clone)]
pub struct ContextEditing {
    edits: Vec<ClearToolUses>,
    counter: Arc<dyn TokenCounter>,
}

impl std::fmt::Debug for ContextEditing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextEditing")
            .field("edits", &self.edits)
            .field("counter", &self.counter.name())
            .finish()
    }
}

impl Default for ContextEditing {
    /// One [`ClearToolUses`] with LangChain's defaults, counted with LangChain's
    /// approximation.
    fn default() -> Self {
        Self::new(vec![ClearToolUses::default()])
    }
}

impl ContextEditing {
    /// These edits, applied in order, counting tokens as LangChain's
    /// `count_tokens_approximately` does.
    pub fn new(edits: Vec<ClearToolUses>) -> Self {
        ContextEditing {
            edits,
            counter: Arc::new(ApproximateCounter::langchain()),
        }
    }

    /// The same edits with another token counter (an exact tokenizer from keel-tokens).
    pub fn with_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = counter;
        self
    }
}

#[keel_core::middleware]
impl Middleware for ContextEditing {
    fn name(&self) -> &str {
        "ContextEditingMiddleware"
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        if request.messages.is_empty() {
            return next.run(request).await;
        }
        let mut messages: Option<Vec<_>> = None;
        let mut cleared = 0u64;
        for edit in &self.edits {
            let current = messages.as_deref().unwrap_or(&request.messages);
            if let Some((edited, n)) = edit.apply(current, self.counter.as_ref()) {
                messages = Some(edited);
                cleared += n;
            }
        }
        let Some(messages) = messages else {
            return next.run(request).await;
        };
        // Counting the request twice more costs more than the clearing itself: only
        // when someone reads the figures.
        let extra = if request.runtime.writer.is_connected()
            || tracing::enabled!(target: "keel_middleware", tracing::Level::INFO)
        {
            json!({
                "tokens_before": self.counter.count_messages(&request.messages),
                "tokens_after": self.counter.count_messages(&messages),
            })
        } else {
            json!({})
        };
        events::counter(
            &request.runtime.writer,
            self.name(),
            "cleared_tool_results",
            cleared,
            extra,
        );
        next.run(request.with_messages(messages)).await
    }
}

#[cfg(test)]
mod tests;
