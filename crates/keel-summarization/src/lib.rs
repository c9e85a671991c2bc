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
//! - [`plan`]: the split LangChain would make ([`plan::langchain_split`], for parity)
//!   and the latest user message, from the rule book the middleware plans with.
//! - [`cache`]: the process-wide per-thread summary cache (LRU, optional second level,
//!   single flight).
//! - [`overflow`]: recovery when the provider rejects a request as over its context
//!   window (compact below three quarters, send once more, a typed error with the
//!   figures, a per-run bound, counters).
//!
//! The building blocks shared with session memory live below both middlewares and are
//! re-exported here: [`summary_call`], [`transcript`], [`extractive`], [`events`] and the
//! summary message from `keel-summary`; [`pairs`] (the tool-call/tool-result invariant and
//! safe cuts) from `keel-core`.
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
pub mod compact_tool;
pub mod config;
pub mod middleware;
pub mod overflow;
/// Pair protection (moved to keel-core so session memory, the agent loop and `keel replay` share it).
pub use keel_core::pairs;
pub mod plan {
    //! Where to cut, as LangChain would, and which message is the latest user message:
    //! the public part of the rule book the middleware plans with (triggers, the keep
    //! policy, rescue and stickiness headroom, all pure functions), so the middleware,
    //! `keel compact` and the LangChain parity test share one implementation.
    //!
    //! ```
    //! use keel_core::message::Message;
    //! use keel_summarization::config::ContextSize;
    //! use keel_summarization::plan::langchain_split;
    //!
    //! let msgs: Vec<Message> = (0..30).map(|i| Message::human(format!("message {i}"))).collect();
    //! let split = langchain_split(&msgs, &[ContextSize::Messages(25)], ContextSize::Messages(10), None);
    //! assert!(split.triggered);
    //! assert_eq!(split.cut, 20); // summarize 20, keep the last 10
    //! ```

    pub use crate::rules::{Split, langchain_split, latest_user_message};
}
mod rules;
pub mod stack;
pub(crate) mod stages;
mod telemetry;
/// The line-aware YAML tree every Keel configuration file is read with (keel-config).
pub use keel_config::yaml;

pub use keel_summary::{
    SUMMARY_NAME, SUMMARY_PREFIX, events, extractive, summary_call, summary_message, transcript,
    writer,
};
