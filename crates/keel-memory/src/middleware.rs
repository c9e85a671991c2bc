//! [`SessionMemoryMiddleware`]: session memory as a Keel middleware.
//!
//! In `wrap_model_call` the request's messages are split into the current turn (from the
//! latest run of user messages on: the input and this run's tool loop) and what came
//! before. What came before is replaced by `[summary message, *last N]` from the store
//! (computed once per run, so every model call of a tool loop sends the same prefix),
//! and the current turn follows. State and stored history are never changed by the
//! request rewrite; `before_agent` records the user's input in the chat history and
//! `after_agent` the rest of the turn (unless disabled), idempotently by message id, so
//! a run that fails midway still leaves its input in history and a retried turn writes
//! nothing twice. Those are the only writes besides the state row.
//!
//! Without a store the middleware falls back to the last N earlier messages of the
//! request (pair-safe) and says so once in the log.
//!
//! Place it first (outermost) in the middleware list, so an inner summarization
//! middleware compacts what session memory produced.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use keel_core::message::Message;
use keel_core::middleware::{
    HookOutcome, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next, Runtime,
};
use keel_core::model::{ChatModel, ModelError, ModelErrorKind};
use keel_core::state::AgentState;
use keel_core::store::{ChatHistoryStore, SessionMemoryStore, SessionScope, StoreError};
use keel_summary::SUMMARY_NAME;
use keel_summary::summary_call::SummaryCaller;
use lru::LruCache;
use parking_lot::Mutex;

use crate::compressor::{FoldEngine, SessionCompressor, TurnMemory};
use crate::settings::{SessionMemorySettings, SettingsError};
use crate::window::last_n_pair_safe;

/// The middleware's name (unique within an agent).
pub const NAME: &str = "SessionMemoryMiddleware";

/// Runs remembered at once (a run's prefix is dropped at `after_agent`; the bound only
/// matters for runs that never reach it).
const RUN_CACHE_CAPACITY: usize = 4096;

/// Session memory as a middleware. Build with [`SessionMemoryMiddleware::builder`].
pub struct SessionMemoryMiddleware {
    settings: Arc<SessionMemorySettings>,
    compressor: Option<SessionCompressor>,
    record_history: bool,
    runs: Mutex<LruCache<String, Arc<TurnMemory>>>,
    fallback_logged: AtomicBool,
}

impl std::fmt::Debug for SessionMemoryMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionMemoryMiddleware")
            .field("settings", &self.settings)
            .field("store", &self.compressor.is_some())
            .field("record_history", &self.record_history)
            .finish_non_exhaustive()
    }
}

/// Why a [`SessionMemoryMiddleware`] would never fold a summary. It is logged through
/// `tracing` (warning level) when such a middleware is built, and
/// [`SessionMemoryMiddleware::inactive`] returns it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Inactive {
    /// `n_messages` is 0: memory is off, the model sees the current turn only.
    #[error(
        "session memory is off (n_messages = 0): the model sees the current turn only and \
         nothing is folded; set n_messages to the recent messages to send verbatim"
    )]
    Off,
    /// No store: neither the builder nor the agent gave one, so there is no history to
    /// fold and the model sees the last `n_messages` of the thread, without a summary.
    #[error(
        "session memory has no store: it falls back to the last {n_messages} messages \
         without a summary; give the builder `.store(...)` or the agent `.store(...)` \
         (and add the middleware with `.layer(builder)`)"
    )]
    NoStore {
        /// The recent messages sent verbatim.
        n_messages: usize,
    },
}

/// Builds a [`SessionMemoryMiddleware`].
pub struct SessionMemoryBuilder {
    settings: SessionMemorySettings,
    stores: Option<(Arc<dyn ChatHistoryStore>, Arc<dyn SessionMemoryStore>)>,
    summary_model: Option<Arc<dyn ChatModel>>,
    caller: Option<Arc<SummaryCaller>>,
    engine: FoldEngine,
    record_history: bool,
}

impl SessionMemoryBuilder {
    /// One backend holding both the chat history and the state (every `keel-store`
    /// backend does).
    pub fn store<S>(self, store: Arc<S>) -> Self
    where
        S: ChatHistoryStore + SessionMemoryStore + 'static,
    {
        let history: Arc<dyn ChatHistoryStore> = store.clone();
        let states: Arc<dyn SessionMemoryStore> = store;
        self.stores(history, states)
    }

    /// Separate history and state stores.
    pub fn stores(
        mut self,
        history: Arc<dyn ChatHistoryStore>,
        states: Arc<dyn SessionMemoryStore>,
    ) -> Self {
        self.stores = Some((history, states));
        self
    }

    /// Folds with this model (the run's model is the fallback). Default: the run's model.
    pub fn summary_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.summary_model = Some(model);
        self
    }

    /// The summary caller (retries, timeout, circuit breaker), e.g. one shared with the
    /// summarization middleware.
    pub fn summary_caller(mut self, caller: Arc<SummaryCaller>) -> Self {
        self.caller = Some(caller);
        self
    }

    /// What writes fold summaries (default: a model call; [`FoldEngine::Extractive`] for
    /// offline, deterministic folds).
    pub fn fold_engine(mut self, engine: FoldEngine) -> Self {
        self.engine = engine;
        self
    }

    /// Whether the middleware appends each turn to the chat history (default `true`):
    /// the input when the run starts, the rest when it ends.
    /// Turn it off when the application stores messages itself.
    pub fn record_history(mut self, record: bool) -> Self {
        self.record_history = record;
        self
    }

    /// Validates the settings and builds the middleware.
    pub fn build(self) -> Result<SessionMemoryMiddleware, SettingsError> {
        self.settings.validate()?;
        let compressor = match self.stores {
            Some((history, states)) => {
                let mut c = SessionCompressor::new(self.settings.clone(), history, states)?
                    .with_engine(self.engine);
                if let Some(m) = self.summary_model {
                    c = c.with_summary_model(m);
                }
                if let Some(caller) = self.caller {
                    c = c.with_summary_caller(caller);
                }
                Some(c)
            }
            None => None,
        };
        if let Some(inactive) = inactive(&self.settings, compressor.is_some()) {
            tracing::warn!(middleware = NAME, "{inactive}");
        }
        Ok(SessionMemoryMiddleware {
            settings: Arc::new(self.settings),
            compressor,
            record_history: self.record_history,
            runs: Mutex::new(LruCache::new(
                NonZeroUsize::new(RUN_CACHE_CAPACITY).unwrap_or(NonZeroUsize::MIN),
            )),
            fallback_logged: AtomicBool::new(false),
        })
    }
}

/// Built with the agent (keel-agent's `AgentBuilder::layer`): a builder given no
/// store of its own keeps its history and summaries in the agent's store.
impl keel_core::layer::Layer for SessionMemoryBuilder {
    fn layer(
        self: Box<Self>,
        agent: &keel_core::layer::AgentFacts,
    ) -> Result<Arc<dyn keel_core::middleware::Middleware>, keel_core::layer::LayerError> {
        let mut builder = *self;
        if builder.stores.is_none()
            && let Some(store) = &agent.store
        {
            let history: Arc<dyn ChatHistoryStore> = store.clone();
            let states: Arc<dyn SessionMemoryStore> = store.clone();
            builder = builder.stores(history, states);
        }
        builder
            .build()
            .map(|m| Arc::new(m) as Arc<dyn keel_core::middleware::Middleware>)
            .map_err(|e| keel_core::layer::LayerError {
                middleware: "SessionMemoryMiddleware".into(),
                message: e.to_string(),
            })
    }
}

fn inactive(settings: &SessionMemorySettings, has_store: bool) -> Option<Inactive> {
    if settings.n_messages == 0 {
        Some(Inactive::Off)
    } else if !has_store {
        Some(Inactive::NoStore {
            n_messages: settings.n_messages,
        })
    } else {
        None
    }
}

/// Where the current turn starts: the first of the latest run of consecutive user
/// messages (summary messages excluded); 0 when there is none.
pub fn turn_start(messages: &[Message]) -> usize {
    let is_input = |m: &Message| m.is_human() && m.name() != Some(SUMMARY_NAME);
    let Some(mut start) = messages.iter().rposition(is_input) else {
        return 0;
    };
    while start > 0 && is_input(&messages[start - 1]) {
        start -= 1;
    }
    start
}

fn store_error(scope: &SessionScope, e: StoreError) -> ModelError {
    let kind = match e {
        StoreError::Backend(_) => ModelErrorKind::Connection,
        _ => ModelErrorKind::Rejected,
    };
    ModelError::new(
        kind,
        format!(
            "session memory could not read the history of session {:?} (flow {:?}): {e}",
            scope.session_id, scope.flow_id
        ),
    )
}

impl SessionMemoryMiddleware {
    /// A builder with these settings (validated at `build`).
    pub fn builder(settings: SessionMemorySettings) -> SessionMemoryBuilder {
        SessionMemoryBuilder {
            settings,
            stores: None,
            summary_model: None,
            caller: None,
            engine: FoldEngine::Model,
            record_history: true,
        }
    }

    /// Why this middleware never folds a summary (memory off, or no store), or `None`
    /// when it can.
    pub fn inactive(&self) -> Option<Inactive> {
        inactive(&self.settings, self.compressor.is_some())
    }

    /// The settings.
    pub fn settings(&self) -> &SessionMemorySettings {
        &self.settings
    }

    /// The compressor, when a store is configured.
    pub fn compressor(&self) -> Option<&SessionCompressor> {
        self.compressor.as_ref()
    }

    /// The scope of a run on `thread_id`.
    pub fn scope_for_thread(&self, thread_id: &str) -> SessionScope {
        self.settings.scope_for_thread(thread_id)
    }

    /// Deletes what session memory stored for a session (every context): its chat
    /// history and its state. Deleting a session also takes the agent's checkpoints
    /// (`Agent::delete_thread`) and cached summaries (`SummaryCache::purge_thread`); see
    /// `docs/operations.md`. Without a store there is nothing to delete (returns 0).
    pub async fn delete_session(&self, scope: &SessionScope) -> Result<u64, StoreError> {
        match &self.compressor {
            Some(c) => c.delete_session(scope).await,
            None => Ok(0),
        }
    }

    /// Appends the current turn to the chat history (skipping what is stored).
    async fn record_turn(
        &self,
        state: &AgentState,
        runtime: &Runtime,
        hook: &'static str,
    ) -> Result<(), MiddlewareError> {
        let (true, Some(compressor)) = (self.record_history, &self.compressor) else {
            return Ok(());
        };
        let scope = self.scope_for_thread(&runtime.thread_id);
        let turn = &state.messages[turn_start(&state.messages)..];
        compressor
            .record(&scope, turn)
            .await
            .map_err(|e| MiddlewareError {
                middleware: NAME.to_owned(),
                hook,
                message: format!(
                    "could not append the turn to the chat history of session {:?}: {e}",
                    scope.session_id
                ),
            })?;
        Ok(())
    }

    fn log_fallback_once(&self) {
        if !self.fallback_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                n_messages = self.settings.n_messages,
                "session memory has no store configured: falling back to the last {} messages, without a summary",
                self.settings.n_messages
            );
        }
    }

    async fn prefix(
        &self,
        request: &ModelRequest,
        start: usize,
    ) -> Result<Vec<Message>, ModelError> {
        let n = self.settings.n_messages;
        if n == 0 {
            return Ok(Vec::new());
        }
        let Some(compressor) = &self.compressor else {
            self.log_fallback_once();
            return Ok(last_n_pair_safe(&request.messages[..start], n));
        };
        let run_id = request.runtime.run_id.to_string();
        let cached = self.runs.lock().get(&run_id).cloned();
        let memory = match cached {
            Some(m) => m,
            None => {
                let scope = self.scope_for_thread(&request.runtime.thread_id);
                let memory = compressor
                    .prepare(
                        &scope,
                        &request.messages[start..],
                        &request.model,
                        &request.runtime.writer,
                    )
                    .await
                    .map_err(|e| store_error(&scope, e))?;
                let memory = Arc::new(memory);
                self.runs.lock().put(run_id, memory.clone());
                memory
            }
        };
        Ok(memory.messages())
    }
}

#[keel_core::middleware]
impl Middleware for SessionMemoryMiddleware {
    fn name(&self) -> &str {
        NAME
    }

    /// A fork (a user edited or regenerated an earlier message): the thread's session
    /// starts again from the fork point. Its chat history and summary are deleted and
    /// the fork point's messages recorded again, so the next fold summarizes the new
    /// branch and the abandoned one is never sent. A session shared by every thread (a
    /// fixed `session_id`) or whose history another component records is left alone:
    /// it is not the thread's to rewrite.
    async fn fork_thread_data(
        &self,
        thread_id: &str,
        messages: &[Message],
    ) -> Result<(), StoreError> {
        let (true, Some(compressor), true) = (
            self.record_history,
            &self.compressor,
            self.settings.scope.session_id.is_empty(),
        ) else {
            return Ok(());
        };
        let scope = self.scope_for_thread(thread_id);
        compressor.delete_session(&scope).await?;
        compressor.record(&scope, messages).await?;
        Ok(())
    }

    /// The thread's session (every context): chat history and state. A session
    /// configured with a fixed `session_id` is shared by every thread and not the
    /// thread's to delete: delete it with [`SessionMemoryMiddleware::delete_session`].
    async fn delete_thread_data(&self, thread_id: &str) -> Result<u64, StoreError> {
        if !self.settings.scope.session_id.is_empty() {
            return Ok(0);
        }
        self.delete_session(&self.scope_for_thread(thread_id)).await
    }

    async fn before_agent(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.record_turn(state, runtime, "before_agent").await?;
        Ok(HookOutcome::proceed())
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let start = turn_start(&request.messages);
        let mut messages = self.prefix(&request, start).await?;
        messages.extend(request.messages[start..].iter().cloned());
        next.run(request.with_messages(messages)).await
    }

    async fn after_agent(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.runs.lock().pop(runtime.run_id.as_ref());
        self.record_turn(state, runtime, "after_agent").await?;
        Ok(HookOutcome::proceed())
    }
}
