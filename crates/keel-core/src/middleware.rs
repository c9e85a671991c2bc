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

pub mod from_fn;

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

    /// The [`Lineage`](crate::state::Lineage) of `messages`, when they are still the
    /// state's own list (no middleware replaced them): what lets a counter or the
    /// summary cache work on the new messages alone.
    pub fn lineage(&self) -> Option<crate::state::Lineage> {
        Arc::ptr_eq(&self.messages, &self.state.messages).then_some(self.state.lineage)
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

/// One kind of wrap hook, for [`Chain`]: what its requests and answers are, how a
/// middleware wraps the rest of the chain, and how the innermost handler answers.
/// [`ModelWrap`] and [`ToolWrap`] are the two the pipeline has.
pub trait Wrap: 'static {
    /// What each layer receives.
    type Request: Send + 'static;
    /// What it answers.
    type Output: Send + 'static;
    /// The innermost handler (the model or the tool), borrowed for `'a`.
    type Handler<'a>: ?Sized + Sync + 'a;
    /// Calls `middleware`'s hook of this kind with the rest of the chain.
    fn wrap<'a>(
        middleware: &'a dyn Middleware,
        request: Self::Request,
        next: Chain<'a, Self>,
    ) -> BoxFuture<'a, Self::Output>;
    /// Calls the innermost handler.
    fn terminal<'a>(
        handler: &'a Self::Handler<'a>,
        request: Self::Request,
    ) -> BoxFuture<'a, Self::Output>;
}

/// `wrap_model_call`: model requests, down to the model.
#[derive(Clone, Copy, Debug)]
pub struct ModelWrap;

impl Wrap for ModelWrap {
    type Request = ModelRequest;
    type Output = Result<ModelResponse, ModelError>;
    type Handler<'a> = dyn ModelHandler + 'a;
    fn wrap<'a>(
        middleware: &'a dyn Middleware,
        request: ModelRequest,
        next: Next<'a>,
    ) -> BoxFuture<'a, Self::Output> {
        middleware.wrap_model_call(request, next)
    }
    fn terminal<'a>(
        handler: &'a (dyn ModelHandler + 'a),
        request: ModelRequest,
    ) -> BoxFuture<'a, Self::Output> {
        handler.call(request)
    }
}

/// `wrap_tool_call`: tool calls, down to the tool.
#[derive(Clone, Copy, Debug)]
pub struct ToolWrap;

impl Wrap for ToolWrap {
    type Request = ToolCallRequest;
    type Output = Result<Message, ToolError>;
    type Handler<'a> = dyn ToolHandler + 'a;
    fn wrap<'a>(
        middleware: &'a dyn Middleware,
        request: ToolCallRequest,
        next: ToolNext<'a>,
    ) -> BoxFuture<'a, Self::Output> {
        middleware.wrap_tool_call(request, next)
    }
    fn terminal<'a>(
        handler: &'a (dyn ToolHandler + 'a),
        request: ToolCallRequest,
    ) -> BoxFuture<'a, Self::Output> {
        handler.call(request)
    }
}

/// A cursor over the remaining wrap hooks of one kind and the handler they wrap: the
/// one type behind [`Next`] (model calls) and [`ToolNext`] (tool calls). Cheap to
/// clone.
pub struct Chain<'a, W: Wrap + ?Sized> {
    chain: &'a [Arc<dyn Middleware>],
    terminal: &'a W::Handler<'a>,
}

impl<W: Wrap + ?Sized> Clone for Chain<'_, W> {
    fn clone(&self) -> Self {
        Chain {
            chain: self.chain,
            terminal: self.terminal,
        }
    }
}

impl<'a, W: Wrap> Chain<'a, W> {
    /// A cursor over `chain` (outermost first) ending in `terminal`.
    pub fn new(chain: &'a [Arc<dyn Middleware>], terminal: &'a W::Handler<'a>) -> Self {
        Chain { chain, terminal }
    }

    /// Runs the rest of the chain. Consumes the cursor: clone it to call again.
    ///
    /// Returns the next layer's own boxed future rather than wrapping it in another state
    /// machine, so a layer costs one allocation and the request is not copied twice.
    pub fn run(self, request: W::Request) -> BoxFuture<'a, W::Output> {
        match self.chain.split_first() {
            Some((first, rest)) => W::wrap(
                first.as_ref(),
                request,
                Chain {
                    chain: rest,
                    terminal: self.terminal,
                },
            ),
            None => W::terminal(self.terminal, request),
        }
    }
}

/// A cursor over the remaining `wrap_model_call` hooks and the model.
pub type Next<'a> = Chain<'a, ModelWrap>;

/// A last change to a model request, applied after every inner `wrap_model_call` hook,
/// just before the model gets it: see [`Next::run_with_final`].
#[async_trait]
pub trait FinalRequest: Send + Sync {
    /// Returns the request to send instead of `request`.
    async fn finish(&self, request: ModelRequest) -> Result<ModelRequest, ModelError>;
}

/// The terminal of a [`Next::run_with_final`] chain.
struct Finishing<'b> {
    last: &'b dyn FinalRequest,
    terminal: &'b dyn ModelHandler,
}

#[async_trait]
impl ModelHandler for Finishing<'_> {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let request = self.last.finish(request).await?;
        self.terminal.call(request).await
    }
}

impl Next<'_> {
    /// Runs the rest of the chain as [`run`](Self::run) does, with `last` applied to the
    /// request that the innermost hook hands to the model. A middleware that must see
    /// the final request (what inner summarization or session memory left of the
    /// history) uses it, so its place in the stack does not matter.
    pub async fn run_with_final(
        self,
        request: ModelRequest,
        last: &dyn FinalRequest,
    ) -> Result<ModelResponse, ModelError> {
        let terminal = Finishing {
            last,
            terminal: self.terminal,
        };
        Next::new(self.chain, &terminal).run(request).await
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

/// A cursor over the remaining `wrap_tool_call` hooks and the tool.
pub type ToolNext<'a> = Chain<'a, ToolWrap>;

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
///
/// Only two kinds of value exist: [`Hooks::ALL`], the default of [`Middleware::hooks`]
/// (always correct: every hook is called), and the exact set the
/// [`#[keel_core::middleware]`](macro@crate::middleware) attribute derives from an impl
/// block. Nothing else can build one, so a mask cannot leave out a hook its middleware
/// implements. Read it with the accessors ([`Hooks::before_model`], ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hooks {
    before_agent: bool,
    before_model: bool,
    wrap_model_call: bool,
    after_model: bool,
    wrap_tool_call: bool,
    after_agent: bool,
}

impl Hooks {
    /// Every hook: what a middleware without the attribute gets (correct, only slower).
    pub const ALL: Hooks = Hooks::__implemented(true, true, true, true, true, true);

    /// The hooks an impl block defines, in execution order. Only the expansion of the
    /// `middleware` attribute calls this, with what it found in the block: a
    /// hand-written call could leave out a hook the middleware implements, and the agent
    /// would then never call it.
    #[doc(hidden)]
    pub const fn __implemented(
        before_agent: bool,
        before_model: bool,
        wrap_model_call: bool,
        after_model: bool,
        wrap_tool_call: bool,
        after_agent: bool,
    ) -> Hooks {
        Hooks {
            before_agent,
            before_model,
            wrap_model_call,
            after_model,
            wrap_tool_call,
            after_agent,
        }
    }

    /// Whether the agent calls `before_agent`.
    pub const fn before_agent(self) -> bool {
        self.before_agent
    }

    /// Whether the agent calls `before_model`.
    pub const fn before_model(self) -> bool {
        self.before_model
    }

    /// Whether the agent calls `wrap_model_call`.
    pub const fn wrap_model_call(self) -> bool {
        self.wrap_model_call
    }

    /// Whether the agent calls `after_model`.
    pub const fn after_model(self) -> bool {
        self.after_model
    }

    /// Whether the agent calls `wrap_tool_call`.
    pub const fn wrap_tool_call(self) -> bool {
        self.wrap_tool_call
    }

    /// Whether the agent calls `after_agent`.
    pub const fn after_agent(self) -> bool {
        self.after_agent
    }
}

/// A middleware: any subset of the six hooks. Every hook has a pass-through default.
///
/// Implement it in a block marked `#[keel_core::middleware]` (`#[keel::middleware]`
/// through the facade crate). The attribute applies `#[async_trait]` and writes
/// [`hooks`](Middleware::hooks) from the hooks the block defines, so the agent skips
/// the others everywhere and never skips one the block defines:
///
/// ```
/// use keel_core::middleware::{HookOutcome, Hooks, Middleware, MiddlewareError, Runtime};
/// use keel_core::state::AgentState;
///
/// /// Counts the model calls of each run.
/// struct Counter;
///
/// #[keel_core::middleware]
/// impl Middleware for Counter {
///     fn name(&self) -> &str {
///         "Counter"
///     }
///     async fn before_model(
///         &self,
///         _state: &AgentState,
///         runtime: &Runtime,
///     ) -> Result<HookOutcome, MiddlewareError> {
///         println!("model call {}", runtime.model_call_index);
///         Ok(HookOutcome::proceed())
///     }
/// }
///
/// let hooks = Counter.hooks();
/// assert!(hooks.before_model() && !hooks.after_model() && !hooks.wrap_model_call());
/// ```
///
/// A block that writes `fn hooks` itself is refused at compile time, and so is one
/// with `#[async_trait]` beside the attribute (it is already applied). A plain
/// `#[async_trait]` impl also works: its `hooks()` is [`Hooks::ALL`], so every hook is
/// called, its defaults included (correct, only slower).
#[async_trait]
pub trait Middleware: Send + Sync {
    /// A name unique within an agent; stream `updates` are keyed `<name>.<hook>`.
    fn name(&self) -> &str;

    /// The hooks this middleware implements; the agent calls no other. Do not write it:
    /// the `middleware` attribute derives it from the impl block, and without the
    /// attribute it is [`Hooks::ALL`], which is always correct.
    fn hooks(&self) -> Hooks {
        Hooks::ALL
    }

    /// Targets this middleware's node hooks may jump to. A jump elsewhere is an error.
    fn jump_targets(&self) -> &[JumpTarget] {
        &[]
    }

    /// The named state values this middleware reads and writes, checked for the whole
    /// stack when the agent is built (keel-agent's `check_stack`). The
    /// default declares nothing.
    fn state_access(&self) -> crate::access::StateAccess {
        crate::access::StateAccess::default()
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

    /// Deletes everything this middleware keeps for a thread: rows in a database
    /// (chat history, session state, cached summaries, indexes) and in-process caches.
    /// The agent calls it for every middleware when the thread is deleted (keel-agent's
    /// `Agent::delete_thread`), before the thread's checkpoints go, so that a thread created later with the same
    /// id starts empty. It must be idempotent: a deletion that failed half-way is retried.
    /// Returns how many stored records went. The default keeps nothing.
    async fn delete_thread_data(&self, _thread_id: &str) -> Result<u64, crate::store::StoreError> {
        Ok(0)
    }

    /// A run forked the thread from an earlier checkpoint (time travel: a user edited
    /// or regenerated an earlier message), and the thread's history is now `messages`
    /// up to the fork point (the run's input comes after, as in any run). Middleware
    /// that keep their own copy of a thread's history (session memory's chat history
    /// and summary, a search index) drop what is not on it, so the abandoned branch is
    /// never sent to the model. Called when the run starts, before any hook. It must be
    /// idempotent. The default keeps nothing, so has nothing to do.
    async fn fork_thread_data(
        &self,
        _thread_id: &str,
        _messages: &[Message],
    ) -> Result<(), crate::store::StoreError> {
        Ok(())
    }

    /// A user, a UI or the model asked to compact the thread now (keel-agent's
    /// `Agent::compact`, `POST /threads/{id}/compact` on `keel serve`). `request` is the
    /// model request the thread's next call would start from. A middleware that compacts
    /// writes its summary now and answers a JSON report; one whose report holds
    /// [`COMPACTED_THROUGH`](crate::state::COMPACTED_THROUGH) has the agent record that
    /// value in the thread's state, so every later call, in any process, sends the
    /// compacted request even under the trigger. The default does nothing (`None`).
    async fn compact_thread(
        &self,
        _request: &ModelRequest,
    ) -> Result<Option<serde_json::Value>, ModelError> {
        Ok(None)
    }

    /// This middleware's side of pausing a run for an answer from outside
    /// ([`Resumable`](crate::interrupt::Resumable)), when it pauses runs: human in the
    /// loop does. Whoever runs the agent finds the pause, checks an answer and ends a
    /// pause through it, without knowing which middleware paused. The default: this
    /// middleware never pauses (`None`).
    fn resumable(&self) -> Option<&dyn crate::interrupt::Resumable> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defines `before_model` only.
    struct OnlyBeforeModel;

    #[keel_core::middleware]
    impl Middleware for OnlyBeforeModel {
        fn name(&self) -> &str {
            "OnlyBeforeModel"
        }
        async fn before_model(
            &self,
            _: &AgentState,
            _: &Runtime,
        ) -> Result<HookOutcome, MiddlewareError> {
            Ok(HookOutcome::proceed())
        }
    }

    /// Defines all six hooks.
    struct Everything;

    #[keel_core::middleware]
    impl Middleware for Everything {
        fn name(&self) -> &str {
            "Everything"
        }
        async fn before_agent(
            &self,
            _: &AgentState,
            _: &Runtime,
        ) -> Result<HookOutcome, MiddlewareError> {
            Ok(HookOutcome::proceed())
        }
        async fn before_model(
            &self,
            _: &AgentState,
            _: &Runtime,
        ) -> Result<HookOutcome, MiddlewareError> {
            Ok(HookOutcome::proceed())
        }
        async fn wrap_model_call(
            &self,
            request: ModelRequest,
            next: Next<'_>,
        ) -> Result<ModelResponse, ModelError> {
            next.run(request).await
        }
        async fn after_model(
            &self,
            _: &AgentState,
            _: &Runtime,
        ) -> Result<HookOutcome, MiddlewareError> {
            Ok(HookOutcome::proceed())
        }
        async fn wrap_tool_call(
            &self,
            request: ToolCallRequest,
            next: ToolNext<'_>,
        ) -> Result<Message, ToolError> {
            next.run(request).await
        }
        async fn after_agent(
            &self,
            _: &AgentState,
            _: &Runtime,
        ) -> Result<HookOutcome, MiddlewareError> {
            Ok(HookOutcome::proceed())
        }
    }

    /// Defines `wrap_tool_call` without the attribute.
    struct Plain;

    #[async_trait]
    impl Middleware for Plain {
        fn name(&self) -> &str {
            "Plain"
        }
        async fn wrap_tool_call(
            &self,
            request: ToolCallRequest,
            next: ToolNext<'_>,
        ) -> Result<Message, ToolError> {
            next.run(request).await
        }
    }

    /// Defines no hook.
    struct Nothing;

    #[keel_core::middleware]
    impl Middleware for Nothing {
        fn name(&self) -> &str {
            "Nothing"
        }
    }

    fn flags(h: Hooks) -> [bool; 6] {
        [
            h.before_agent(),
            h.before_model(),
            h.wrap_model_call(),
            h.after_model(),
            h.wrap_tool_call(),
            h.after_agent(),
        ]
    }

    #[test]
    fn the_attribute_declares_exactly_the_hooks_the_block_defines() {
        assert_eq!(
            flags(OnlyBeforeModel.hooks()),
            [false, true, false, false, false, false]
        );
        assert_eq!(Everything.hooks(), Hooks::ALL);
        assert_eq!(flags(Nothing.hooks()), [false; 6]);
    }

    #[test]
    fn a_middleware_without_the_attribute_gets_every_hook() {
        assert_eq!(Plain.hooks(), Hooks::ALL);
        assert_eq!(flags(Hooks::ALL), [true; 6]);
    }
}
