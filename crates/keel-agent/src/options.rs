//! [`RunOptions`]: what one run sets for itself, beside its thread and input.

use crate::strategy::MultitaskStrategy;

/// What one run sets for itself ([`Agent::invoke_with`](crate::Agent::invoke_with),
/// [`Agent::stream_with`](crate::Agent::stream_with)); the default is a run from the
/// thread's head under the agent's strategy, with a fresh id.
///
/// ```
/// use keel_agent::{MultitaskStrategy, RunOptions};
///
/// let options = RunOptions::new()
///     .multitask(MultitaskStrategy::Interrupt)
///     .run_id("run-42");
/// assert_eq!(options.multitask, Some(MultitaskStrategy::Interrupt));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunOptions {
    /// The checkpoint the run starts from: an earlier one forks the thread there (see
    /// [`Agent::invoke_from`](crate::Agent::invoke_from)); `None`: the head.
    pub checkpoint: Option<u64>,
    /// What the run does when another run of the agent holds its thread; `None`: the
    /// agent's ([`AgentBuilder::multitask_strategy`](crate::AgentBuilder::multitask_strategy)).
    /// An `interrupt` or `rollback` run decides how the runs it displaces stop,
    /// whatever their own strategy was.
    pub multitask: Option<MultitaskStrategy>,
    /// The run's id (in [`RunOutput::run_id`](crate::RunOutput::run_id), its
    /// checkpoints, and what [`Agent::cancel_run`](crate::Agent::cancel_run) and
    /// [`Agent::thread_runs`](crate::Agent::thread_runs) name it by); `None`: a fresh
    /// one. Two runs of one thread must not share an id.
    pub run_id: Option<String>,
}

impl RunOptions {
    /// The defaults: the head, the agent's strategy, a fresh id.
    pub fn new() -> Self {
        RunOptions::default()
    }

    /// Starts from checkpoint `seq` of the thread.
    pub fn from_checkpoint(mut self, seq: u64) -> Self {
        self.checkpoint = Some(seq);
        self
    }

    /// Uses `strategy` for this run.
    pub fn multitask(mut self, strategy: MultitaskStrategy) -> Self {
        self.multitask = Some(strategy);
        self
    }

    /// Names the run `id`.
    pub fn run_id(mut self, id: impl Into<String>) -> Self {
        self.run_id = Some(id.into());
        self
    }
}
