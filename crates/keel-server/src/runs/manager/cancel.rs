//! Cancelling a run: a running one stops at its current step, a queued one never
//! starts, and on a shared database another process's run is asked to stop.

use super::*;

impl RunManager {
    /// Cancels a run of a thread: a running one stops at its current step, a queued one
    /// never starts. A finished run is left as it is.
    pub(crate) async fn cancel(
        self: &Arc<Self>,
        thread_id: &str,
        run_id: &str,
        action: CancelAction,
    ) {
        match self.gate.cancel(thread_id, run_id, action) {
            Cancelled::Signalled => {}
            Cancelled::Withdrawn(queued) => self.close_unstarted(&queued.live, action).await,
            Cancelled::Absent => self.cancel_elsewhere(run_id, action).await,
        }
    }

    pub(super) async fn close_unstarted(self: &Arc<Self>, live: &LiveRun, action: CancelAction) {
        self.conclude(live, cancel_final(action), |_| None).await;
    }

    /// On a shared database, asks the process running `run_id` to cancel it (it reads
    /// the request within [`MIRROR_EVERY`]).
    pub(super) async fn cancel_elsewhere(&self, run_id: &str, action: CancelAction) {
        if !self.registry.is_shared() || self.live(run_id).is_some() {
            return;
        }
        self.log_err(self.registry.request_cancel(run_id, action.as_str()).await);
    }
}

/// How a cancelled run's record ends.
pub(super) fn cancel_final(action: CancelAction) -> Final {
    match action {
        CancelAction::Rollback => Final::Delete,
        CancelAction::Interrupt => Final::Status(RunStatus::Interrupted, None),
    }
}

pub(super) async fn wait_cancel(
    cancel: &mut watch::Receiver<Option<CancelAction>>,
) -> CancelAction {
    loop {
        if let Some(action) = *cancel.borrow_and_update() {
            return action;
        }
        if cancel.changed().await.is_err() {
            // The sender lives in the LiveRun we hold: this never ends the wait early.
            std::future::pending::<()>().await;
        }
    }
}
