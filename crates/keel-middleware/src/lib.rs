//! # keel-middleware
//!
//! LangChain v1's built-in middleware for Keel agents, one folder per middleware, each
//! with LangChain's semantics, defaults and wording (LangChain 1.5,
//! `langchain.agents.middleware`), so the same configuration gives the same agent:
//!
//! | folder | LangChain class |
//! | --- | --- |
//! | [`model_call_limit`] | `ModelCallLimitMiddleware` |
//! | [`tool_call_limit`] | `ToolCallLimitMiddleware` |
//! | [`model_retry`] | `ModelRetryMiddleware` |
//! | [`tool_retry`] | `ToolRetryMiddleware` |
//! | [`tool_error`] | `ToolErrorMiddleware` |
//! | [`model_fallback`] | `ModelFallbackMiddleware` |
//! | [`context_editing`] | `ContextEditingMiddleware` + `ClearToolUsesEdit` |
//! | [`pii`] | `PIIMiddleware` |
//! | [`todo_list`] | `TodoListMiddleware` |
//! | [`llm_tool_selector`] | `LLMToolSelectorMiddleware` |
//! | [`llm_tool_emulator`] | `LLMToolEmulator` |
//! | [`model_router`] | `ModelRouterMiddleware` |
//! | [`model_refusal`] | `ModelRefusalMiddleware` |
//! | [`human_in_the_loop`] | `HumanInTheLoopMiddleware` |
//!
//! [`stack`] loads a whole stack from one YAML file.
//!
//! Every middleware declares the state keys it reads and writes and the jumps it may
//! take; `AgentBuilder::build` checks them across the stack. Every middleware reports
//! its counters (calls, retries, cleared results, redactions, ...) through [`events`].
//!
//! ```
//! use std::sync::Arc;
//! use keel_agent::Agent;
//! use keel_core::message::Message;
//! use keel_middleware::{ModelCallExit, ModelCallLimit, Pii, Strategy};
//! use keel_testkit::ScriptedModel;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = Arc::new(ScriptedModel::new([Message::ai("Noted.")]));
//! let agent = Agent::builder()
//!     .model(model.clone())
//!     .middleware(Pii::builtin("email", Strategy::Redact)?)
//!     .middleware(ModelCallLimit::new(None, Some(5), ModelCallExit::End)?)
//!     .build()?;
//! agent.invoke("t1", vec![Message::human("I'm ada@example.com")]).await?;
//! assert_eq!(model.requests()[0].messages[0].text(), "I'm [REDACTED_EMAIL]");
//! # Ok(())
//! # }
//! ```

pub mod backoff;
mod common;
pub mod context_editing;
pub mod error;
pub mod events;
pub mod human_in_the_loop;
pub mod llm_tool_emulator;
pub mod llm_tool_selector;
pub mod model_call_limit;
pub mod model_fallback;
pub mod model_refusal;
pub mod model_retry;
pub mod model_router;
pub mod pii;
pub mod stack;
pub mod todo_list;
pub mod tool_call_limit;
pub mod tool_error;
pub mod tool_retry;

#[cfg(test)]
mod test_support;

pub use backoff::Backoff;
pub use context_editing::{ClearToolUses, ContextEditing};
pub use error::ConfigError;
pub use human_in_the_loop::{Decision, HumanInTheLoop, InterruptMode, InterruptOn};
pub use llm_tool_emulator::LlmToolEmulator;
pub use llm_tool_selector::{LlmToolSelector, OnParsingFailure};
pub use model_call_limit::{ModelCallExit, ModelCallLimit};
pub use model_fallback::ModelFallback;
pub use model_refusal::ModelRefusal;
pub use model_retry::{ModelFailure, ModelRetry};
pub use model_router::{ModelRouter, Route};
pub use pii::{Pii, Strategy};
pub use stack::{Stack, StackError};
pub use todo_list::TodoList;
pub use tool_call_limit::{ToolCallExit, ToolCallLimit};
pub use tool_error::ToolErrorHandler;
pub use tool_retry::{ToolFailure, ToolFailureKind, ToolRetry};
