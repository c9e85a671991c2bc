//! # keel-summary
//!
//! How Keel writes a summary. Transient summarization (`keel-summarization`) and rolling
//! session memory (`keel-memory`) are siblings that both compact a conversation; what
//! they share lives here, below both:
//!
//! - [`summary_call`]: the internal summary model call (deadline, retries, fallback to
//!   the run's model, output validation, circuit breaker, never streamed to the user);
//! - [`transcript`]: the prompt's transcript, one escaped JSON record per message, with
//!   tool output marked as untrusted data;
//! - [`extractive`]: a deterministic summarizer that needs no model;
//! - [`writer`]: who writes a summary (a model or the extractive summarizer) and the
//!   one write path that branches on it;
//! - [`events`]: the `context_compacting` / `context_compacted` stream payloads;
//! - [`summary_message`]: the message that stands for the summarized part.
//!
//! ```
//! use keel_summary::{summary_message, SUMMARY_NAME};
//!
//! let m = summary_message("- the user is Ada");
//! assert_eq!(m.name(), Some(SUMMARY_NAME));
//! assert_eq!(m.text(), "Here is a summary of the conversation to date:\n\n- the user is Ada");
//! assert!(m.flag("hide_from_ui"));
//! ```

pub mod events;
pub mod extractive;
pub mod summary_call;
pub mod transcript;
pub mod writer;

use keel_core::hash::fnv1a;
use keel_core::message::{HIDE_FROM_UI, HumanMessage, Message};

/// The `name` of a summary message.
pub const SUMMARY_NAME: &str = "summary";

/// The text before the summary in a summary message.
pub const SUMMARY_PREFIX: &str = "Here is a summary of the conversation to date:";

/// The summary message handed to the model: a user message (never system authority)
/// named `summary`, flagged `hide_from_ui`. Its id is derived from the text so the same
/// summary is byte-identical on every call (provider prompt caches keep hitting).
pub fn summary_message(summary: &str) -> Message {
    let mut metadata = keel_core::message::Metadata::new();
    metadata.insert(HIDE_FROM_UI.to_owned(), serde_json::Value::Bool(true));
    HumanMessage {
        content: format!("{SUMMARY_PREFIX}\n\n{summary}").into(),
        id: format!("summary-{:016x}", fnv1a(summary.as_bytes())),
        name: Some(SUMMARY_NAME.to_owned()),
        metadata,
    }
    .into()
}

#[cfg(test)]
mod stable_ids {
    use super::*;

    #[test]
    fn summary_ids_are_stable() {
        // Stored with the summary message in checkpoints and histories: pinned.
        let m = summary_message("The user works on PRJ-123.");
        assert_eq!(m.id(), "summary-b02bd39ca0b501c7");
    }
}
