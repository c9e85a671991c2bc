//! # Keel
//!
//! An agent middleware framework: a LangGraph-style hook pipeline (`before_agent`,
//! `before_model`, `wrap_model_call`, `after_model`, `wrap_tool_call`, `after_agent`)
//! with transient summarization and rolling session memory.
//!
//! This facade re-exports the workspace crates under one name; cargo features choose
//! which (defaults: `agent`, `summarization`, `memory`, `sqlite`; opt-in: `tiktoken`,
//! `postgres`, `openai`, `anthropic`, `recall`).
//!
//! The repository's `examples/` walk the whole path through this facade:
//! `first_agent` (feature `openai`; a real model, a hand-written tool, summarization
//! from YAML and session memory on SQLite; docs/first-agent.md),
//! `cargo run --example yaml_agent` (summarization from YAML, session memory on SQLite,
//! streamed events and the `context_compacting` toast, offline by default),
//! `custom_middleware`, and `postgres_sessions` (feature `postgres`).
//!
//! ```
//! use keel::message::Message;
//!
//! let m = Message::human("I'm working on project PRJ-123 on the EU cluster.");
//! assert_eq!(m.role(), keel::Role::User);
//! ```

pub use keel_core::*;

/// The same items as the crate root (`keel::message::Message` is
/// `keel::core::message::Message`); kept so code written against it still builds. Use
/// the root paths.
#[doc(hidden)]
pub use keel_core as core;

/// Put on an `impl Middleware for X { ... }` block: writes
/// [`hooks()`](crate::middleware::Middleware::hooks) with exactly the hooks the block
/// defines and applies `#[async_trait]`, so the agent skips the hooks it leaves out (see
/// [`Middleware`](crate::middleware::Middleware)). keel-core's `#[keel_core::middleware]`
/// with this crate's paths, for an application that depends on `keel` alone.
///
/// ```
/// use keel::middleware::{Middleware, ModelRequest, ModelResponse, Next};
/// use keel::ModelError;
///
/// struct Quiet;
///
/// #[keel::middleware]
/// impl Middleware for Quiet {
///     fn name(&self) -> &str {
///         "Quiet"
///     }
///     async fn wrap_model_call(
///         &self,
///         mut request: ModelRequest,
///         next: Next<'_>,
///     ) -> Result<ModelResponse, ModelError> {
///         request.settings.temperature = Some(0.0);
///         next.run(request).await
///     }
/// }
///
/// assert!(Quiet.hooks().wrap_model_call() && !Quiet.hooks().before_model());
/// ```
// Shadows the glob's `keel_core::middleware` in the macro namespace only: the module
// `keel::middleware` is still keel-core's.
pub use keel_macros::facade_middleware as middleware;
// What `#[keel::middleware]`'s expansion names (`::keel::__private`).
#[doc(hidden)]
pub use keel_core::__private;

/// The agent loop (`keel-agent`).
#[cfg(feature = "agent")]
pub use keel_agent as agent;
/// The stack check the agent's builder runs (`keel-agent`; before, keel-core's).
#[cfg(feature = "agent")]
pub use keel_agent::{StackError, check_stack};
/// Tools from MCP servers, stdio or streamable HTTP (`keel-mcp`).
#[cfg(feature = "mcp")]
pub use keel_mcp as mcp;
/// Rolling session memory (`keel-memory`).
#[cfg(feature = "memory")]
pub use keel_memory as memory;
/// LangChain v1's built-in middleware and the YAML stack file (`keel-middleware`).
/// Named `builtin` because `keel::middleware` is the middleware contract (keel-core).
#[cfg(feature = "middleware")]
pub use keel_middleware as builtin;
/// The stack-file loader with every entry Keel ships: LangChain's built-in middleware
/// (`keel-middleware`) and `summarization` (`keel-summarization`, DeerFlow's schema),
/// as `keel run` reads a stack file. Add an application's own entries with
/// [`StackLoader::with`](keel_middleware::stack::StackLoader::with).
///
/// ```
/// let stack = keel::stack_loader()
///     .load_str("middleware:\n  - pii: {pii_type: email}\n  - summarization: {}\n")
///     .unwrap();
/// assert_eq!(stack.middleware.len(), 2);
/// ```
#[cfg(feature = "middleware")]
pub fn stack_loader() -> keel_middleware::stack::StackLoader {
    keel_middleware::stack::StackLoader::builtin()
        .with(keel_summarization::stack::SummarizationEntry)
}
/// Claude through Anthropic's Messages API (`keel-anthropic`).
#[cfg(feature = "anthropic")]
pub use keel_anthropic as anthropic;
/// The OpenAI-compatible chat model (`keel-openai`).
#[cfg(feature = "openai")]
pub use keel_openai as openai;
/// Recall of the exact evidence: quoted excerpts of older messages (`keel-recall`).
#[cfg(feature = "recall")]
pub use keel_recall as recall;
/// The SQL stores: SQLite and PostgreSQL implementations of [`store`]'s traits, and
/// [`sql::Store`], which opens either from a URL (`keel-store`). The traits they
/// implement are in [`store`].
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use keel_store as sql;
/// The former name of [`sql`], kept so code written against it still builds.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[doc(hidden)]
pub use keel_store as storage;
/// Transient summarization (`keel-summarization`).
#[cfg(feature = "summarization")]
pub use keel_summarization as summarization;
/// Token counters (`keel-tokens`); the trait itself is [`TokenCounter`].
#[cfg(any(feature = "summarization", feature = "tiktoken"))]
pub use keel_tokens as counters;

/// The names an agent author composes with, in one import (`use keel::prelude::*;`):
/// the agent, messages, models and tools, the middleware contract with its closure
/// constructors ([`from_fn`](crate::middleware::from_fn)) and `#[async_trait]` to
/// implement it, and, with their features, summarization, session memory and storage.
///
/// ```
/// use keel::prelude::*;
///
/// let scope = SessionScope::flow("support").user("ada");
/// assert_eq!(Message::human("hi").role(), Role::User);
/// # let _ = scope;
/// ```
pub mod prelude {
    pub use async_trait::async_trait;
    pub use keel_core::middleware::{
        HookOutcome, Hooks, JumpTarget, MiddlewareError, ModelRequest, ModelResponse, Next,
        Runtime, from_fn,
    };
    pub use keel_core::store::SessionScope;
    pub use keel_core::{
        AgentState, ChatModel, Content, Message, Middleware, ModelError, ModelProfile, Role,
        StateUpdate, StreamEvent, StreamMode, Tool, ToolError, ToolSpec,
    };

    #[cfg(feature = "agent")]
    pub use keel_agent::Agent;
    #[cfg(feature = "memory")]
    pub use keel_memory::{FoldEngine, SessionMemoryMiddleware, SessionMemorySettings};
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub use keel_store::Store;
    #[cfg(feature = "summarization")]
    pub use keel_summarization::config::SummarizationConfig;
    #[cfg(feature = "summarization")]
    pub use keel_summarization::middleware::SummarizationMiddleware;
}

// The README's examples are compiled and run as doc tests here, through the facade and
// its prelude as a user writes them, so the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The middleware guide's examples, the same way (they use the facade's paths, as a
// user's crate that depends on `keel` writes them).
#[cfg(all(doctest, feature = "agent"))]
#[doc = include_str!("../docs/writing-middleware.md")]
struct WritingMiddlewareDoctests;
