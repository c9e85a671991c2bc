//! # keel-summarization
//!
//! Transient, pair-safe conversation compaction for Keel agents, configured with
//! DeerFlow's `summarization.yaml` schema (see `docs/summarization.md`).
//!
//! - [`middleware::SummarizationMiddleware`]: runs in `wrap_model_call` only. Under every
//!   trigger the request passes untouched; over one, the request handed to the model
//!   becomes `[summary, *rescued, *recent]` while state and checkpoints keep everything.
//! - [`config`]: the YAML schema (DeerFlow keys plus Keel's), with errors that name key,
//!   value, allowed range and line, and a typed builder.
//! - [`plan`]: triggers, the keep policy, rescue and stickiness headroom, as pure
//!   functions, including [`plan::langchain_split`] for LangChain parity.
//! - [`cache`]: the process-wide per-thread summary cache (LRU, optional second level,
//!   single flight).
//!
//! The shared building blocks (also used by session memory):
//! - [`summary_call`]: the internal summary model call (retries, timeout, fallback to the
//!   run's model, output validation, circuit breaker, never streamed to the user);
//! - [`transcript`]: escaped, fenced transcript rendering and `{messages}` prompt filling;
//! - [`pairs`]: the tool-call/tool-result pair invariant and safe cuts;
//! - [`extractive`]: a deterministic summarizer that needs no model;
//! - [`events`]: the `context_compacting` / `context_compacted` stream payloads.
//!
//! ```
//! use keel_core::message::Message;
//! use keel_summarization::{summary_message, SUMMARY_NAME};
//!
//! let m = summary_message("- the user is Ada");
//! assert_eq!(m.name(), Some(SUMMARY_NAME));
//! assert_eq!(m.text(), "Here is a summary of the conversation to date:\n\n- the user is Ada");
//! assert!(m.flag("hide_from_ui"));
//! ```

pub mod cache;
pub mod config;
pub mod events;
pub mod extractive;
pub mod middleware;
pub mod pairs;
pub mod plan;
pub mod summary_call;
pub mod transcript;
pub mod yaml;

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
        id: format!("summary-{:016x}", stable_hash(summary.as_bytes())),
        name: Some(SUMMARY_NAME.to_owned()),
        metadata,
    }
    .into()
}

/// FNV-1a: stable across processes and Rust versions (unlike `DefaultHasher`), so ids
/// and cache keys derived from it survive restarts.
pub(crate) fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
