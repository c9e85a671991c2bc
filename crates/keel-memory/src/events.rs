//! Custom stream events of session memory, written through the run's
//! [`StreamWriter`](keel_core::stream::StreamWriter). A fold's model call is also
//! announced with the shared `context_compacting` event, so a UI needs one toast for
//! both kinds of compaction.
//!
//! | `type` | when |
//! |---|---|
//! | `session_memory_folded` | a fold was saved |
//! | `session_memory_fold_superseded` | a concurrent run saved first; its state is used |
//! | `session_memory_fold_failed` | a fold failed; the turn runs with the previous state |
//!
//! ```
//! use keel_memory::events::{FoldFailed, FoldFailure};
//!
//! let v = FoldFailed::new(FoldFailure::Unparseable, "no JSON object", 20, 3).to_value();
//! assert_eq!(v["type"], "session_memory_fold_failed");
//! assert_eq!(v["reason"], "unparseable");
//! ```

use keel_core::stream::StreamWriter;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `type` of [`Folded`].
pub const EVENT_FOLDED: &str = "session_memory_folded";
/// `type` of [`FoldSuperseded`].
pub const EVENT_FOLD_SUPERSEDED: &str = "session_memory_fold_superseded";
/// `type` of [`FoldFailed`].
pub const EVENT_FOLD_FAILED: &str = "session_memory_fold_failed";

/// The text of the `context_compacting` event sent before a fold's model call.
pub const FOLDING_MESSAGE: &str = "Updating the session summary…";

/// A fold was saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Folded {
    /// Always [`EVENT_FOLDED`].
    #[serde(rename = "type")]
    pub kind: String,
    /// Messages folded by this call.
    pub messages: usize,
    /// Messages folded into the summary since the session began.
    pub absorbed_count: u64,
    /// The saved state's version.
    pub version: u64,
    /// Words in the new summary.
    pub summary_words: usize,
    /// Pinned keys that hold a value after the fold.
    pub pinned_keys: Vec<String>,
    /// The model that wrote the summary.
    pub summary_model: String,
    /// The ledger of current values the new summary records (one per `new (was old)`
    /// line, with the message that stated the new value), so a UI or a log can show
    /// which values changed. It is read from the summary itself, which a later fold
    /// keeps, so it is never stored apart from it and the two cannot disagree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub current_values: Vec<keel_summary::extractive::CurrentValue>,
}

/// A concurrent run saved a fold first; this run uses its state and made no second call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldSuperseded {
    /// Always [`EVENT_FOLD_SUPERSEDED`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The version this run expected to replace.
    pub expected_version: u64,
    /// The version now stored (the winner's).
    pub winner_version: u64,
}

/// Why a fold failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FoldFailure {
    /// The summary model failed (error, timeout, blank answer, open circuit).
    Model,
    /// The answer held no usable `{"pinned": ..., "summary": ...}` object.
    Unparseable,
    /// Saving (or reloading after a lost race) failed.
    Store,
}

/// A fold failed; the turn runs with the previous state and nothing was saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldFailed {
    /// Always [`EVENT_FOLD_FAILED`].
    #[serde(rename = "type")]
    pub kind: String,
    /// What failed.
    pub reason: FoldFailure,
    /// The error, for logs and operators.
    pub error: String,
    /// Messages the fold tried to absorb.
    pub messages: usize,
    /// The version kept.
    pub version: u64,
}

impl FoldFailed {
    /// The event.
    pub fn new(
        reason: FoldFailure,
        error: impl Into<String>,
        messages: usize,
        version: u64,
    ) -> Self {
        FoldFailed {
            kind: EVENT_FOLD_FAILED.to_owned(),
            reason,
            error: error.into(),
            messages,
            version,
        }
    }
}

macro_rules! payload {
    ($t:ty) => {
        impl $t {
            /// The JSON payload.
            pub fn to_value(&self) -> Value {
                serde_json::to_value(self).unwrap_or(Value::Null)
            }

            /// Writes the event to `writer`.
            pub fn emit(&self, writer: &StreamWriter) {
                writer.custom(self.to_value());
            }
        }
    };
}
payload!(Folded);
payload!(FoldSuperseded);
payload!(FoldFailed);
