//! # keel-core
//!
//! The types and traits every Keel crate shares: [`message`]s in the OpenAI chat shape,
//! the [`model::ChatModel`] and [`tool::Tool`] contracts, the [`middleware::Middleware`]
//! hooks and their [`middleware::Next`] cursor, agent [`state`], [`stream`] events,
//! [`tokens::TokenCounter`], and the [`store`] contracts (checkpoints, chat history,
//! session memory). No network, database or tokenizer dependencies live here.
//!
//! A middleware that tags every request it sees:
//!
//! ```
//! use async_trait::async_trait;
//! use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
//! use keel_core::model::ModelError;
//!
//! struct Temperature(f32);
//!
//! #[async_trait]
//! impl Middleware for Temperature {
//!     fn name(&self) -> &str {
//!         "Temperature"
//!     }
//!     async fn wrap_model_call(
//!         &self,
//!         mut request: ModelRequest,
//!         next: Next<'_>,
//!     ) -> Result<ModelResponse, ModelError> {
//!         request.settings.temperature = Some(self.0);
//!         next.run(request).await
//!     }
//! }
//! ```

pub mod access;
pub mod checkpoint_log;
pub mod dangling;
pub mod hash;
pub mod interrupt;
pub mod layer;
pub mod message;
pub mod middleware;
pub mod model;
pub mod pairs;
pub mod recall;
pub mod state;
pub mod store;
pub mod stream;
pub mod telemetry;
pub mod tokens;
pub mod tool;
pub mod transcript;

#[cfg(test)]
mod test_util;

/// Put on an `impl Middleware for X { ... }` block: writes
/// [`hooks()`](middleware::Middleware::hooks) with exactly the hooks the block defines
/// and applies `#[async_trait]`. See [`Middleware`](middleware::Middleware).
///
/// (The macro and the [`middleware`](mod@middleware) module share the name: a macro and
/// a module live in different namespaces. Through the facade crate it is
/// `#[keel::middleware]`.)
pub use keel_macros::core_middleware as middleware;

// The attribute's expansion names `::keel_core`, here too.
extern crate self as keel_core;

/// What the `middleware` attribute's expansion names; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::middleware::Hooks;
    pub use async_trait::async_trait;
}

pub use access::StateAccess;
pub use message::{Content, Message, MessageBody, Role, ToolCall};
pub use middleware::{
    HookOutcome, Hooks, JumpTarget, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next,
    Runtime, ToolCallRequest, ToolNext, from_fn,
};
pub use model::{ChatModel, ChatRequest, ModelError, ModelErrorKind, ModelProfile};
pub use state::{AgentState, MessageOp, StateUpdate};
pub use stream::{StreamEvent, StreamMode, StreamWriter};
pub use tokens::TokenCounter;
pub use tool::{Tool, ToolError, ToolSpec, Toolset};
