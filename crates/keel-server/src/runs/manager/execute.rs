//! Executing a run: the agent's stream translated into protocol events, commands
//! (resume, resolve, update) applied, and a rollback restoring the thread.

use super::*;

impl RunManager {
    /// Runs one run to its end, then starts the next queued one of its thread.
    pub(super) async fn drive(self: Arc<Self>, queued: Arc<Queued>) {
        let live = queued.live.clone();
        // Taken once: the gate hands a run the thread once.
        let Some(Start {
            input,
            resume,
            from,
        }) = queued.start.lock().take()
        else {
            return;
        };
        let mut cancel = live.cancel.subscribe();
        let ending = self
            .execute(&live, (input, from), resume, &mut cancel)
            .await;
        let (ending, paused) = self.settle(&live, ending);
        let mut next = None;
        self.conclude(&live, ending, |status| {
            next = self.dequeue(&live.thread_id, &live.run_id);
            next.is_none().then(|| {
                if status == "error" {
                    ThreadStatus::Error
                } else if paused {
                    ThreadStatus::Interrupted
                } else {
                    ThreadStatus::Idle
                }
            })
        })
        .await;
        if let Some(next) = next {
            self.spawn(next);
        }
    }

    /// What an execution's outcome makes of the run's record, and whether it leaves
    /// the thread paused; a success's last events are pushed here, an error's event too.
    fn settle(&self, live: &LiveRun, ending: Ending) -> (Final, bool) {
        match ending {
            Ending::Done(Ok(output)) => {
                let paused = output
                    .state
                    .values
                    .get(INTERRUPT_KEY)
                    .is_some_and(|v| !v.is_null());
                // Only the `events` mode closes with the final values: building them
                // costs the thread's length, so not for the other modes.
                if live.modes.has(WireMode::Events) {
                    let values = state_to_values(&output.state);
                    let mut out = Vec::new();
                    Translator::new(live.modes, self.context(live)).finish(values, &mut out);
                    for (mode, event, data) in out {
                        push_mode(&live.log, event, &data, mode);
                    }
                }
                (Final::Status(RunStatus::Success, None), paused)
            }
            Ending::Done(Err(error)) => {
                let message = error.to_string();
                tracing::warn!(run_id = %live.run_id, "run failed: {message}");
                push_json(
                    &live.log,
                    "error",
                    &json!({"error": error_name(&error), "message": message}),
                );
                (Final::Status(RunStatus::Error, Some(message)), false)
            }
            // As langgraph-api does, a run stopped with action `interrupt` leaves its
            // thread `interrupted` (a rolled-back one leaves it as it was before).
            Ending::Cancelled(action) => (cancel_final(action), action == CancelAction::Interrupt),
        }
    }

    /// The thread's active run ended: the next queued run holds the thread (returned,
    /// for the caller to start), or the thread leaves the gate.
    fn dequeue(&self, thread_id: &str, run_id: &str) -> Option<Arc<Queued>> {
        match self.gate.leave(thread_id, run_id) {
            Left::Released { next } => next,
            Left::Withdrawn(_) | Left::Absent => None,
        }
    }

    pub(super) fn context(&self, live: &LiveRun) -> RunContext {
        RunContext {
            run_id: live.run_id.clone(),
            thread_id: live.thread_id.clone(),
            assistant_id: self.assistant.assistant_id.clone(),
            graph_id: self.assistant.graph_id.clone(),
            model_name: self.assistant.model_name.clone(),
            provider: self.assistant.provider.clone(),
        }
    }

    pub(super) async fn execute(
        &self,
        live: &LiveRun,
        (input, from): (Vec<Message>, Option<u64>),
        resume: Option<RunCommand>,
        cancel: &mut watch::Receiver<Option<CancelAction>>,
    ) -> Ending {
        let (permit, lease) = match self.admit_to_run(live, cancel).await {
            Ok(held) => held,
            Err(ending) => return ending,
        };
        self.begin(live).await;
        push_json(
            &live.log,
            "metadata",
            &json!({"run_id": live.run_id, "attempt": 1}),
        );
        let checkpointer = self.agent.checkpointer().clone();
        let before = match checkpointer.latest(&live.thread_id).await {
            Ok(cp) => cp,
            Err(e) => {
                lease.release().await;
                return Ending::Done(Err(AgentError::Checkpoint {
                    thread_id: live.thread_id.clone(),
                    source: e,
                }));
            }
        };
        match resume {
            // A resume records its answer under the lease, so the run applies it.
            Some(RunCommand::Resume(value)) => {
                if let Err(e) = self.agent.record_resume(&live.thread_id, &value).await {
                    lease.release().await;
                    return Ending::Done(Err(e));
                }
            }
            // Ending the pause is the whole run: one checkpoint, under the lease.
            Some(RunCommand::Resolve) => {
                let ending = match self.resolve(live).await {
                    Ok(ending) => ending,
                    Err(e) => Ending::Done(Err(e)),
                };
                lease.release().await;
                return ending;
            }
            Some(RunCommand::Update(messages)) => {
                let ending = match self.update(live, before.as_ref(), messages).await {
                    Ok(ending) => ending,
                    Err(e) => Ending::Done(Err(e)),
                };
                lease.release().await;
                return ending;
            }
            None => {}
        }
        let ending = self.stream_run(live, (input, from), cancel).await;
        drop(permit);
        if let Ending::Cancelled(CancelAction::Rollback) = ending {
            rollback(checkpointer.as_ref(), &live.thread_id, &live.run_id, before).await;
        }
        lease.release().await;
        ending
    }

    /// Waits for a running slot, then for the thread's lease (another process sharing
    /// the database may be running the thread), unless the run is cancelled first.
    async fn admit_to_run(
        &self,
        live: &LiveRun,
        cancel: &mut watch::Receiver<Option<CancelAction>>,
    ) -> Result<
        (
            Option<tokio::sync::OwnedSemaphorePermit>,
            crate::lease::Lease,
        ),
        Ending,
    > {
        let permit = tokio::select! {
            permit = self.running.clone().acquire_owned() => permit.ok(),
            action = wait_cancel(cancel) => return Err(Ending::Cancelled(action)),
        };
        let lease = tokio::select! {
            lease = self.leases.acquire(&live.thread_id) => match lease {
                Ok(lease) => lease,
                Err(e) => {
                    tracing::error!(run_id = %live.run_id, "could not lease the thread: {e}");
                    return Err(Ending::Done(Err(AgentError::Checkpoint {
                        thread_id: live.thread_id.clone(),
                        source: keel_core::store::StoreError::Backend(e.to_string()),
                    })));
                }
            },
            action = wait_cancel(cancel) => return Err(Ending::Cancelled(action)),
        };
        Ok((permit, lease))
    }

    /// Runs the agent on the input and pushes its events, translated, until the stream
    /// ends or the run is cancelled.
    async fn stream_run(
        &self,
        live: &LiveRun,
        (input, from): (Vec<Message>, Option<u64>),
        cancel: &mut watch::Receiver<Option<CancelAction>>,
    ) -> Ending {
        let mut translator = Translator::new(live.modes, self.context(live));
        let mut out = Vec::new();
        translator.start(
            json!({"messages": input.iter().map(message_to_lc).collect::<Vec<_>>()}),
            &mut out,
        );
        let mut stream =
            self.agent
                .stream_from(&live.thread_id, from, input, &live.modes.agent_modes());
        let ending = loop {
            for (mode, event, data) in out.drain(..) {
                push_mode(&live.log, event, &data, mode);
            }
            tokio::select! {
                biased;
                action = wait_cancel(cancel) => break Some(Ending::Cancelled(action)),
                event = stream.next() => match event {
                    Some(event) => translator.translate(&event, &mut out),
                    None => break None,
                },
            }
        };
        match ending {
            Some(ending) => ending,
            // The stream has ended, so this returns the outcome it holds.
            None => Ending::Done(stream.finish().await),
        }
    }

    /// Ends the thread's pause ([`Agent::resolve_pause`]) and streams what that step
    /// changed, as a node's update and the state after it.
    pub(super) async fn resolve(&self, live: &LiveRun) -> Result<Ending, AgentError> {
        let update = self
            .agent
            .resolve_pause(&live.thread_id, &live.run_id)
            .await?;
        let node = match self.agent.resumable() {
            Some((name, _)) => format!("{name}.resolve"),
            None => "resolve".to_owned(),
        };
        self.one_step(live, &node, update).await
    }

    /// Writes `messages` on the thread (`head`, read under the lease) as one checkpoint,
    /// with compare-and-swap on the head, unless a review is pending.
    pub(super) async fn update(
        &self,
        live: &LiveRun,
        head: Option<&Checkpoint>,
        messages: Vec<Message>,
    ) -> Result<Ending, AgentError> {
        if head.is_some_and(|cp| cp.values.get(INTERRUPT_KEY).is_some_and(|v| !v.is_null())) {
            return Err(AgentError::Middleware(MiddlewareError {
                middleware: self
                    .agent
                    .resumable()
                    .map_or("interrupt", |(name, _)| name)
                    .to_owned(),
                hook: "update",
                message:
                    "the thread is waiting for an answer to its interrupt; answer it before updating its messages"
                        .into(),
            }));
        }
        let update = StateUpdate::messages(messages);
        let parent = head.map(|cp| cp.seq);
        let write = CheckpointWrite {
            parent,
            run_id: live.run_id.clone(),
            node: "update".into(),
            update: update.clone(),
            created_at_ms: now_ms(),
        };
        let checkpoint = |source| AgentError::Checkpoint {
            thread_id: live.thread_id.clone(),
            source,
        };
        match self
            .agent
            .checkpointer()
            .put(&live.thread_id, write)
            .await
            .map_err(checkpoint)?
        {
            PutOutcome::Saved { .. } => self.one_step(live, "update", update).await,
            PutOutcome::Conflict { head } => Err(AgentError::Conflict {
                thread_id: live.thread_id.clone(),
                parent,
                head,
            }),
        }
    }

    /// Streams one step written outside the agent: its update, then the state after it.
    pub(super) async fn one_step(
        &self,
        live: &LiveRun,
        node: &str,
        update: StateUpdate,
    ) -> Result<Ending, AgentError> {
        let state = self.agent.state(&live.thread_id).await?.unwrap_or_default();
        let mut translator = Translator::new(live.modes, self.context(live));
        let mut out = Vec::new();
        translator.start(json!({"messages": []}), &mut out);
        translator.translate(
            &keel_core::stream::StreamEvent::Updates {
                node: node.into(),
                update,
            },
            &mut out,
        );
        let state = Arc::new(state);
        translator.translate(
            &keel_core::stream::StreamEvent::Values {
                state: state.clone(),
            },
            &mut out,
        );
        for (mode, event, data) in out {
            push_mode(&live.log, event, &data, mode);
        }
        Ok(Ending::Done(Ok(keel_agent::RunOutput {
            state: Arc::unwrap_or_clone(state),
            run_id: live.run_id.clone(),
            model_steps: 0,
        })))
    }
}

/// Restores the thread to `before` (the head when the run started) with one more
/// checkpoint, since checkpoints are append-only: the rolled-back run's steps stay in the
/// history, and the head's state is `before`'s again. Values the run added stay (an
/// update can set values, not unset them).
pub(super) async fn rollback(
    checkpointer: &dyn Checkpointer,
    thread_id: &str,
    run_id: &str,
    before: Option<Checkpoint>,
) {
    let head = match checkpointer.latest(thread_id).await {
        Ok(cp) => cp.map(|cp| cp.seq),
        Err(e) => {
            tracing::error!(run_id, "rollback could not read the thread: {e}");
            return;
        }
    };
    if head == before.as_ref().map(|cp| cp.seq) {
        return;
    }
    let (messages, values) =
        before.map_or_else(|| (Vec::new(), Map::new()), |cp| (cp.messages, cp.values));
    let write = CheckpointWrite {
        parent: head,
        run_id: run_id.to_owned(),
        node: keel_agent::ROLLBACK_NODE.into(),
        update: StateUpdate::restoring(messages, values),
        created_at_ms: now_ms(),
    };
    match checkpointer.put(thread_id, write).await {
        Ok(PutOutcome::Saved { .. }) => {}
        Ok(PutOutcome::Conflict { head }) => {
            tracing::error!(
                run_id,
                ?head,
                "rollback lost a race with another writer; the thread was not restored"
            );
        }
        Err(e) => tracing::error!(run_id, "rollback could not restore the thread: {e}"),
    }
}
