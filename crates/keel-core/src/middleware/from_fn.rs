//! Middleware from a closure: one hook, no struct, in the style of axum's
//! `middleware::from_fn`.
//!
//! Each constructor takes a name (unique within the agent, as [`Middleware::name`]) and a
//! closure with the hook's own arguments, and returns a [`Middleware`] whose
//! [`hooks()`](Middleware::hooks) declares that one hook, so the agent skips it everywhere
//! else:
//!
//! | constructor | hook | the closure gets |
//! | --- | --- | --- |
//! | [`before_agent`] | `before_agent` | `&AgentState`, `&Runtime` |
//! | [`before_model`] | `before_model` | `&AgentState`, `&Runtime` |
//! | [`wrap_model`] | `wrap_model_call` | [`ModelRequest`], [`Next`] |
//! | [`after_model`] | `after_model` | `&AgentState`, `&Runtime` |
//! | [`wrap_tool`] | `wrap_tool_call` | [`ToolCallRequest`], [`ToolNext`] |
//! | [`after_agent`] | `after_agent` | `&AgentState`, `&Runtime` |
//!
//! The closure returns its future boxed, `Box::pin(async move { ... })`: the future
//! borrows the hook's arguments (the state, or the rest of the chain in `next`), and
//! stable Rust can only name that borrow in a closure's return type through a boxed
//! future ([`BoxFuture`]). Values the closure captures are moved into it once; clone what
//! the future needs, as in any `Fn` closure that starts a task.
//!
//! ```
//! use keel_core::middleware::{HookOutcome, Middleware, from_fn};
//!
//! // Sets the temperature of every model call.
//! let temperature = from_fn::wrap_model("Temperature", |mut request, next| {
//!     Box::pin(async move {
//!         request.settings.temperature = Some(0.2);
//!         next.run(request).await
//!     })
//! });
//! // Counts the model calls of a run (a node hook reads the state by reference).
//! let count = from_fn::before_model("Count", |state, runtime| {
//!     Box::pin(async move {
//!         println!("call {} on {} messages", runtime.model_call_index, state.messages.len());
//!         Ok(HookOutcome::proceed())
//!     })
//! });
//! assert!(temperature.hooks().wrap_model_call() && !temperature.hooks().before_model());
//! assert_eq!(count.name(), "Count");
//! ```
//!
//! A middleware with several hooks, state to keep between them, or its own
//! `delete_thread_data` is still a struct implementing [`Middleware`]; both kinds mix
//! freely in one stack.

use super::{
    BoxFuture, HookOutcome, JumpTarget, Middleware, MiddlewareError, ModelRequest, ModelResponse,
    Next, Runtime, ToolCallRequest, ToolNext,
};
use crate::access::StateAccess;
use crate::message::Message;
use crate::model::ModelError;
use crate::state::AgentState;
use crate::tool::ToolError;

/// What a node-hook closure returns: its boxed future of the hook's outcome.
pub type NodeFuture<'a> = BoxFuture<'a, Result<HookOutcome, MiddlewareError>>;

/// What a [`wrap_model`] closure returns: its boxed future of the model's response.
pub type ModelFuture<'a> = BoxFuture<'a, Result<ModelResponse, ModelError>>;

/// What a [`wrap_tool`] closure returns: its boxed future of the tool message.
pub type ToolFuture<'a> = BoxFuture<'a, Result<Message, ToolError>>;

/// A `wrap_model_call` middleware made from a closure: see [`wrap_model`].
///
/// ```
/// use keel_core::middleware::{Middleware, from_fn::{WrapModel, wrap_model}};
///
/// let passthrough: WrapModel<_> =
///     wrap_model("Passthrough", |request, next| Box::pin(next.run(request)));
/// assert!(passthrough.hooks().wrap_model_call());
/// ```
pub struct WrapModel<F> {
    name: String,
    access: StateAccess,
    f: F,
}

/// Middleware around every model call from a closure `|request, next|` returning
/// `Box::pin(async move { ... })`: change the request, call `next.run(request)` zero
/// times, once or more, and return the response. Declares only `wrap_model_call`.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use keel_core::middleware::{Middleware, from_fn::wrap_model};
///
/// // Keeps only the last message in what the model is sent (state keeps everything).
/// let last_one = wrap_model("LastOne", |request, next| {
///     Box::pin(async move {
///         let skip = request.messages.len().saturating_sub(1);
///         let recent = request.messages[skip..].to_vec();
///         next.run(request.with_messages(recent)).await
///     })
/// });
/// let hooks = last_one.hooks();
/// assert!(hooks.wrap_model_call() && !hooks.before_model() && !hooks.wrap_tool_call());
/// # });
/// ```
pub fn wrap_model<F>(name: impl Into<String>, f: F) -> WrapModel<F>
where
    F: for<'a> Fn(ModelRequest, Next<'a>) -> ModelFuture<'a> + Send + Sync,
{
    WrapModel {
        name: name.into(),
        access: StateAccess::default(),
        f,
    }
}

impl<F> WrapModel<F> {
    /// Declares the named state values it reads and writes ([`Middleware::state_access`]).
    ///
    /// ```
    /// use keel_core::StateAccess;
    /// use keel_core::middleware::{Middleware, from_fn::wrap_model};
    ///
    /// let m = wrap_model("ReadsPlan", |request, next| Box::pin(next.run(request)))
    ///     .with_state_access(StateAccess::default().read("plan"));
    /// assert_eq!(m.state_access().reads, ["plan"]);
    /// ```
    pub fn with_state_access(mut self, access: StateAccess) -> Self {
        self.access = access;
        self
    }
}

#[keel_core::middleware]
impl<F> Middleware for WrapModel<F>
where
    F: for<'a> Fn(ModelRequest, Next<'a>) -> ModelFuture<'a> + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn state_access(&self) -> StateAccess {
        self.access.clone()
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        (self.f)(request, next).await
    }
}

/// A `wrap_tool_call` middleware made from a closure: see [`wrap_tool`].
///
/// ```
/// use keel_core::middleware::{Middleware, from_fn::{WrapTool, wrap_tool}};
///
/// let passthrough: WrapTool<_> =
///     wrap_tool("Passthrough", |request, next| Box::pin(next.run(request)));
/// assert!(passthrough.hooks().wrap_tool_call());
/// ```
pub struct WrapTool<F> {
    name: String,
    access: StateAccess,
    f: F,
}

/// Middleware around every tool call from a closure `|request, next|` returning
/// `Box::pin(async move { ... })`: look at `request.call`, call `next.run(request)` (or
/// answer without running the tool) and return the tool message. Declares only
/// `wrap_tool_call`.
///
/// ```
/// use keel_core::message::Message;
/// use keel_core::middleware::{Middleware, from_fn::wrap_tool};
///
/// // Refuses one tool, runs the others.
/// let no_shell = wrap_tool("NoShell", |request, next| {
///     Box::pin(async move {
///         if request.call.name == "shell" {
///             return Ok(Message::tool_error(request.call.id.clone(), "shell is disabled here"));
///         }
///         next.run(request).await
///     })
/// });
/// let hooks = no_shell.hooks();
/// assert!(hooks.wrap_tool_call() && !hooks.wrap_model_call());
/// ```
pub fn wrap_tool<F>(name: impl Into<String>, f: F) -> WrapTool<F>
where
    F: for<'a> Fn(ToolCallRequest, ToolNext<'a>) -> ToolFuture<'a> + Send + Sync,
{
    WrapTool {
        name: name.into(),
        access: StateAccess::default(),
        f,
    }
}

impl<F> WrapTool<F> {
    /// Declares the named state values it reads and writes ([`Middleware::state_access`]).
    ///
    /// ```
    /// use keel_core::StateAccess;
    /// use keel_core::middleware::{Middleware, from_fn::wrap_tool};
    ///
    /// let m = wrap_tool("ReadsPlan", |request, next| Box::pin(next.run(request)))
    ///     .with_state_access(StateAccess::default().read("plan"));
    /// assert_eq!(m.state_access().reads, ["plan"]);
    /// ```
    pub fn with_state_access(mut self, access: StateAccess) -> Self {
        self.access = access;
        self
    }
}

#[keel_core::middleware]
impl<F> Middleware for WrapTool<F>
where
    F: for<'a> Fn(ToolCallRequest, ToolNext<'a>) -> ToolFuture<'a> + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn state_access(&self) -> StateAccess {
        self.access.clone()
    }
    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        (self.f)(request, next).await
    }
}

/// One node-hook closure type per hook: the struct, its constructor, the builder methods
/// and the `Middleware` impl declaring only that hook.
macro_rules! node_hook {
    (
        $(#[$ty_doc:meta])*
        type $ty:ident;
        $(#[$fn_doc:meta])*
        fn $ctor:ident => $hook:ident;
    ) => {
        $(#[$ty_doc])*
        pub struct $ty<F> {
            name: String,
            access: StateAccess,
            jumps: Vec<JumpTarget>,
            f: F,
        }

        $(#[$fn_doc])*
        pub fn $ctor<F>(name: impl Into<String>, f: F) -> $ty<F>
        where
            F: for<'a> Fn(&'a AgentState, &'a Runtime) -> NodeFuture<'a> + Send + Sync,
        {
            $ty {
                name: name.into(),
                access: StateAccess::default(),
                jumps: Vec::new(),
                f,
            }
        }

        impl<F> $ty<F> {
            /// Declares the targets its outcome may jump to ([`Middleware::jump_targets`]);
            /// a jump to any other is an error of the run. None by default.
            ///
            /// ```
            /// use keel_core::middleware::{HookOutcome, JumpTarget, Middleware, from_fn};
            ///
            #[doc = concat!("let m = from_fn::", stringify!($ctor), "(\"Stop\", |_state, _runtime| {")]
            ///     Box::pin(async { Ok(HookOutcome::jump(JumpTarget::End)) })
            /// })
            /// .with_jump_targets([JumpTarget::End]);
            /// assert_eq!(m.jump_targets(), [JumpTarget::End]);
            /// ```
            pub fn with_jump_targets(
                mut self,
                targets: impl IntoIterator<Item = JumpTarget>,
            ) -> Self {
                self.jumps = targets.into_iter().collect();
                self
            }

            /// Declares the named state values it reads and writes
            /// ([`Middleware::state_access`]).
            ///
            /// ```
            /// use keel_core::StateAccess;
            /// use keel_core::middleware::{HookOutcome, Middleware, from_fn};
            ///
            #[doc = concat!("let m = from_fn::", stringify!($ctor), "(\"Plan\", |_state, _runtime| {")]
            ///     Box::pin(async { Ok(HookOutcome::proceed()) })
            /// })
            /// .with_state_access(StateAccess::default().write("plan"));
            /// assert_eq!(m.state_access().writes, ["plan"]);
            /// ```
            pub fn with_state_access(mut self, access: StateAccess) -> Self {
                self.access = access;
                self
            }
        }

        #[keel_core::middleware]
        impl<F> Middleware for $ty<F>
        where
            F: for<'a> Fn(&'a AgentState, &'a Runtime) -> NodeFuture<'a> + Send + Sync,
        {
            fn name(&self) -> &str {
                &self.name
            }
            fn jump_targets(&self) -> &[JumpTarget] {
                &self.jumps
            }
            fn state_access(&self) -> StateAccess {
                self.access.clone()
            }
            async fn $hook(
                &self,
                state: &AgentState,
                runtime: &Runtime,
            ) -> Result<HookOutcome, MiddlewareError> {
                (self.f)(state, runtime).await
            }
        }
    };
}

node_hook! {
    /// A `before_agent` middleware made from a closure: see [`before_agent`].
    ///
    /// ```
    /// use keel_core::middleware::{HookOutcome, Middleware, from_fn::{BeforeAgent, before_agent}};
    ///
    /// let m: BeforeAgent<_> =
    ///     before_agent("Noop", |_state, _runtime| Box::pin(async { Ok(HookOutcome::proceed()) }));
    /// assert!(m.hooks().before_agent());
    /// ```
    type BeforeAgent;
    /// Middleware run once per run, before anything else, from a closure
    /// `|state, runtime|` returning `Box::pin(async move { ... })` with a
    /// [`HookOutcome`]. Declares only `before_agent`.
    ///
    /// ```
    /// use keel_core::message::Message;
    /// use keel_core::middleware::{HookOutcome, Middleware, from_fn::before_agent};
    /// use keel_core::state::StateUpdate;
    ///
    /// // Greets a new thread.
    /// let greet = before_agent("Greet", |state, _runtime| {
    ///     Box::pin(async move {
    ///         if !state.messages.is_empty() {
    ///             return Ok(HookOutcome::proceed());
    ///         }
    ///         let hello = Message::ai("Hello! How can I help?");
    ///         Ok(HookOutcome::update(StateUpdate::messages([hello])))
    ///     })
    /// });
    /// let hooks = greet.hooks();
    /// assert!(hooks.before_agent() && !hooks.before_model() && !hooks.after_agent());
    /// ```
    fn before_agent => before_agent;
}

node_hook! {
    /// A `before_model` middleware made from a closure: see [`before_model`].
    ///
    /// ```
    /// use keel_core::middleware::{HookOutcome, Middleware, from_fn::{BeforeModel, before_model}};
    ///
    /// let m: BeforeModel<_> =
    ///     before_model("Noop", |_state, _runtime| Box::pin(async { Ok(HookOutcome::proceed()) }));
    /// assert!(m.hooks().before_model());
    /// ```
    type BeforeModel;
    /// Middleware run before every model call, from a closure `|state, runtime|`
    /// returning `Box::pin(async move { ... })` with a [`HookOutcome`]. Declares only
    /// `before_model`.
    ///
    /// ```
    /// use keel_core::middleware::{HookOutcome, JumpTarget, Middleware, from_fn::before_model};
    ///
    /// // Ends the run once the thread is long (the jump is declared).
    /// let cap = before_model("Cap", |state, _runtime| {
    ///     Box::pin(async move {
    ///         Ok(if state.messages.len() > 100 {
    ///             HookOutcome::jump(JumpTarget::End)
    ///         } else {
    ///             HookOutcome::proceed()
    ///         })
    ///     })
    /// })
    /// .with_jump_targets([JumpTarget::End]);
    /// assert!(cap.hooks().before_model() && !cap.hooks().after_model());
    /// ```
    fn before_model => before_model;
}

node_hook! {
    /// An `after_model` middleware made from a closure: see [`after_model`].
    ///
    /// ```
    /// use keel_core::middleware::{HookOutcome, Middleware, from_fn::{AfterModel, after_model}};
    ///
    /// let m: AfterModel<_> =
    ///     after_model("Noop", |_state, _runtime| Box::pin(async { Ok(HookOutcome::proceed()) }));
    /// assert!(m.hooks().after_model());
    /// ```
    type AfterModel;
    /// Middleware run after every model call (in reverse order), from a closure
    /// `|state, runtime|` returning `Box::pin(async move { ... })` with a
    /// [`HookOutcome`]. The model's answer is the last message of `state`. Declares only
    /// `after_model`.
    ///
    /// ```
    /// use keel_core::middleware::{HookOutcome, Middleware, from_fn::after_model};
    ///
    /// // Logs each answer.
    /// let log = after_model("Log", |state, runtime| {
    ///     Box::pin(async move {
    ///         if let Some(answer) = state.messages.last() {
    ///             println!("{}: {}", runtime.thread_id, answer.text());
    ///         }
    ///         Ok(HookOutcome::proceed())
    ///     })
    /// });
    /// assert!(log.hooks().after_model() && !log.hooks().before_model());
    /// ```
    fn after_model => after_model;
}

node_hook! {
    /// An `after_agent` middleware made from a closure: see [`after_agent`].
    ///
    /// ```
    /// use keel_core::middleware::{HookOutcome, Middleware, from_fn::{AfterAgent, after_agent}};
    ///
    /// let m: AfterAgent<_> =
    ///     after_agent("Noop", |_state, _runtime| Box::pin(async { Ok(HookOutcome::proceed()) }));
    /// assert!(m.hooks().after_agent());
    /// ```
    type AfterAgent;
    /// Middleware run once per run, at the end (in reverse order), from a closure
    /// `|state, runtime|` returning `Box::pin(async move { ... })` with a
    /// [`HookOutcome`]. Declares only `after_agent`.
    ///
    /// ```
    /// use keel_core::middleware::{HookOutcome, Middleware, MiddlewareError, from_fn::after_agent};
    ///
    /// // Fails a run that ends without an answer.
    /// let must_answer = after_agent("MustAnswer", |state, _runtime| {
    ///     Box::pin(async move {
    ///         match state.messages.last() {
    ///             Some(m) if m.is_ai() => Ok(HookOutcome::proceed()),
    ///             _ => Err(MiddlewareError {
    ///                 middleware: "MustAnswer".into(),
    ///                 hook: "after_agent",
    ///                 message: "the run ended without an answer".into(),
    ///             }),
    ///         }
    ///     })
    /// });
    /// assert!(must_answer.hooks().after_agent() && !must_answer.hooks().before_agent());
    /// ```
    fn after_agent => after_agent;
}

#[cfg(test)]
mod tests;
