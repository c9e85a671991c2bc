//! Custom stream event payloads written by compaction (and by session memory, which
//! shares them), through [`keel_core::stream::StreamWriter::custom`].
//!
//! - [`ContextCompacting`]: `{"type": "context_compacting", "message": "..."}`, emitted
//!   when, and only when, the run blocks on a summary model call, so a chat UI can show
//!   a transient toast. Cache reuse and the extractive summarizer are silent.
//! - [`ContextCompacted`]: `{"type": "context_compacted", ...}`, emitted after every
//!   compaction that changed the request, with token counts before and after, how the
//!   summary was obtained and why the request was compacted ([`CompactionReason`]:
//!   `"trigger"` or `"overflow"`), for UIs and metrics.
//!
//! ```
//! use keel_summary::events::{ContextCompacting, EVENT_COMPACTING};
//!
//! let v = ContextCompacting::new("Compacting context…").to_value();
//! assert_eq!(v["type"], EVENT_COMPACTING);
//! assert_eq!(v["message"], "Compacting context…");
//! ```

use keel_core::stream::StreamWriter;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `type` of the event announcing a blocking summary call.
pub const EVENT_COMPACTING: &str = "context_compacting";
/// `type` of the event reporting a finished compaction.
pub const EVENT_COMPACTED: &str = "context_compacted";

/// The default text of the compacting event.
pub const DEFAULT_COMPACTING_MESSAGE: &str = "Compacting conversation context…";

/// A blocking summary call is running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextCompacting {
    /// Always [`EVENT_COMPACTING`].
    #[serde(rename = "type")]
    pub kind: String,
    /// Text for the UI.
    pub message: String,
}

impl ContextCompacting {
    /// The event with this text.
    pub fn new(message: impl Into<String>) -> Self {
        ContextCompacting {
            kind: EVENT_COMPACTING.to_owned(),
            message: message.into(),
        }
    }

    /// The JSON payload.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Writes the event to `writer`.
    pub fn emit(&self, writer: &StreamWriter) {
        writer.custom(self.to_value());
    }
}

/// Where the summary in a compacted request came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummarySource {
    /// A summary model call made now.
    Model,
    /// The per-thread cache, with no model call.
    Cache,
    /// The deterministic extractive summarizer (offline mode, or after the model failed).
    Extractive,
    /// The last good summary, reused because the model call failed.
    LastGood,
}

/// Why a request was compacted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionReason {
    /// The request reached a configured trigger.
    #[default]
    Trigger,
    /// The provider rejected the request as larger than the model's context window
    /// (recognised from its error), and it was compacted to be sent once more.
    Overflow,
    /// A compaction asked for (`Agent::compact`, `POST /threads/{id}/compact`, the
    /// `compact_conversation` tool), or a later call of a thread compacted that way.
    Requested,
}

impl CompactionReason {
    /// The wire name (`"trigger"`, `"overflow"`).
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionReason::Trigger => "trigger",
            CompactionReason::Overflow => "overflow",
            CompactionReason::Requested => "requested",
        }
    }
}

/// A compaction finished and the request sent to the model changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextCompacted {
    /// Always [`EVENT_COMPACTED`].
    #[serde(rename = "type")]
    pub kind: String,
    /// Why the request was compacted (absent in events written before the field
    /// existed, which were all trigger compactions).
    #[serde(default)]
    pub reason: CompactionReason,
    /// Tokens of the whole request before compaction.
    pub tokens_before: u64,
    /// Tokens of the whole request actually sent.
    pub tokens_after: u64,
    /// True when the summary came from the cache (no model call).
    pub cache_hit: bool,
    /// How the summary was obtained.
    pub source: SummarySource,
    /// Messages represented by the summary.
    pub summarized: usize,
    /// Recent messages kept verbatim.
    pub kept: usize,
    /// Older messages kept verbatim by rescue (latest user message, reminders, skills).
    pub rescued: usize,
    /// Why the model was not used, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Present (`true`) when stickiness headroom could not be met: the fixed part of the
    /// request and the floor of the recent window are over `headroom` x a trigger.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub headroom_unreachable: bool,
    /// Present (`true`) when the summary sent was written in the background before
    /// this call (`precompute_at`), so the call waited for no summary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub precomputed: bool,
}

impl ContextCompacted {
    /// The JSON payload.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Writes the event to `writer`.
    pub fn emit(&self, writer: &StreamWriter) {
        writer.custom(self.to_value());
    }
}
