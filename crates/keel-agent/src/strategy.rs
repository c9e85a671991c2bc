//! What a run does when another run is already active on its thread
//! ([`MultitaskStrategy`], after LangGraph Agent Server's `multitask_strategy`), and how
//! a run is stopped early ([`CancelAction`]).

/// What a run does when it arrives while another run of the same agent is active on
/// the same thread (LangGraph Agent Server's multitask strategies,
/// <https://langchain-ai.github.io/langgraph/cloud/concepts/double_texting/>).
///
/// The one strategy type: `keel serve` reads the protocol's `multitask_strategy` into it
/// and stores it with each run record (serialized by variant name).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum MultitaskStrategy {
    /// The new run fails at once with
    /// [`AgentError::Rejected`](crate::AgentError::Rejected); the active run goes on.
    Reject,
    /// The new run waits for the active run (and the runs queued before it), then runs
    /// on the thread as they left it. The default: nothing is lost, nothing is refused.
    #[default]
    Enqueue,
    /// The active run stops at its next step with
    /// [`AgentError::Interrupted`](crate::AgentError::Interrupted), keeping the steps it
    /// completed (its `after_agent` hooks still run, so session memory records them);
    /// the new run then runs after them. Runs that arrive together: the newest goes on,
    /// the others stop right after their input and `before_agent` hooks.
    Interrupt,
    /// As `Interrupt`, but the stopped run's steps are reverted: before it lets the
    /// thread go, the stopped run restores the state it started from (one checkpoint;
    /// nothing earlier is rewritten), and the new run starts there. Runs waiting behind
    /// it stop before writing anything. The stopped run fails with
    /// [`AgentError::RolledBack`](crate::AgentError::RolledBack) without running its
    /// `after_agent` hooks. Values the stopped run added under new keys stay (an update
    /// can set values, not unset them), and so does its input in chat history (recorded
    /// when it started: the user did send it).
    Rollback,
}

impl MultitaskStrategy {
    /// `reject`, `enqueue`, `interrupt` or `rollback`, as LangGraph names them.
    pub fn as_str(self) -> &'static str {
        match self {
            MultitaskStrategy::Reject => "reject",
            MultitaskStrategy::Enqueue => "enqueue",
            MultitaskStrategy::Interrupt => "interrupt",
            MultitaskStrategy::Rollback => "rollback",
        }
    }
}

impl MultitaskStrategy {
    /// How an arrival under this strategy stops the run holding its thread: `None` for
    /// `reject` and `enqueue`, which leave it alone.
    pub fn preempts(self) -> Option<CancelAction> {
        match self {
            MultitaskStrategy::Reject | MultitaskStrategy::Enqueue => None,
            MultitaskStrategy::Interrupt => Some(CancelAction::Interrupt),
            MultitaskStrategy::Rollback => Some(CancelAction::Rollback),
        }
    }

    /// Reads LangGraph's name (`reject`, `enqueue`, `interrupt`, `rollback`); the error
    /// names the value and the allowed names.
    pub fn parse(s: &str) -> Result<MultitaskStrategy, String> {
        match s {
            "reject" => Ok(MultitaskStrategy::Reject),
            "interrupt" => Ok(MultitaskStrategy::Interrupt),
            "rollback" => Ok(MultitaskStrategy::Rollback),
            "enqueue" => Ok(MultitaskStrategy::Enqueue),
            other => Err(format!(
                "multitask_strategy {other:?} is not one of reject, interrupt, rollback, enqueue"
            )),
        }
    }
}

impl std::str::FromStr for MultitaskStrategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MultitaskStrategy::parse(s)
    }
}

impl std::fmt::Display for MultitaskStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run is stopped before its end, by a newer run of its thread (`interrupt`,
/// `rollback` strategies) or by a cancel (the protocol's `action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CancelAction {
    /// Stop; keep what the run saved ([`AgentError::Interrupted`](crate::AgentError::Interrupted)).
    Interrupt,
    /// Stop and revert what the run saved
    /// ([`AgentError::RolledBack`](crate::AgentError::RolledBack)).
    Rollback,
}

impl CancelAction {
    /// The protocol's name: `interrupt` or `rollback`.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelAction::Interrupt => "interrupt",
            CancelAction::Rollback => "rollback",
        }
    }

    /// Reads `interrupt` or `rollback`; the error names the value and the allowed names.
    pub fn parse(s: &str) -> Result<CancelAction, String> {
        match s {
            "interrupt" => Ok(CancelAction::Interrupt),
            "rollback" => Ok(CancelAction::Rollback),
            other => Err(format!("action {other:?} is not interrupt or rollback")),
        }
    }

    pub(crate) fn to_u8(self) -> u8 {
        match self {
            CancelAction::Interrupt => 1,
            CancelAction::Rollback => 2,
        }
    }

    pub(crate) fn from_u8(v: u8) -> Option<CancelAction> {
        match v {
            1 => Some(CancelAction::Interrupt),
            2 => Some(CancelAction::Rollback),
            _ => None,
        }
    }
}
