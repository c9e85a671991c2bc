//! # keel-agent
//!
//! The agent loop of Keel: a chat model and tools behind a middleware pipeline with
//! LangChain v1's hook order, LangGraph's stream modes, and an append-only checkpoint per
//! step. A checkpoint stores the step's change after the run's head (compare-and-swap,
//! so a second writer gets [`AgentError::Conflict`] instead of overwriting), and the
//! runs of one agent on one thread follow its [`MultitaskStrategy`] (`enqueue` by
//! default; `reject`, `interrupt`, `rollback`).
//!
//! ```text
//! input ─▶ before_agent A → B
//!          ┌─▶ before_model A → B
//!          │   A.wrap_model_call( B.wrap_model_call( model ) )
//!          │   after_model B → A
//!          │   for each tool call, concurrently: A.wrap_tool_call( B.wrap_tool_call( tool ) )
//!          └── while the model asked for tools
//!          after_agent B → A ─▶ output
//! ```
//!
//! ```
//! use std::sync::Arc;
//! use keel_agent::Agent;
//! use keel_core::message::Message;
//! use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
//! use keel_core::model::ModelError;
//! use keel_testkit::ScriptedModel;
//!
//! /// Caps the answer length of every model call.
//! struct MaxTokens(u32);
//!
//! #[keel_core::middleware]
//! impl Middleware for MaxTokens {
//!     fn name(&self) -> &str {
//!         "MaxTokens"
//!     }
//!     async fn wrap_model_call(
//!         &self,
//!         mut request: ModelRequest,
//!         next: Next<'_>,
//!     ) -> Result<ModelResponse, ModelError> {
//!         request.settings.max_tokens = Some(self.0);
//!         next.run(request).await
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = Arc::new(ScriptedModel::new([Message::ai("Hello!")]));
//! let agent = Agent::builder()
//!     .model(model.clone())
//!     .system_prompt("You are terse.")
//!     .middleware(MaxTokens(64))
//!     .build()?;
//! let out = agent.invoke("thread-1", vec![Message::human("hi")]).await?;
//! assert_eq!(out.last_message().map(|m| m.text().into_owned()), Some("Hello!".into()));
//! assert_eq!(model.requests()[0].settings.max_tokens, Some(64));
//! # Ok(())
//! # }
//! ```

// Dependencies between modules point one way (each line uses only the lines below it):
//   builder  → agent, run, pipeline, checkpointer, error
//   agent    → run, stream, output, error
//   stream   → output, error
//   run      → multitask, options, pipeline, output, error
//   multitask → gate → strategy
//   pipeline, output, checkpointer, options, strategy, error, offline → keel-core only
mod agent;
mod builder;
mod checkpointer;
mod error;
pub mod gate;
mod multitask;
pub mod offline;
mod options;
mod output;
mod pipeline;
mod resume;
mod run;
mod stack;
mod strategy;
mod stream;

pub use agent::{Agent, Compaction};
pub use builder::{AgentBuilder, DEFAULT_RECURSION_LIMIT};
pub use checkpointer::{DEFAULT_KEEP_CHECKPOINTS, DEFAULT_MAX_THREADS, InMemoryCheckpointer};
pub use error::{AgentError, BuildError};
pub use multitask::ThreadRuns;
pub use options::RunOptions;
pub use output::RunOutput;
pub use pipeline::{INPUT_NODE, MODEL_NODE, ROLLBACK_NODE, TOOLS_NODE};
pub use stack::{StackError, check_stack};
pub use strategy::{CancelAction, MultitaskStrategy};
pub use stream::AgentStream;
