//! One run of the agent loop: before_agent → (before_model → model → after_model →
//! tools)* → after_agent, with every step checkpointed and streamed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::StreamExt;
use keel_core::dangling::{DanglingCall, cancelled_result};
use keel_core::message::{Message, MessageBody, ToolCall, new_id};
use keel_core::middleware::{
    HookOutcome, JumpTarget, Middleware, MiddlewareError, ModelHandler, ModelRequest,
    ModelResponse, Next, Runtime, ToolCallRequest, ToolHandler, ToolNext,
};
use keel_core::model::{
    ChatChunk, ChatModel, ChunkAggregator, ModelError, ModelSettings, ToolChoice,
};
use keel_core::state::{AgentState, Lineage, MessageOp, StateUpdate};
use keel_core::store::{CheckpointWrite, Checkpointer, PutOutcome};
use keel_core::stream::{StreamEvent, StreamWriter};
use keel_core::telemetry;
use keel_core::tool::{Tool, ToolError, ToolSpec, Toolset};
use serde_json::Value;
use tracing::Instrument;

use crate::error::AgentError;
use crate::multitask::{Refusal, Registry, Turn};
use crate::options::RunOptions;
use crate::output::{Modes, RunOutput};
use crate::pipeline::{INPUT_NODE, MODEL_NODE, NodeHook, Pipeline, ROLLBACK_NODE, TOOLS_NODE};
use crate::strategy::{CancelAction, MultitaskStrategy};

/// How often a run reloads the thread and tries again when another writer moved the
/// head before the run wrote anything (its input is then simply appended after theirs).
const START_ATTEMPTS: usize = 8;

/// Everything an agent is made of, shared by its runs (built by
/// [`AgentBuilder`](crate::AgentBuilder)).
pub(crate) struct Inner {
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) tools: HashMap<String, Arc<dyn Tool>>,
    pub(crate) tool_specs: Arc<Vec<ToolSpec>>,
    pub(crate) tool_names: String,
    /// Tools that may change between calls, asked for their current set each step.
    pub(crate) toolsets: Vec<Arc<dyn Toolset>>,
    pub(crate) system: Option<Message>,
    pub(crate) settings: ModelSettings,
    pub(crate) tool_choice: Option<ToolChoice>,
    pub(crate) middleware: Vec<Arc<dyn Middleware>>,
    pub(crate) pipeline: Pipeline,
    pub(crate) checkpointer: Arc<dyn Checkpointer>,
    pub(crate) recursion_limit: usize,
    pub(crate) multitask: MultitaskStrategy,
    pub(crate) registry: Arc<Registry>,
    /// Per thread (bounded): the head seq this agent's last successful run ended on, and
    /// the lineage of its message list. A run that starts from that same head continues
    /// the lineage, so middleware that remember the list (token counts, summarization's
    /// scans) look at the new messages only; any other head starts a fresh lineage.
    pub(crate) lineages: parking_lot::Mutex<lru::LruCache<String, (u64, Lineage)>>,
}

/// The tools of an agent's toolsets at one moment, beside its fixed tools.
struct CurrentTools {
    /// Each toolset's tools whose names no fixed tool or earlier toolset took.
    extra: Vec<Arc<dyn Tool>>,
    fixed_names: String,
}

impl CurrentTools {
    fn names(&self) -> String {
        let mut names = self.fixed_names.clone();
        for tool in &self.extra {
            if !names.is_empty() {
                names.push_str(", ");
            }
            names.push_str(&tool.spec().name);
        }
        names
    }
}

impl Inner {
    /// The toolsets' current tools, or `None` when the agent has no toolset.
    fn current_tools(&self) -> Option<CurrentTools> {
        if self.toolsets.is_empty() {
            return None;
        }
        let mut taken: std::collections::HashSet<String> = self.tools.keys().cloned().collect();
        let mut extra = Vec::new();
        for set in &self.toolsets {
            for tool in set.tools().iter() {
                if taken.insert(tool.spec().name.clone()) {
                    extra.push(tool.clone());
                }
            }
        }
        Some(CurrentTools {
            extra,
            fixed_names: self.tool_names.clone(),
        })
    }

    /// What the model is offered now: the fixed tools, then the toolsets' tools.
    fn current_specs(&self) -> Arc<Vec<ToolSpec>> {
        match self.current_tools() {
            None => self.tool_specs.clone(),
            Some(current) => {
                let mut specs = self.tool_specs.as_ref().clone();
                specs.extend(current.extra.iter().map(|t| t.spec().clone()));
                Arc::new(specs)
            }
        }
    }

    /// The tool a call of `name` runs.
    fn find_tool(&self, current: Option<&CurrentTools>, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned().or_else(|| {
            current?
                .extra
                .iter()
                .find(|t| t.spec().name == name)
                .cloned()
        })
    }
}

/// How many threads' lineages an agent remembers.
pub(crate) const LINEAGE_THREADS: std::num::NonZeroUsize = match std::num::NonZeroUsize::new(4096) {
    Some(n) => n,
    None => std::num::NonZeroUsize::MIN,
};

/// Message ops a run works through between two yield points. A run is a future polled
/// by whoever drives it (the server's run loop, which also watches for a cancel): work
/// that never returns `Pending` cannot be stopped, so large inputs are taken in slices.
const YIELD_EVERY: usize = 1024;

/// Returns `Pending` once, waking itself first, so whoever polls the run gets control
/// back (to notice a cancel, or to run other tasks on the same thread) and then polls it
/// again. Independent of the runtime, like the rest of the run.
fn yield_now() -> impl std::future::Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
}

/// [`AgentState::apply`], giving control back between slices of a large update. The
/// update is checked first, so no slice fails; each slice holds at least as many ops as
/// the list has messages, which keeps the reducer's per-slice index building linear
/// overall. Dropped in between, the state is half-updated, but the run it belongs to is
/// gone and nothing of this step was checkpointed.
async fn apply_yielding(
    state: &mut AgentState,
    mut update: StateUpdate,
) -> Result<(), keel_core::state::StateError> {
    if update.messages.len() <= YIELD_EVERY {
        return state.apply(update);
    }
    state.check(&update)?;
    let values = std::mem::take(&mut update.values);
    let mut ops = update.messages.into_iter();
    loop {
        let slice: Vec<MessageOp> = ops
            .by_ref()
            .take(YIELD_EVERY.max(state.messages.len()))
            .collect();
        if slice.is_empty() {
            break;
        }
        state.apply(StateUpdate {
            messages: slice,
            values: serde_json::Map::new(),
        })?;
        yield_now().await;
    }
    state.apply(StateUpdate {
        messages: Vec::new(),
        values,
    })
}

/// Where the loop goes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    BeforeModel,
    Model,
    AfterModel,
    Tools,
    AfterAgent,
}

impl From<JumpTarget> for Phase {
    fn from(t: JumpTarget) -> Self {
        match t {
            JumpTarget::Model => Phase::BeforeModel,
            JumpTarget::Tools => Phase::Tools,
            JumpTarget::End => Phase::AfterAgent,
        }
    }
}

/// One run's mutable facts.
pub(crate) struct Run {
    thread_id: Arc<str>,
    run_id: Arc<str>,
    writer: StreamWriter,
    modes: Modes,
    state: Arc<AgentState>,
    /// The checkpoint `state` is (`None`: the thread is empty).
    head: Option<u64>,
    /// True once this run saved a checkpoint.
    wrote: bool,
    /// The earlier checkpoint the run starts from (a fork), until its first write
    /// starts the new branch; `None`: the run continues the thread's head.
    from: Option<u64>,
    /// The state the run started from, before its input (what `rollback` restores).
    base: Option<Arc<AgentState>>,
    /// Calls that reached the model (every attempt of a retrying wrap hook counts).
    calls: AtomicU64,
    model_steps: usize,
    /// What this run does when another holds its thread (`None`: the agent's).
    multitask: Option<MultitaskStrategy>,
}

impl Run {
    pub(crate) fn new(thread_id: &str, writer: StreamWriter, modes: Modes) -> Self {
        Run {
            thread_id: Arc::from(thread_id),
            run_id: Arc::from(new_id().as_str()),
            writer,
            modes,
            state: Arc::new(AgentState::default()),
            head: None,
            wrote: false,
            from: None,
            base: None,
            calls: AtomicU64::new(0),
            model_steps: 0,
            multitask: None,
        }
    }

    /// The run as `options` set it: its checkpoint (see [`Checkpointer::fork`]), its
    /// strategy and its id.
    pub(crate) fn with(mut self, options: RunOptions) -> Self {
        self.from = options.checkpoint;
        self.multitask = options.multitask;
        if let Some(id) = options.run_id {
            self.run_id = Arc::from(id.as_str());
        }
        self
    }

    pub(crate) async fn execute(
        mut self,
        inner: Arc<Inner>,
        input: Vec<Message>,
    ) -> Result<RunOutput, AgentError> {
        let inner = &*inner;
        let strategy = self.multitask.unwrap_or(inner.multitask);
        let turn = match inner
            .registry
            .enter(&self.thread_id, &self.run_id, strategy)
            .await
        {
            Ok(turn) => turn,
            Err(Refusal::Busy) => {
                return Err(AgentError::Rejected {
                    thread_id: self.thread_id.to_string(),
                    strategy,
                });
            }
            Err(Refusal::DuplicateId) => {
                return Err(AgentError::DuplicateRunId {
                    thread_id: self.thread_id.to_string(),
                    run_id: self.run_id.to_string(),
                });
            }
            Err(Refusal::Cancelled(action)) => return Err(self.stopped(action)),
        };
        let span = telemetry::agent_span(&self.thread_id, &self.run_id, inner.model.profile());
        let result = self
            .run_turn(inner, &turn, input)
            .instrument(span.clone())
            .await;
        telemetry::record_agent(&span, self.model_steps, result.as_ref().map(|_| ()));
        drop(turn);
        result?;
        if let Some(head) = self.head {
            inner
                .lineages
                .lock()
                .put(self.thread_id.to_string(), (head, self.state.lineage));
        }
        let state = Arc::try_unwrap(self.state).unwrap_or_else(|shared| (*shared).clone());
        Ok(RunOutput {
            state,
            run_id: self.run_id.to_string(),
            model_steps: self.model_steps,
        })
    }

    /// The run, once it holds the thread.
    async fn run_turn(
        &mut self,
        inner: &Inner,
        turn: &Turn,
        input: Vec<Message>,
    ) -> Result<(), AgentError> {
        // A run that a rollback preempts before it starts ends without writing: its work
        // would be reverted anyway.
        if turn.preempted() == Some(CancelAction::Rollback) {
            return Err(self.stopped(CancelAction::Rollback));
        }
        let mut attempt = 1;
        loop {
            match self.start(inner, &input).await {
                Err(AgentError::Conflict { .. }) if !self.wrote && attempt < START_ATTEMPTS => {
                    attempt += 1;
                }
                other => break other?,
            }
        }

        let mut phase = match self.node_hooks(inner, NodeHook::BeforeAgent).await? {
            Some(jump) => Phase::from(jump),
            None => Phase::BeforeModel,
        };
        loop {
            // A newer run (or a cancel) wants the thread: stop between steps. Under
            // `interrupt` the saved steps stay, and after_agent still runs so that what
            // they hold reaches chat history; under `rollback` the run reverts them
            // itself, still holding the thread, so they are gone whether or not a run
            // comes after it.
            if let Some(action) = turn.preempted().filter(|_| phase != Phase::AfterAgent) {
                match action {
                    CancelAction::Rollback => {
                        // `start`, which ran before any step, set the base.
                        if let Some(base) = self.base.clone() {
                            self.roll_back_to(inner, &base).await?;
                        }
                    }
                    CancelAction::Interrupt => {
                        self.node_hooks(inner, NodeHook::AfterAgent).await?;
                    }
                }
                return Err(self.stopped(action));
            }
            phase = match phase {
                Phase::BeforeModel => match self.node_hooks(inner, NodeHook::BeforeModel).await? {
                    Some(jump) => Phase::from(jump),
                    None => Phase::Model,
                },
                Phase::Model => {
                    self.model_step(inner).await?;
                    Phase::AfterModel
                }
                Phase::AfterModel => match self.node_hooks(inner, NodeHook::AfterModel).await? {
                    Some(jump) => Phase::from(jump),
                    None if pending_tool_calls(&self.state.messages).is_empty() => {
                        after_answered_calls(&self.state.messages)
                    }
                    None => Phase::Tools,
                },
                Phase::Tools => {
                    self.tools_step(inner).await?;
                    Phase::BeforeModel
                }
                Phase::AfterAgent => break,
            };
        }
        // after_agent ends the run: `end` is the only jump that makes sense there.
        if let Some(jump) = self.node_hooks(inner, NodeHook::AfterAgent).await?
            && jump != JumpTarget::End
        {
            return Err(AgentError::JumpAfterEnd { target: jump });
        }
        Ok(())
    }

    /// Loads the thread's head, then saves the input
    /// after a synthetic result for every tool call the last run left unanswered (a
    /// crash or an interrupt between the model call and the tool results): providers
    /// refuse a call without a result, and re-running a tool with side effects on
    /// resume would be worse.
    async fn start(&mut self, inner: &Inner, input: &[Message]) -> Result<(), AgentError> {
        self.load_head(inner).await?;
        if self.head.is_none() {
            self.write_empty_first(inner).await?;
        }
        if self.from.is_some() {
            self.fork_middleware_data(inner).await?;
        }
        self.base = Some(self.state.clone());
        self.save_input(inner, input).await
    }

    /// Reads the state the run works on: the thread's head, or the checkpoint a fork
    /// starts from (a fork from the head itself is a plain run).
    async fn load_head(&mut self, inner: &Inner) -> Result<(), AgentError> {
        let latest = inner
            .checkpointer
            .latest(&self.thread_id)
            .await
            .map_err(|source| self.store_error(source))?;
        let head = latest.as_ref().map(|cp| cp.seq);
        if head == self.from {
            self.from = None;
        }
        let latest = match self.from {
            // A fork: the run works on `from`'s state and swaps the head it read.
            Some(from) if !self.wrote => Some(
                inner
                    .checkpointer
                    .checkpoint_at(&self.thread_id, from)
                    .await
                    .map_err(|source| self.store_error(source))?
                    .ok_or_else(|| AgentError::UnknownCheckpoint {
                        thread_id: self.thread_id.to_string(),
                        checkpoint: from,
                    })?,
            ),
            _ => latest,
        };
        (self.state, self.head) = match latest {
            Some(cp) if self.from.is_some() => (
                Arc::new(AgentState {
                    lineage: Lineage::fresh(),
                    messages: Arc::new(cp.messages),
                    values: cp.values,
                }),
                head,
            ),
            Some(cp) => (
                Arc::new(AgentState {
                    lineage: inner
                        .lineages
                        .lock()
                        .get(self.thread_id.as_ref())
                        .filter(|(seq, _)| *seq == cp.seq)
                        .map_or_else(Lineage::fresh, |(_, lineage)| *lineage),
                    messages: Arc::new(cp.messages),
                    values: cp.values,
                }),
                Some(cp.seq),
            ),
            None => (Arc::new(AgentState::default()), None),
        };
        Ok(())
    }

    /// Writes a thread's first checkpoint, which is empty (LangGraph's step -1, before
    /// the input), so a fork from it can replace the first message.
    async fn write_empty_first(&mut self, inner: &Inner) -> Result<(), AgentError> {
        let write = CheckpointWrite {
            parent: None,
            run_id: self.run_id.to_string(),
            node: INPUT_NODE.to_owned(),
            update: StateUpdate::default(),
            created_at_ms: now_ms(),
        };
        match inner
            .checkpointer
            .put(&self.thread_id, write)
            .await
            .map_err(|source| self.store_error(source))?
        {
            PutOutcome::Saved { seq } => self.head = Some(seq),
            PutOutcome::Conflict { head } => {
                return Err(AgentError::Conflict {
                    thread_id: self.thread_id.to_string(),
                    parent: None,
                    head,
                });
            }
        }
        Ok(())
    }

    /// A fork (time travel): middleware that keep their own copy of the history follow
    /// the fork point before any hook reads it, so the abandoned branch is never sent to
    /// the model (a regenerate writes nothing before the model call, so this cannot wait
    /// for the fork's first write).
    async fn fork_middleware_data(&self, inner: &Inner) -> Result<(), AgentError> {
        for m in &inner.middleware {
            m.fork_thread_data(&self.thread_id, &self.state.messages)
                .await
                .map_err(|source| AgentError::ForkThreadData {
                    thread_id: self.thread_id.to_string(),
                    middleware: m.name().to_owned(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Restores `base` (the state this run started from, before its input) when a newer
    /// run or a cancel rolls it back, unless the state already is that.
    async fn roll_back_to(&mut self, inner: &Inner, base: &AgentState) -> Result<(), AgentError> {
        if *base == *self.state {
            return Ok(());
        }
        let update = StateUpdate::restoring(base.messages.iter().cloned(), base.values.clone());
        self.commit(inner, ROLLBACK_NODE, update, true).await?;
        Ok(())
    }

    /// Saves the input after a synthetic result for every tool call the last run left
    /// unanswered.
    async fn save_input(&mut self, inner: &Inner, input: &[Message]) -> Result<(), AgentError> {
        // A run paused on purpose (human in the loop) resumes its pending calls.
        let paused = self
            .state
            .values
            .get(keel_core::state::INTERRUPT_KEY)
            .is_some_and(|v| !v.is_null());
        let dangling = if paused {
            Vec::new()
        } else {
            pending_tool_calls(&self.state.messages)
        };
        let mut first: Vec<Message> = dangling
            .into_iter()
            .map(|call| {
                cancelled_result(&DanglingCall {
                    ai_index: 0,
                    insert_at: 0,
                    call_id: call.id,
                    tool_name: call.name,
                })
            })
            .collect();
        first.extend(input.iter().cloned());
        if !first.is_empty() {
            self.commit(inner, INPUT_NODE, StateUpdate::messages(first), false)
                .await?;
        }
        Ok(())
    }

    /// The error of a run a newer one (or a cancel) stopped.
    fn stopped(&self, action: CancelAction) -> AgentError {
        let thread_id = self.thread_id.to_string();
        let run_id = self.run_id.to_string();
        match action {
            CancelAction::Rollback => AgentError::RolledBack { thread_id, run_id },
            CancelAction::Interrupt => AgentError::Interrupted { thread_id, run_id },
        }
    }

    fn runtime(&self, node: &str) -> Runtime {
        Runtime {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            // Labelling costs an allocation; skip it when nobody listens.
            writer: if self.writer.is_connected() {
                self.writer.for_node(node)
            } else {
                StreamWriter::disconnected()
            },
            model_call_index: self.calls.load(Ordering::Relaxed),
        }
    }

    fn store_error(&self, source: keel_core::store::StoreError) -> AgentError {
        AgentError::Checkpoint {
            thread_id: self.thread_id.to_string(),
            source,
        }
    }

    /// Applies an update, announces it, and saves it as a checkpoint after the run's
    /// head (compare-and-swap: a head moved by another writer is
    /// [`AgentError::Conflict`]).
    async fn commit(
        &mut self,
        inner: &Inner,
        node: &str,
        mut update: StateUpdate,
        announce: bool,
    ) -> Result<(), AgentError> {
        // Ids first, so the checkpoint stores the messages the state holds.
        for (i, op) in update.messages.iter_mut().enumerate() {
            if let MessageOp::Upsert { message } = op
                && message.id().is_empty()
            {
                message.set_id(new_id());
            }
            if i % YIELD_EVERY == YIELD_EVERY - 1 {
                yield_now().await;
            }
        }
        let event = (announce && self.modes.updates).then(|| update.clone());
        let write = CheckpointWrite {
            parent: self.head,
            run_id: self.run_id.to_string(),
            node: node.to_owned(),
            update: update.clone(),
            created_at_ms: now_ms(),
        };
        apply_yielding(Arc::make_mut(&mut self.state), update)
            .await
            .map_err(|source| AgentError::State {
                node: node.to_owned(),
                source,
            })?;
        if let Some(update) = event {
            self.writer.send(StreamEvent::Updates {
                node: node.to_owned(),
                update,
            });
        }
        let outcome = match self.from {
            Some(from) => inner.checkpointer.fork(&self.thread_id, from, write).await,
            None => inner.checkpointer.put(&self.thread_id, write).await,
        }
        .map_err(|source| self.store_error(source))?;
        match outcome {
            PutOutcome::Saved { seq } => {
                let parent = self.head;
                self.head = Some(seq);
                self.wrote = true;
                self.from = None;
                if self.modes.checkpoints {
                    self.writer.send(StreamEvent::Checkpoint {
                        seq,
                        parent,
                        node: node.to_owned(),
                        state: self.state.clone(),
                    });
                }
            }
            PutOutcome::Conflict { head } => {
                return Err(AgentError::Conflict {
                    thread_id: self.thread_id.to_string(),
                    parent: self.head,
                    head,
                });
            }
        }
        self.emit_values();
        Ok(())
    }

    /// `tasks` mode: `node` starts from the current state.
    fn task_start(&self, node: &str) {
        if self.modes.tasks {
            self.writer.send(StreamEvent::TaskStart {
                node: node.to_owned(),
                input: self.state.clone(),
            });
        }
    }

    /// `tasks` mode: `node` ended, having written `update`.
    fn task_end(&self, node: &str, update: &StateUpdate) {
        if self.modes.tasks {
            self.writer.send(StreamEvent::TaskEnd {
                node: node.to_owned(),
                update: update.clone(),
            });
        }
    }

    fn emit_values(&self) {
        if self.modes.values {
            self.writer.send(StreamEvent::Values {
                state: self.state.clone(),
            });
        }
    }

    /// Runs one node hook of every middleware that implements it, in the hook's order.
    /// A jump skips the remaining middleware of the same hook, as a graph edge would.
    async fn node_hooks(
        &mut self,
        inner: &Inner,
        hook: NodeHook,
    ) -> Result<Option<JumpTarget>, AgentError> {
        let list = inner.pipeline.node_hooks(hook);
        // Without a consumer the node label is never read: one runtime serves every hook.
        let shared = (!self.writer.is_connected()).then(|| self.runtime(""));
        for entry in list {
            let labelled;
            let runtime = match &shared {
                Some(runtime) => runtime,
                None => {
                    labelled = self.runtime(&entry.node);
                    &labelled
                }
            };
            let m = &entry.middleware;
            self.task_start(&entry.node);
            let outcome: Result<HookOutcome, MiddlewareError> = match hook {
                NodeHook::BeforeAgent => m.before_agent(&self.state, runtime).await,
                NodeHook::BeforeModel => m.before_model(&self.state, runtime).await,
                NodeHook::AfterModel => m.after_model(&self.state, runtime).await,
                NodeHook::AfterAgent => m.after_agent(&self.state, runtime).await,
            };
            let HookOutcome { update, jump } = outcome?;
            self.task_end(&entry.node, &update);
            // A node that wrote nothing emits no `values` (as in LangGraph, where values
            // follow a step only when it wrote a channel): the state is the one the last
            // write sent, and a client would receive the whole thread again for nothing.
            if !update.is_empty() {
                self.commit(inner, &entry.node, update, true).await?;
            }
            if let Some(target) = jump {
                let declared = m.jump_targets();
                if !declared.contains(&target) {
                    return Err(AgentError::UndeclaredJump {
                        middleware: m.name().to_owned(),
                        hook: hook.name(),
                        target,
                        declared: declared.to_vec(),
                    });
                }
                return Ok(Some(target));
            }
        }
        Ok(None)
    }

    async fn model_step(&mut self, inner: &Inner) -> Result<(), AgentError> {
        if self.model_steps >= inner.recursion_limit {
            return Err(AgentError::RecursionLimit {
                limit: inner.recursion_limit,
            });
        }
        self.model_steps += 1;
        let call_index = self.calls.load(Ordering::Relaxed);
        let request = ModelRequest {
            messages: self.state.messages.clone(),
            system: inner.system.clone(),
            tools: inner.current_specs(),
            tool_choice: inner.tool_choice.clone(),
            settings: inner.settings.clone(),
            model: inner.model.clone(),
            state: self.state.clone(),
            runtime: self.runtime(MODEL_NODE),
        };
        let terminal = AgentModel {
            writer: self.modes.messages.then(|| self.writer.clone()),
            calls: &self.calls,
        };
        self.task_start(MODEL_NODE);
        let response = Next::new(&inner.pipeline.wrap_model, &terminal)
            .run(request)
            .await
            .map_err(|source| AgentError::Model { call_index, source })?;
        // The wrap hooks' update goes first: if it rebuilds the list, the answer follows it.
        let mut update = response.update;
        update.messages.push(MessageOp::Upsert {
            message: response.message,
        });
        self.task_end(MODEL_NODE, &update);
        self.commit(inner, MODEL_NODE, update, true).await
    }

    async fn tools_step(&mut self, inner: &Inner) -> Result<(), AgentError> {
        let calls = pending_tool_calls(&self.state.messages);
        if calls.is_empty() {
            // A `tools` jump with nothing pending: no step, no checkpoint.
            return Ok(());
        }
        let current = inner.current_tools();
        let available: std::borrow::Cow<'_, str> = match &current {
            None => std::borrow::Cow::Borrowed(&inner.tool_names),
            Some(c) => std::borrow::Cow::Owned(c.names()),
        };
        let terminal = AgentTool {
            available: &available,
        };
        let runtime = self.runtime(TOOLS_NODE);
        let chain = &inner.pipeline.wrap_tool;
        self.task_start(TOOLS_NODE);
        // Polled together (not spawned): the calls overlap without needing a runtime handle.
        let results = futures::future::join_all(calls.into_iter().map(|call| {
            let request = ToolCallRequest {
                tool: inner.find_tool(current.as_ref(), &call.name),
                call,
                state: self.state.clone(),
                runtime: runtime.clone(),
            };
            let terminal = &terminal;
            let span = telemetry::tool_span(
                &request.call,
                request.tool.as_ref().map(|t| t.spec().description.as_str()),
            );
            async move {
                let id = request.call.id.clone();
                let name = request.call.name.clone();
                let message = match ToolNext::new(chain, terminal)
                    .run(request)
                    .instrument(span.clone())
                    .await
                {
                    Ok(message) => message,
                    Err(e) => Message::tool_error(id, e.to_string()).with_name(name),
                };
                telemetry::record_tool(&span, &message);
                message
            }
        }))
        .await;
        let update = StateUpdate::messages(results);
        self.task_end(TOOLS_NODE, &update);
        self.commit(inner, TOOLS_NODE, update, true).await
    }
}

/// Where the loop goes when nothing is pending: the end, unless the last AI message
/// called tools and every call was answered without running (a middleware injected the
/// results, e.g. a tool-call limit), in which case the model reads those results, as in
/// LangChain's `create_agent` (`_make_model_to_tools_edge`, step 6).
fn after_answered_calls(messages: &[Message]) -> Phase {
    match messages.iter().rposition(Message::is_ai) {
        Some(i) if !messages[i].tool_calls().is_empty() => Phase::BeforeModel,
        _ => Phase::AfterAgent,
    }
}

/// Tool calls of the last AI message that have no result after it yet.
pub(crate) fn pending_tool_calls(messages: &[Message]) -> Vec<ToolCall> {
    keel_core::pairs::pending_calls(messages)
        .into_iter()
        .cloned()
        .collect()
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The innermost model call of the agent: streams the model, forwards each chunk to the
/// `messages` stream, and assembles the answer. Middleware that call a [`ChatModel`]
/// themselves (a summary call) bypass this handler, so their tokens never reach users.
struct AgentModel<'a> {
    writer: Option<StreamWriter>,
    calls: &'a AtomicU64,
}

#[async_trait]
impl ModelHandler for AgentModel<'_> {
    /// One `chat` span per call that reaches the model (each attempt of a retry).
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let chat = telemetry::ChatSpan::new(
            request.model.profile(),
            &request.chat_request(),
            telemetry::CallPurpose::Agent,
        );
        let result = self
            .stream_answer(request)
            .instrument(chat.span().clone())
            .await;
        chat.record(&result);
        result.map(ModelResponse::new)
    }
}

impl AgentModel<'_> {
    async fn stream_answer(&self, request: ModelRequest) -> Result<Message, ModelError> {
        let call_index = self.calls.fetch_add(1, Ordering::Relaxed);
        // The answer's id, known before its first chunk: the chunks carry it, and a
        // streamed answer is stored under it, as in LangGraph. (An answer nobody
        // streamed keeps the id its model gave it.)
        let message_id = new_id();
        let mut streamed = false;
        let mut stream = request.model.stream(request.chat_request()).await?;
        let mut aggregator = ChunkAggregator::new();
        while let Some(chunk) = stream.next().await {
            let chunk: ChatChunk = chunk?;
            aggregator.push(&chunk);
            // The whole answer repeats the pieces already streamed; `updates` and
            // `values` carry it.
            if matches!(chunk, ChatChunk::Complete { .. }) {
                continue;
            }
            if let Some(writer) = &self.writer {
                streamed = true;
                writer.send(StreamEvent::Messages {
                    chunk,
                    node: MODEL_NODE.to_owned(),
                    call_index,
                    message_id: message_id.clone(),
                });
            }
        }
        let mut message = aggregator.finish()?;
        if streamed {
            // Stored under the id its chunks carried, so a client merges them.
            message.set_id(message_id);
        }
        if let MessageBody::Ai(ai) = message.body_mut() {
            let profile = request.model.profile();
            ai.response_metadata
                .entry("provider")
                .or_insert_with(|| Value::String(profile.provider.clone()));
            ai.response_metadata
                .entry("model")
                .or_insert_with(|| Value::String(profile.name.clone()));
        }
        Ok(message)
    }
}

/// The innermost tool call: an unknown tool or a tool failure is a [`ToolError`], which
/// the tools step turns into an error tool message.
struct AgentTool<'a> {
    available: &'a str,
}

#[async_trait]
impl ToolHandler for AgentTool<'_> {
    async fn call(&self, request: ToolCallRequest) -> Result<Message, ToolError> {
        let ToolCallRequest { call, tool, .. } = request;
        let Some(tool) = tool else {
            return Err(ToolError::Unknown {
                name: call.name,
                available: self.available.to_owned(),
            });
        };
        let content = tool.call(call.args).await?;
        Ok(Message::tool(call.id, content).with_name(call.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slices give the state one apply gives, removals, replacements and a clear
    /// included, and a failing update changes nothing.
    #[tokio::test]
    async fn applying_in_slices_equals_applying_at_once() {
        let mut start = AgentState::default();
        start
            .apply(StateUpdate::messages((0..3000).map(|i| {
                Message::human(format!("s{i}")).with_id(format!("m{i}"))
            })))
            .unwrap();
        let mut ops = Vec::new();
        for i in 0..6000 {
            ops.push(match i % 7 {
                _ if i == 4000 => MessageOp::RemoveAll,
                0 if i < 4000 => MessageOp::Remove {
                    id: format!("m{}", i / 7),
                },
                3 => MessageOp::Upsert {
                    message: Message::ai(format!("r{i}")).with_id(format!("m{}", i / 2)),
                },
                _ => MessageOp::Upsert {
                    message: Message::ai(format!("n{i}")).with_id(format!("x{i}")),
                },
            });
        }
        let update = StateUpdate {
            messages: ops,
            values: StateUpdate::value("k", serde_json::json!(1)).values,
        };
        let mut once = start.clone();
        once.apply(update.clone()).unwrap();
        let mut sliced = start.clone();
        apply_yielding(&mut sliced, update).await.unwrap();
        assert_eq!(sliced, once);
        assert!(once.messages.len() > 1000 && once.messages.len() < 3000);

        let mut bad: Vec<MessageOp> = (0..2000)
            .map(|i| MessageOp::Upsert {
                message: Message::ai("y").with_id(format!("y{i}")),
            })
            .collect();
        bad.push(MessageOp::Remove { id: "nope".into() });
        let mut failed = start.clone();
        assert!(
            apply_yielding(
                &mut failed,
                StateUpdate {
                    messages: bad,
                    values: serde_json::Map::new(),
                },
            )
            .await
            .is_err()
        );
        assert_eq!(failed, start, "a failing update changes nothing");
    }
}
