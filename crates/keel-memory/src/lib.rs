//! # keel-memory
//!
//! Rolling session memory (the Langflow feature request #15799): instead of sending the last 100 stored messages
//! verbatim on every model call, keep a per-session summary with pinned keys
//! (`project_id`, `customer`, ...) and send `[summary message, *last N]`.
//!
//! - [`settings`]: typed, validated settings with the feature request's defaults (N = 10, fold
//!   batch 20, at most 60 messages of at most 4,000 characters per fold, 300 words).
//! - [`compressor`]: the storage-agnostic per-turn work (load, fold, merge, save with
//!   compare-and-swap), usable without an agent.
//! - [`fold`]: the fold prompt, the tolerant JSON parser and the merge rules.
//! - [`middleware`]: [`SessionMemoryMiddleware`], the same work as a Keel middleware.
//! - [`window`]: the pair-safe recent window.
//! - [`events`]: the custom stream events of a fold.
//!
//! The summary writer (a model or the extractive summarizer, one write path), the
//! summary model call, transcript escaping and fencing, pair protection and the
//! `context_compacting` event are shared with `keel-summarization`, through
//! `keel-summary`.
//!
//! ```
//! use std::sync::Arc;
//! use keel_core::message::Message;
//! use keel_core::model::ChatModel;
//! use keel_core::store::{ChatHistoryStore, SessionScope, StoredMessage};
//! use keel_core::stream::StreamWriter;
//! use keel_memory::{SessionCompressor, SessionMemorySettings};
//! use keel_store::memory::MemoryStore;
//! use keel_testkit::ScriptedModel;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! let scope = SessionScope::new("support-agent", "ada", "session-1", "");
//! // 30 stored messages: 20 older than the last 10, so this turn folds them.
//! let rows: Vec<StoredMessage> = (0..30)
//!     .map(|i| StoredMessage {
//!         timestamp_ms: 1_000 + i,
//!         message: Message::human(format!("message {i}")).with_id(format!("m{i:02}")),
//!     })
//!     .collect();
//! store.append(&scope, &rows).await.unwrap();
//!
//! let settings = SessionMemorySettings::for_scope(scope.clone()).with_pinned_keys(["project_id"]);
//! let compressor = SessionCompressor::new(settings, store.clone(), store.clone()).unwrap();
//! let model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([Message::ai(
//!     r#"{"pinned": {"project_id": "PRJ-123"}, "summary": "- the user works on PRJ-123"}"#,
//! )]));
//! let turn = compressor
//!     .prepare(&scope, &[Message::human("Which project?")], &model, &StreamWriter::disconnected())
//!     .await
//!     .unwrap();
//! let sent = turn.messages();
//! assert_eq!(sent.len(), 11); // the summary message, then the last 10
//! assert_eq!(
//!     sent[0].text(),
//!     "Here is a summary of the conversation to date:\n\nPinned:\n- project_id: PRJ-123\n\nSummary:\n- the user works on PRJ-123"
//! );
//! assert_eq!(turn.state.absorbed_count, 20);
//! # });
//! ```

pub mod compressor;
pub mod events;
pub mod fold;
pub mod middleware;
pub mod settings;
mod tail;
pub mod window;

pub use compressor::{FoldEngine, FoldOutcome, SessionCompressor, TurnMemory, render_memory};
pub use middleware::{Inactive, SessionMemoryBuilder, SessionMemoryMiddleware};
pub use settings::{SessionMemorySettings, SettingsError};
