//! One writer per thread: the agent's runs pass through a [`ThreadGate`] that applies
//! each run's [`MultitaskStrategy`](crate::MultitaskStrategy) inside one process.
//!
//! Across processes the checkpointer's compare-and-swap is the guard: a run whose
//! parent checkpoint is no longer the head fails with
//! [`AgentError::Conflict`](crate::AgentError::Conflict) and overwrites nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::Notify;

use crate::gate::{Cancelled, Gated, Left, Refused, ThreadGate, Waiting};
use crate::strategy::{CancelAction, MultitaskStrategy};

/// A run of an agent waiting for, or holding, its thread.
struct Waiter {
    run_id: Arc<str>,
    /// How a newer run (or a cancel) stops it: 0 none, else [`CancelAction::to_u8`];
    /// rollback outranks interrupt (a run told both is rolled back).
    preempt: AtomicU8,
    /// Where the waiter stands (`WAITING`, `STARTED`, `WITHDRAWN`), set before `wake`.
    stand: AtomicU8,
    wake: Notify,
}

const WAITING: u8 = 0;
const STARTED: u8 = 1;
const WITHDRAWN: u8 = 2;

impl Waiter {
    fn settle(&self, stand: u8) {
        self.stand.store(stand, Ordering::Release);
        self.wake.notify_one();
    }
}

impl Gated for Waiter {
    fn id(&self) -> &str {
        &self.run_id
    }

    fn preempt(&self, action: CancelAction) {
        self.preempt.fetch_max(action.to_u8(), Ordering::AcqRel);
    }
}

/// The agent's threads: which run holds each and which wait (a [`ThreadGate`] whose
/// preempted waiting runs still start, so their input is recorded).
pub(crate) struct Registry {
    gate: ThreadGate<Waiter>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            gate: ThreadGate::new(Waiting::Start),
        }
    }
}

/// The right to write a thread, held for a run's whole life (or while it waits for it);
/// dropping it hands the thread to the next run.
pub(crate) struct Turn {
    registry: Arc<Registry>,
    thread_id: Arc<str>,
    waiter: Arc<Waiter>,
}

impl Turn {
    /// How a newer run (or a cancel) wants this run to stop, if it does.
    pub(crate) fn preempted(&self) -> Option<CancelAction> {
        CancelAction::from_u8(self.waiter.preempt.load(Ordering::Acquire))
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Left::Released { next: Some(next) } = self
            .registry
            .gate
            .leave(&self.thread_id, &self.waiter.run_id)
        {
            next.settle(STARTED);
        }
    }
}

/// Why [`Registry::enter`] gave no turn.
pub(crate) enum Refusal {
    /// `reject` on a busy thread.
    Busy,
    /// The run's id is taken by a run active or waiting on the thread.
    DuplicateId,
    /// Cancelled while it waited.
    Cancelled(CancelAction),
}

impl Registry {
    /// Waits for the thread as `strategy` says, as run `run_id`.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        thread_id: &Arc<str>,
        run_id: &Arc<str>,
        strategy: MultitaskStrategy,
    ) -> Result<Turn, Refusal> {
        let waiter = Arc::new(Waiter {
            run_id: run_id.clone(),
            preempt: AtomicU8::new(0),
            stand: AtomicU8::new(WAITING),
            wake: Notify::new(),
        });
        let admitted = self
            .gate
            .admit(thread_id, waiter.clone(), strategy)
            .map_err(|refused| match refused {
                Refused::DuplicateId => Refusal::DuplicateId,
                // The agent's gate has no queue limit.
                Refused::Busy | Refused::Full { .. } => Refusal::Busy,
            })?;
        // From here a dropped future leaves the queue (or hands the thread on).
        let turn = Turn {
            registry: self.clone(),
            thread_id: thread_id.clone(),
            waiter,
        };
        if !admitted.started {
            loop {
                match turn.waiter.stand.load(Ordering::Acquire) {
                    STARTED => break,
                    WITHDRAWN => {
                        let action = turn.preempted().unwrap_or(CancelAction::Interrupt);
                        return Err(Refusal::Cancelled(action));
                    }
                    _ => turn.waiter.wake.notified().await,
                }
            }
        }
        Ok(turn)
    }

    /// Stops run `run_id` of `thread_id`: the active one at its next step, a waiting
    /// one before it starts. False when no such run is active or waiting.
    pub(crate) fn cancel(&self, thread_id: &str, run_id: &str, action: CancelAction) -> bool {
        match self.gate.cancel(thread_id, run_id, action) {
            Cancelled::Signalled => true,
            Cancelled::Withdrawn(waiter) => {
                waiter.settle(WITHDRAWN);
                true
            }
            Cancelled::Absent => false,
        }
    }

    /// The run holding `thread_id` and the runs waiting on it, first in line first.
    pub(crate) fn runs(&self, thread_id: &str) -> ThreadRuns {
        ThreadRuns {
            active: self.gate.active(thread_id).map(|w| w.run_id.to_string()),
            waiting: self
                .gate
                .waiting(thread_id)
                .iter()
                .map(|w| w.run_id.to_string())
                .collect(),
        }
    }
}

/// A thread's runs in this agent ([`Agent::thread_runs`](crate::Agent::thread_runs)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadRuns {
    /// The run holding the thread.
    pub active: Option<String>,
    /// The runs waiting for it, first in line first.
    pub waiting: Vec<String>,
}
