//! # keel-recall
//!
//! Recall of the exact evidence. Summarization and session memory keep a request small
//! by replacing older messages with a summary; a summary paraphrases and drops. For the
//! latest user message, [`RecallMiddleware`] finds the few older messages most relevant
//! to it that the final request no longer carries verbatim, and quotes them, attributed
//! (message number, role, who, id), in one context message placed before that user
//! message, within a token budget. Key facts do not depend on the model deciding to
//! search.
//!
//! - Every message of the thread's state is indexed as it first reaches a model call
//!   (only the new ones on each call) into a [`RecallIndex`](keel_core::recall::RecallIndex):
//!   SQLite FTS5, PostgreSQL `tsvector` with a GIN index, or an in-memory BM25 index.
//! - The search runs on the request the model receives, after every inner middleware
//!   (through `Next::run_with_final`), so recall composes with summarization and
//!   session memory in either order.
//! - A tool result is quoted with the call that produced it (`name(args) returned:`), as
//!   quoted text: no tool-call / tool-result pair is ever inserted, so none can be
//!   split. Tool text is marked untrusted with the words the summary prompts use.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use keel_core::message::Message;
//! use keel_recall::{RecallMiddleware, RecallSettings};
//!
//! let recall = RecallMiddleware::builder(RecallSettings::default()).build().unwrap();
//! let thread = [
//!     Message::human("we're going with Vendorix for the billing backups").with_id("m1"),
//!     Message::ai("Noted.").with_id("m2"),
//!     Message::human("Who does the billing backups?").with_id("m3"),
//! ];
//! recall.index_thread("t1", &thread).await.unwrap();
//! // The request kept only the question: m1 is quoted back.
//! let scope = recall.settings().scope_for_thread("t1");
//! let picked = recall.excerpts(&scope, &thread[2..]).await.unwrap().unwrap();
//! assert_eq!(picked[0].0.message_id, "m1");
//! assert!(keel_recall::render(&picked).contains("> we're going with Vendorix"));
//! # });
//! ```

pub mod middleware;
pub mod settings;
pub mod stack;

pub use middleware::{RECALL_NAME, RECALL_PREFIX, RecallBuilder, RecallMiddleware, render};
pub use settings::{RecallSettings, RecallSettingsError};
pub use stack::{ReadSettingsError, RecallEntry, settings_from_node};
