//! What can go wrong building or running an agent.

use crate::stack::StackError;
use keel_core::middleware::{JumpTarget, MiddlewareError};
use keel_core::model::ModelError;
use keel_core::state::StateError;
use keel_core::store::StoreError;

use crate::strategy::MultitaskStrategy;

/// A configuration the [`AgentBuilder`](crate::AgentBuilder) refuses.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No model was given.
    #[error("AgentBuilder needs a model: call .model(...) before .build()")]
    MissingModel,
    /// Two middlewares share a name; `updates` events and checkpoints are keyed by it.
    #[error(
        "duplicate middleware name {name:?} at positions {first} and {second}: names must be unique within an agent"
    )]
    DuplicateMiddleware {
        /// The shared name.
        name: String,
        /// Position of the first one (0-based).
        first: usize,
        /// Position of the second one (0-based).
        second: usize,
    },
    /// Two tools share a name, so the model could not tell them apart.
    #[error("duplicate tool name {name:?}: tool names must be unique within an agent")]
    DuplicateTool {
        /// The shared name.
        name: String,
    },
    /// The middlewares' declared state keys or jumps conflict (see
    /// [`check_stack`](crate::check_stack)).
    #[error(transparent)]
    Stack(#[from] StackError),
    /// A middleware added as a layer (`AgentBuilder::layer`) could not be built with
    /// what the agent knows.
    #[error(transparent)]
    Layer(#[from] keel_core::layer::LayerError),
    /// The recursion limit must allow at least one model call.
    #[error(
        "recursion_limit = {value} is out of range: it must be at least 1 (model calls per run)"
    )]
    InvalidRecursionLimit {
        /// The value given.
        value: usize,
    },
}

/// A failed run. The state reached so far is in the thread's checkpoints.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A node hook failed.
    #[error(transparent)]
    Middleware(#[from] MiddlewareError),
    /// A node hook jumped somewhere its middleware did not declare in `jump_targets`.
    #[error(
        "middleware {middleware} jumped to {target:?} from {hook}, but it does not declare that target in jump_targets() (declared: {declared:?})"
    )]
    UndeclaredJump {
        /// The middleware's name.
        middleware: String,
        /// The hook that asked for the jump.
        hook: &'static str,
        /// Where it wanted to go.
        target: JumpTarget,
        /// What it declared.
        declared: Vec<JumpTarget>,
    },
    /// An `after_agent` hook asked to jump back into the loop; the run is over by then.
    #[error("after_agent may only jump to End, but a middleware asked for {target:?}")]
    JumpAfterEnd {
        /// Where it wanted to go.
        target: JumpTarget,
    },
    /// The model call (after every wrap hook) failed.
    #[error("model call #{call_index} failed: {source}")]
    Model {
        /// The run's model-call index when the step began (see `Runtime::model_call_index`).
        call_index: u64,
        /// The error the pipeline returned.
        #[source]
        source: ModelError,
    },
    /// A state update could not be applied.
    #[error("update from {node} could not be applied: {source}")]
    State {
        /// The node whose update failed (`model`, `tools`, `<Middleware>.<hook>`).
        node: String,
        /// The reducer's error.
        #[source]
        source: StateError,
    },
    /// The run made as many model calls as allowed and still wanted another.
    #[error(
        "recursion limit reached: the run made {limit} model calls without finishing; raise it with AgentBuilder::recursion_limit or check for a tool loop"
    )]
    RecursionLimit {
        /// The configured limit (model calls per run).
        limit: usize,
    },
    /// Another run was active on the thread and the agent's multitask strategy is
    /// `reject`. Nothing was written.
    #[error(
        "thread {thread_id:?} already has an active run and the multitask strategy is {strategy}: this run was rejected before writing anything; retry when the other run ends, or choose enqueue, interrupt or rollback"
    )]
    Rejected {
        /// The thread.
        thread_id: String,
        /// Always [`MultitaskStrategy::Reject`].
        strategy: MultitaskStrategy,
    },
    /// A run was given the id ([`RunOptions::run_id`](crate::RunOptions::run_id)) of a
    /// run of its thread still active or waiting. Nothing was written.
    #[error(
        "run id {run_id:?} is already taken by a run active or waiting on thread {thread_id:?}; give each run of a thread its own id, or leave RunOptions::run_id unset for a fresh one"
    )]
    DuplicateRunId {
        /// The thread.
        thread_id: String,
        /// The id asked for.
        run_id: String,
    },
    /// A newer run on the thread (strategy `interrupt`) or a cancel
    /// ([`Agent::cancel_run`](crate::Agent::cancel_run)) stopped this one at a step
    /// boundary, or before it started. The steps it completed are kept in the thread's
    /// checkpoints.
    #[error(
        "run {run_id} on thread {thread_id:?} was interrupted (by a newer run with multitask strategy interrupt, or a cancel); the steps it completed are kept"
    )]
    Interrupted {
        /// The thread.
        thread_id: String,
        /// The stopped run.
        run_id: String,
    },
    /// A newer run on the thread (strategy `rollback`) or a cancel with
    /// [`CancelAction::Rollback`](crate::CancelAction::Rollback) stopped this one at a
    /// step boundary (and it reverted the thread to the state it started from), or
    /// before it started (and it wrote nothing).
    #[error(
        "run {run_id} on thread {thread_id:?} was rolled back (by a newer run with multitask strategy rollback, or a cancel); its steps are reverted"
    )]
    RolledBack {
        /// The thread.
        thread_id: String,
        /// The stopped run.
        run_id: String,
    },
    /// Another writer (usually another process sharing the database) appended to the
    /// thread after the checkpoint this run built on. Nothing was overwritten: the
    /// other writer's steps are kept, and this run's unsaved step is dropped.
    #[error(
        "thread {thread_id:?} moved on under this run: it built on checkpoint {parent:?}, but the head is now {head:?} (another process writes the same thread); nothing was overwritten, run again to continue from the new head"
    )]
    Conflict {
        /// The thread.
        thread_id: String,
        /// The checkpoint this run built on (`None`: the empty thread).
        parent: Option<u64>,
        /// The head the checkpointer reported.
        head: Option<u64>,
    },
    /// The checkpointer failed.
    #[error("checkpointer failed for thread {thread_id:?}: {source}")]
    Checkpoint {
        /// The thread.
        thread_id: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// An operation on a thread's history (`Agent::compact`) found a thread that never
    /// ran.
    #[error("thread {thread_id:?} has no checkpoint: it never ran, or it was deleted")]
    UnknownThread {
        /// The thread.
        thread_id: String,
    },
    /// An answer for a paused thread (`Agent::record_resume`, `Agent::resolve_pause`)
    /// found nothing pending: the thread is not paused, or no middleware of this agent
    /// pauses runs.
    #[error("thread {thread_id:?} has no pending interrupt to resume")]
    NotPaused {
        /// The thread.
        thread_id: String,
    },
    /// An answer for a paused thread does not fit what it waits for; nothing was
    /// written.
    #[error("thread {thread_id:?}: {source}")]
    ResumeRefused {
        /// The thread.
        thread_id: String,
        /// What does not fit, from the middleware that paused.
        #[source]
        source: keel_core::interrupt::ResumeRefused,
    },
    /// A run was asked to start from a checkpoint its thread does not hold (or no longer
    /// keeps).
    #[error(
        "checkpoint {checkpoint} is not a checkpoint of thread {thread_id:?}: a run starts from one of the thread's own checkpoints"
    )]
    UnknownCheckpoint {
        /// The thread.
        thread_id: String,
        /// The seq asked for.
        checkpoint: u64,
    },
    /// A run forked the thread, and a middleware could not drop what it keeps of the
    /// abandoned branch (see `Middleware::fork_thread_data`); the run stopped before
    /// writing anything.
    #[error("middleware {middleware} could not follow the fork of thread {thread_id:?}: {source}")]
    ForkThreadData {
        /// The thread.
        thread_id: String,
        /// The middleware's name.
        middleware: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// A middleware could not delete what it keeps for a thread; the thread's
    /// checkpoints were left in place, so deleting it again retries the whole deletion.
    #[error("middleware {middleware} could not delete its data for thread {thread_id:?}: {source}")]
    DeleteThreadData {
        /// The thread.
        thread_id: String,
        /// The middleware's name.
        middleware: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}
