//! # keel-replay
//!
//! Answers a user's first question about Keel offline: *what would this middleware stack
//! save on my own conversations, and would the agent still remember what matters?*
//!
//! A recorded conversation ([`Transcript`], one JSON message per line) is replayed one
//! model call at a time: each assistant message is a call, the history before it goes
//! through the middleware stack exactly as in a live agent (node hooks and the
//! `wrap_model_call` chain via [`keel_core::middleware::Next`]), the request that reaches
//! the model is recorded, and the recorded assistant message is the answer. The
//! [`ReplayReport`] compares the tokens sent with sending the last 100 messages verbatim
//! and with sending the whole history, and counts summary calls and cache hits.
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use keel_core::message::Message;
//! use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
//! use keel_core::model::ModelError;
//! use keel_replay::{Quiet, ReplayEngine, Transcript};
//! use keel_tokens::ApproximateCounter;
//!
//! /// Sends only the last two messages: a crude window, to show the mechanics.
//! struct LastTwo;
//!
//! #[async_trait]
//! impl Middleware for LastTwo {
//!     fn name(&self) -> &str { "LastTwo" }
//!     async fn wrap_model_call(&self, req: ModelRequest, next: Next<'_>)
//!         -> Result<ModelResponse, ModelError> {
//!         let keep = req.messages.len().saturating_sub(2);
//!         let recent = req.messages[keep..].to_vec();
//!         next.run(req.with_messages(recent)).await
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let transcript = Transcript::from_messages(vec![
//!     Message::human("I'm on project PRJ-123.").with_id("1"),
//!     Message::ai("Noted.").with_id("2"),
//!     Message::human("Which project?").with_id("3"),
//!     Message::ai("PRJ-123.").with_id("4"),
//! ]).unwrap();
//! let engine = ReplayEngine::new(vec![Arc::new(LastTwo)], Arc::new(ApproximateCounter::langchain()));
//! let replay = engine.run(&transcript, &mut Quiet).await.unwrap();
//! assert_eq!(replay.report.calls.len(), 2);
//! assert_eq!(replay.report.calls[1].history_messages, 3);
//! assert_eq!(replay.report.calls[1].request_messages, 2);
//! assert!(replay.report.totals.sent_tokens < replay.report.totals.full_history_tokens);
//! # });
//! ```

pub mod answer;
pub mod check;
pub mod engine;
pub mod eval;
pub mod input;
pub mod locomo;
pub mod models;
pub mod report;
pub mod setup;
pub mod transcript;

pub use answer::{TranscriptAnswer, TranscriptModel};
pub use engine::{
    BASELINE_WINDOW, Quiet, Replay, ReplayEngine, ReplayError, ReplayObserver, SentRequest,
    classify, is_summary,
};
pub use eval::{EvalReport, Probe, ProbeError, evaluate, read_probes};
pub use input::Limits;
pub use report::{CallReport, ReplayReport, Totals};
pub use setup::{
    DEFAULT_DB_URL, FinishError, MemoryOptions, Prepared, ReplayOptions, SetupError, load_recall,
    load_summarization, prepare, prepare_transcript, transcript_warnings,
};
pub use transcript::{InvalidTranscript, LoadError, Transcript};
