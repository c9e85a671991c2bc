//! A run's life as one state machine: `pending` (written when it is created),
//! [`begin`](RunManager::begin) (`running`), and [`conclude`](RunManager::conclude),
//! the one way a run of this process ends: its final status written (retried, then
//! reconciled in the background), the thread's status when it was the thread's last
//! run, then the `end` event carrying that status and the log kept for late
//! subscribers, in that order and once.

use super::*;

impl RunManager {
    /// The run starts executing: its record reads `running`.
    pub(super) async fn begin(&self, live: &LiveRun) {
        self.log_err(
            self.registry
                .set_run_status(&live.thread_id, &live.run_id, RunStatus::Running, None)
                .await,
        );
    }

    /// Ends a run of this process: writes `ending` ([`finalize`](Self::finalize)),
    /// asks `then` (given the status its clients are told) for the thread's status to
    /// write, when the run was the thread's last, and pushes the `end` event with that
    /// status. A run that already ended (the server stopped it) is not written again:
    /// `then` still runs, with the status told then. Returns the status told.
    pub(super) async fn conclude(
        self: &Arc<Self>,
        live: &LiveRun,
        ending: Final,
        then: impl FnOnce(&'static str) -> Option<ThreadStatus>,
    ) -> &'static str {
        let mut ended = live.ended.lock().await;
        if let Some(status) = *ended {
            if let Some(thread) = then(status) {
                self.write_thread_status(&live.thread_id, thread).await;
            }
            return status;
        }
        let status = self.finalize(live, ending).await;
        // The thread's status is written before the `end` event: a client that reads
        // the thread once its stream ended (or its join returned) sees it idle,
        // interrupted or failed, never still busy.
        if let Some(thread) = then(status) {
            self.write_thread_status(&live.thread_id, thread).await;
        }
        close_log(live, Some(status));
        self.retire(&live.run_id);
        *ended = Some(status);
        status
    }

    /// Writes how a run ended, retrying as [`RunLimits`] says. Returns the status its
    /// clients are told: the one written, or `error` when the write kept failing (the run
    /// then reads as `error` here, an `error` event says why, and the write goes on in
    /// the background).
    async fn finalize(self: &Arc<Self>, live: &LiveRun, ending: Final) -> &'static str {
        let intended = match &ending {
            Final::Status(status, _) => status.as_str(),
            Final::Delete => RunStatus::Interrupted.as_str(),
        };
        let mut pause = self.limits.final_write_pause;
        let mut tries = 0;
        let failure = loop {
            tries += 1;
            match self
                .write_final(&live.thread_id, &live.run_id, &ending)
                .await
            {
                Ok(()) => return intended,
                Err(e) if tries >= self.limits.final_write_tries.max(1) => break e,
                Err(e) => {
                    tracing::warn!(run_id = %live.run_id, tries, "writing the run's final status: {e}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(FINAL_WRITE_MAX_PAUSE);
                }
            }
        };
        let message = format!(
            "the run ended ({intended}) but its status could not be recorded after {tries} tries: {failure}"
        );
        tracing::error!(run_id = %live.run_id, "{message}");
        push_json(
            &live.log,
            "error",
            &json!({"error": "StorageError", "message": message}),
        );
        self.state
            .lock()
            .unwritten
            .insert(live.run_id.clone(), message.clone());
        let ending = match ending {
            Final::Delete => Final::Delete,
            Final::Status(..) => Final::Status(RunStatus::Error, Some(message)),
        };
        let manager = self.clone();
        let (thread_id, run_id) = (live.thread_id.clone(), live.run_id.clone());
        tokio::spawn(async move { manager.reconcile(thread_id, run_id, ending, pause).await });
        RunStatus::Error.as_str()
    }

    pub(super) async fn write_final(
        &self,
        thread_id: &str,
        run_id: &str,
        ending: &Final,
    ) -> Result<(), crate::registry::RegistryError> {
        match ending {
            Final::Status(status, error) => {
                self.registry
                    .set_run_status(thread_id, run_id, *status, error.clone())
                    .await
            }
            Final::Delete => self
                .registry
                .delete_run(thread_id, run_id)
                .await
                .map(|_| ()),
        }
    }

    /// Goes on writing a final status that [`finalize`](Self::finalize) could not (the
    /// thread's status is [`write_thread_status`](Self::write_thread_status)'s).
    pub(super) async fn reconcile(
        self: Arc<Self>,
        thread_id: String,
        run_id: String,
        ending: Final,
        mut pause: Duration,
    ) {
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(FINAL_WRITE_MAX_PAUSE);
            match self.write_final(&thread_id, &run_id, &ending).await {
                Ok(()) => break,
                Err(e) => tracing::warn!(run_id, "still cannot write the run's final status: {e}"),
            }
        }
        self.state.lock().unwritten.remove(&run_id);
    }

    /// The record as clients should see it: a run that ended here as `error` because its
    /// final status could not be written reads as `error` until the write succeeds.
    pub(crate) fn overlay(&self, mut record: RunRecord) -> RunRecord {
        if !record.status.is_final()
            && let Some(message) = self.state.lock().unwritten.get(&record.run_id)
        {
            record.status = RunStatus::Error;
            record.error = Some(message.clone());
        }
        record
    }

    /// Writes a thread's status once its last run here ended, retrying as final writes
    /// are, then in the background (unless a newer run of the thread starts first).
    pub(super) async fn write_thread_status(
        self: &Arc<Self>,
        thread_id: &str,
        status: ThreadStatus,
    ) {
        let mut pause = self.limits.final_write_pause;
        for tries in 1..=self.limits.final_write_tries.max(1) {
            if self.gate.is_busy(thread_id) {
                return;
            }
            match self.registry.set_thread_status(thread_id, status).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(thread_id, tries, "writing the thread's status: {e}")
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(FINAL_WRITE_MAX_PAUSE);
        }
        let manager = self.clone();
        let thread_id = thread_id.to_owned();
        tokio::spawn(async move {
            loop {
                if manager.gate.is_busy(&thread_id) {
                    return;
                }
                match manager.registry.set_thread_status(&thread_id, status).await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(thread_id, "still cannot write the thread's status: {e}")
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(FINAL_WRITE_MAX_PAUSE);
            }
        });
    }

    /// Keeps a finished run's log for late subscribers, up to the configured count and
    /// bytes across all finished logs (the oldest go first, this one too when it alone
    /// is over the bytes).
    pub(super) fn retire(&self, run_id: &str) {
        let mut state = self.state.lock();
        let bytes = state.live.get(run_id).map_or(0, |live| live.log.bytes());
        state.finished.push_back((run_id.to_owned(), bytes));
        state.finished_bytes += bytes;
        while state.finished.len() > self.limits.finished_logs
            || state.finished_bytes > self.limits.finished_log_bytes
        {
            let Some((old, bytes)) = state.finished.pop_front() else {
                break;
            };
            state.finished_bytes -= bytes;
            state.live.remove(&old);
        }
    }
}

/// Closes a run's log, after the `end` event (`{run_id, status}`) when the status is
/// known: what every subscriber reads last, for a run of this process or one followed
/// from another.
pub(super) fn close_log(live: &LiveRun, status: Option<&str>) {
    if let Some(status) = status {
        push_json(
            &live.log,
            "end",
            &json!({"run_id": live.run_id, "status": status}),
        );
    }
    live.log.close();
}
