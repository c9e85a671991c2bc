//! The middleware contract: six optional hooks with LangChain v1 semantics.
//!
//! ```text
//!            before_agent   A → B            (once per run)
//!   ┌──────▶ before_model   A → B            (before every model call)
//!   │        wrap_model_call A( B( model ) ) (A outermost)
//!   │        after_model    B → A
//!   │        wrap_tool_call A( B( tool ) )   (once per tool call)
//!   └─────── (loop while the model asks for tools)
//!            after_agent    B → A            (once, at the end)
//! ```
//!
//! Node hooks (`before_*`, `after_*`) return a [`HookOutcome`]: a state update and,
//! optionally, a jump, honoured only if the middleware lists the target in
//! [`Middleware::jump_targets`]. Wrap hooks receive the request by value and a [`Next`]
//! cursor; they may call it zero times (short-circuit), once, or several times (retry or
//! fallback, cloning `Next`); only the response they return counts.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::message::{Message, ToolCall};
use crate::model::{ChatModel, ChatRequest, ModelError, ModelSettings, ToolChoice};
use crate::state::{AgentState, StateUpdate};
use crate::stream::StreamWriter;
use crate::tool::{Tool, ToolError, ToolSpec};

/// Where a node hook may send the run next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JumpTarget {
    /// Re-enter at the first `before_model`.
    Model,
    /// Run the pending tool calls.
    Tools,
    /// Finish the run (after_agent hooks still run).
    End,
}

/// What a node hook returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookOutcome {
    /// Changes to state (empty: none).
    pub update: StateUpdate,
    /// A jump, if any.
    pub jump: Option<JumpTarget>,
}

impl HookOutcome {
    /// Change nothing, go on.
    pub fn proceed() -> Self {
        Self::default()
    }

    /// Apply an update, go on.
    pub fn update(update: StateUpdate) -> Self {
        HookOutcome { update, jump: None }
    }

    /// Jump (the middleware must declare the target in `jump_targets`).
    pub fn jump(target: JumpTarget) -> Self {
        HookOutcome {
            update: StateUpdate::default(),
            jump: Some(target),
        }
    }
}

/// Facts about the current run, shared by every hook.
#[derive(Clone, Debug)]
pub struct Runtime {
    /// The conversation thread.
    pub thread_id: Arc<str>,
    /// This run's id.
    pub run_id: Arc<str>,
    /// Where custom stream events go.
    pub writer: StreamWriter,
    /// Which model call of the run this is (0-based; counts every model call).
    pub model_call_index: u64,
}

impl Runtime {
    /// A runtime for a thread with no stream consumer (tests, offline tools).
    pub fn detached(thread_id: &str) -> Self {
        Runtime {
            thread_id: Arc::from(thread_id),
            run_id: Arc::from(crate::message::new_id().as_str()),
            writer: StreamWriter::disconnected(),
            model_call_index: 0,
        }
    }
}

/// A model call as middleware see it. Cheap to clone (shared lists sit behind `Arc`);
/// changed by copy-on-override (`with_*`), so a retry can resend the original.
#[derive(Clone)]
pub struct ModelRequest {
    /// The conversation to send (without the system message).
    pub messages: Arc<Vec<Message>>,
    /// The system message.
    pub system: Option<Message>,
    /// Tools offered to the model.
    pub tools: Arc<Vec<ToolSpec>>,
    /// Tool policy.
    pub tool_choice: Option<ToolChoice>,
    /// Settings.
    pub settings: ModelSettings,
    /// The model that will answer.
    pub model: Arc<dyn ChatModel>,
    /// A read view of state at the time of the call.
    pub state: Arc<AgentState>,
    /// Run facts and the stream writer.
    pub runtime: Runtime,
}

impl std::fmt::Debug for ModelRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRequest")
            .field("messages", &self.messages.len())
            .field("system", &self.system.is_some())
            .field("tools", &self.tools.len())
            .field("model", &self.model.profile().name)
            .finish_non_exhaustive()
    }
}

impl ModelRequest {
    /// A copy with other messages.
    pub fn with_messages(&self, messages: Vec<Message>) -> Self {
        ModelRequest {
            messages: Arc::new(messages),
            ..self.clone()
        }
    }

    /// A copy with another model.
    pub fn with_model(&self, model: Arc<dyn ChatModel>) -> Self {
        ModelRequest {
            model,
            ..self.clone()
        }
    }

    /// A copy with another system message.
    pub fn with_system(&self, system: Option<Message>) -> Self {
        ModelRequest {
            system,
            ..self.clone()
        }
    }

    /// The borrowed form handed to [`ChatModel`].
    pub fn chat_request(&self) -> ChatRequest<'_> {
        ChatRequest {
            system: self.system.as_ref(),
            messages: &self.messages,
            tools: &self.tools,
            tool_choice: self.tool_choice.as_ref(),
            settings: &self.settings,
            internal: false,
        }
    }
}

/// What a model call produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    /// The AI message.
    pub message: Message,
    /// Extra state changes gathered by wrap hooks (discarded if the hook's caller retries).
    pub update: StateUpdate,
}

impl ModelResponse {
    /// A response carrying only the message.
    pub fn new(message: Message) -> Self {
        ModelResponse {
            message,
            update: StateUpdate::default(),
        }
    }
}

/// A boxed, sendable future: what every hook returns and what [`Next::run`] hands back.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The innermost model call (the agent's: it streams user-facing tokens).
#[async_trait]
pub trait ModelHandler: Send + Sync {
    /// Calls the model.
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, ModelError>;
}

/// A cursor over the remaining `wrap_model_call` hooks and the model. Cheap to clone.
#[derive(Clone)]
pub struct Next<'a> {
    chain: &'a [Arc<dyn Middleware>],
    terminal: &'a dyn ModelHandler,
}

impl<'a> Next<'a> {
    /// A cursor over `chain` (outermost first) ending in `terminal`.
    pub fn new(chain: &'a [Arc<dyn Middleware>], terminal: &'a dyn ModelHandler) -> Self {
        Next { chain, terminal }
    }

    /// Runs the rest of the chain. Consumes the cursor: clone it to call again.
    ///
    /// Returns the next layer's own boxed future rather than wrapping it in another state
    /// machine, so a layer costs one allocation and the request is not copied twice.
    pub fn run(self, request: ModelRequest) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        match self.chain.split_first() {
            Some((first, rest)) => first.wrap_model_call(
                request,
                Next {
                    chain: rest,
                    terminal: self.terminal,
                },
            ),
            None => self.terminal.call(request),
        }
    }
}

/// One tool call as middleware see it.
#[derive(Clone)]
pub struct ToolCallRequest {
    /// The call the model made.
    pub call: ToolCall,
    /// The tool, if the agent has one by that name.
    pub tool: Option<Arc<dyn Tool>>,
    /// State at the time of the call.
    pub state: Arc<AgentState>,
    /// Run facts.
    pub runtime: Runtime,
}

/// The innermost tool call.
#[async_trait]
pub trait ToolHandler: Send + Sync {
    /// Runs the tool and returns its tool message.
    async fn call(&self, request: ToolCallRequest) -> Result<Message, ToolError>;
}

/// A cursor over the remaining `wrap_tool_call` hooks and the tool. Cheap to clone.
#[derive(Clone)]
pub struct ToolNext<'a> {
    chain: &'a [Arc<dyn Middleware>],
    terminal: &'a dyn ToolHandler,
}

impl<'a> ToolNext<'a> {
    /// A cursor over `chain` (outermost first) ending in `terminal`.
    pub fn new(chain: &'a [Arc<dyn Middleware>], terminal: &'a dyn ToolHandler) -> Self {
        ToolNext { chain, terminal }
    }

    /// Runs the rest of the chain (one allocation per layer, as [`Next::run`]).
    pub fn run(self, request: ToolCallRequest) -> BoxFuture<'a, Result<Message, ToolError>> {
        match self.chain.split_first() {
            Some((first, rest)) => first.wrap_tool_call(
                request,
                ToolNext {
                    chain: rest,
                    terminal: self.terminal,
                },
            ),
            None => self.terminal.call(request),
        }
    }
}

/// A failure inside a node hook; it ends the run with this error.
#[derive(Debug, thiserror::Error)]
#[error("middleware {middleware} failed in {hook}: {message}")]
pub struct MiddlewareError {
    /// The middleware's name.
    pub middleware: String,
    /// The hook.
    pub hook: &'static str,
    /// What went wrong.
    pub message: String,
}

/// Which hooks a middleware implements; the agent skips the others without a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hooks {
    /// `before_agent`
    pub before_agent: bool,
    /// `before_model`
    pub before_model: bool,
    /// `wrap_model_call`
    pub wrap_model_call: bool,
    /// `after_model`
    pub after_model: bool,
    /// `wrap_tool_call`
    pub wrap_tool_call: bool,
    /// `after_agent`
    pub after_agent: bool,
}

impl Hooks {
    /// Every hook (the safe default).
    pub const ALL: Hooks = Hooks {
        before_agent: true,
        before_model: true,
        wrap_model_call: true,
        after_model: true,
        wrap_tool_call: true,
        after_agent: true,
    };
    /// No hook.
    pub const NONE: Hooks = Hooks {
        before_agent: false,
        before_model: false,
        wrap_model_call: false,
        after_model: false,
        wrap_tool_call: false,
        after_agent: false,
    };
}

/// A middleware: any subset of the six hooks. Every hook has a pass-through default.
#[async_trait]
pub trait Middleware: Send + Sync {
    /// A name unique within an agent; stream `updates` are keyed `<name>.<hook>`.
    fn name(&self) -> &str;

    /// The hooks this middleware implements. Declaring fewer lets the agent skip calls;
    /// the default, [`Hooks::ALL`], is always correct.
    fn hooks(&self) -> Hooks {
        Hooks::ALL
    }

    /// Targets this middleware's node hooks may jump to. A jump elsewhere is an error.
    fn jump_targets(&self) -> &[JumpTarget] {
        &[]
    }

    /// Once per run, before anything else.
    async fn before_agent(
        &self,
        _state: &AgentState,
        _runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::proceed())
    }

    /// Before every model call.
    async fn before_model(
        &self,
        _state: &AgentState,
        _runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::proceed())
    }

    /// Around every model call.
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        next.run(request).await
    }

    /// After every model call (in reverse order).
    async fn after_model(
        &self,
        _state: &AgentState,
        _runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::proceed())
    }

    /// Around every tool call.
    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        next.run(request).await
    }

    /// Once per run, at the end (in reverse order).
    async fn after_agent(
        &self,
        _state: &AgentState,
        _runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::proceed())
    }
}
