//! One writer per thread: what a run does when another run is already active on its
//! thread ([`MultitaskStrategy`], after LangGraph Agent Server's `multitask_strategy`),
//! and the per-thread gate that enforces it inside one process.
//!
//! Across processes the checkpointer's compare-and-swap is the guard: a run whose
//! parent checkpoint is no longer the head fails with
//! [`AgentError::Conflict`](crate::AgentError::Conflict) and overwrites nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use keel_core::state::AgentState;
use parking_lot::Mutex;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

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
    /// As `Interrupt`, but the stopped run's steps are reverted: the new run starts
    /// from the state the stopped run started from (one checkpoint restores it; nothing
    /// earlier is rewritten). The stopped run fails with
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

/// What a stopped run leaves for the next one: the state it started from, to roll
/// back to.
#[derive(Default)]
pub(crate) struct Handoff {
    pub(crate) rollback_to: Option<Arc<AgentState>>,
}

/// One thread's gate: held by its active run.
struct Slot {
    gate: Arc<AsyncMutex<Handoff>>,
    tickets: AtomicU64,
    /// The newest ticket of a run that preempts (0: none).
    preempt: AtomicU64,
}

/// The agent's active threads.
#[derive(Default)]
pub(crate) struct Registry {
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
}

/// The right to write a thread, held for a run's whole life.
pub(crate) struct Turn {
    registry: Arc<Registry>,
    thread_id: Arc<str>,
    slot: Arc<Slot>,
    ticket: u64,
    pub(crate) handoff: Option<OwnedMutexGuard<Handoff>>,
}

impl Turn {
    /// True when a run that arrived after this one wants the thread.
    pub(crate) fn preempted(&self) -> bool {
        self.slot.preempt.load(Ordering::Acquire) > self.ticket
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.handoff.take();
        let mut slots = self.registry.slots.lock();
        // The map and this turn hold the only references: nobody waits on the thread.
        if Arc::strong_count(&self.slot) == 2 {
            slots.remove(&self.thread_id);
        }
    }
}

impl Registry {
    /// Waits for the thread as `strategy` says; `None` when the strategy is `Reject` and
    /// another run holds the thread.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        thread_id: &Arc<str>,
        strategy: MultitaskStrategy,
    ) -> Option<Turn> {
        let slot = self
            .slots
            .lock()
            .entry(thread_id.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    gate: Arc::new(AsyncMutex::new(Handoff::default())),
                    tickets: AtomicU64::new(0),
                    preempt: AtomicU64::new(0),
                })
            })
            .clone();
        let ticket = slot.tickets.fetch_add(1, Ordering::AcqRel) + 1;
        let mut turn = Turn {
            registry: self.clone(),
            thread_id: thread_id.clone(),
            slot,
            ticket,
            handoff: None,
        };
        let gate = turn.slot.gate.clone();
        turn.handoff = Some(match strategy {
            MultitaskStrategy::Reject => gate.try_lock_owned().ok()?,
            MultitaskStrategy::Enqueue => gate.lock_owned().await,
            MultitaskStrategy::Interrupt | MultitaskStrategy::Rollback => {
                turn.slot.preempt.fetch_max(ticket, Ordering::AcqRel);
                gate.lock_owned().await
            }
        });
        Some(turn)
    }
}
