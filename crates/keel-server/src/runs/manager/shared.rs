//! Runs of other processes on a shared database: found by their records, followed
//! through their copied events, and this process's events mirrored for them.

use super::*;

impl RunManager {
    /// The run, to stream or wait for: this process's, or on a shared database one that
    /// another process is running (or ran recently), followed through its copied events.
    /// `None` when its events are gone.
    pub(crate) async fn find(self: &Arc<Self>, record: &RunRecord) -> Option<Arc<LiveRun>> {
        if let Some(live) = self.live(&record.run_id) {
            return Some(live);
        }
        if !self.registry.is_shared() {
            return None;
        }
        if let Some(live) = self
            .state
            .lock()
            .followers
            .get(&record.run_id)
            .and_then(Weak::upgrade)
        {
            return Some(live);
        }
        let stored = match self.registry.events_from(&record.run_id, 0, 1).await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::error!("reading a run's events: {e}");
                return None;
            }
        };
        if stored.is_empty() && record.status.is_final() {
            return None;
        }
        let live = Arc::new(LiveRun {
            run_id: record.run_id.clone(),
            thread_id: record.thread_id.clone(),
            modes: ModeSet::from_json(record.kwargs.get("stream_mode")).unwrap_or_default(),
            log: EventLog::new(self.limits.max_log_bytes),
            cancel: watch::Sender::new(None),
            ended: tokio::sync::Mutex::new(None),
        });
        self.state
            .lock()
            .followers
            .insert(record.run_id.clone(), Arc::downgrade(&live));
        let manager = self.clone();
        let followed = live.clone();
        tokio::spawn(async move { manager.follow(followed).await });
        Some(live)
    }

    /// Copies a run's events to the shared database as they come, until its log closes,
    /// and applies a cancel another process recorded for it.
    pub(super) async fn mirror(self: Arc<Self>, live: Arc<LiveRun>) {
        if self
            .started
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(64)
        {
            let before = now_ms() - EVENTS_KEPT.as_millis() as i64;
            self.log_err(self.registry.prune_events(before).await);
        }
        let mut cursor = 0;
        let mut cancel_seen = false;
        loop {
            let closed = live.log.is_closed();
            let events = match live.log.since(cursor) {
                Ok(events) => events,
                Err(first_kept) => {
                    tracing::warn!(run_id = %live.run_id, first_kept, "events dropped before they were copied");
                    cursor = first_kept;
                    continue;
                }
            };
            if let Some(last) = events.last() {
                cursor = last.id + 1;
                let stored: Vec<StoredEvent> = events
                    .iter()
                    .map(|e| StoredEvent {
                        seq: e.id,
                        event: e.event.to_string(),
                        mode: e.mode.map(|m| m.as_str().to_owned()),
                        data: e.data().to_owned(),
                    })
                    .collect();
                self.log_err(
                    self.registry
                        .append_events(&live.thread_id, &live.run_id, &stored)
                        .await,
                );
            }
            if closed {
                return;
            }
            if !cancel_seen {
                match self.registry.cancel_requested(&live.run_id).await {
                    Ok(Some(action)) => {
                        cancel_seen = true;
                        let action =
                            CancelAction::parse(&action).unwrap_or(CancelAction::Interrupt);
                        self.cancel(&live.thread_id, &live.run_id, action).await;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::error!("{e}"),
                }
            }
            tokio::select! {
                () = tokio::time::sleep(MIRROR_EVERY) => {}
                () = live.log.closed() => {}
            }
        }
    }

    /// Feeds a follower's log from the events another process copies, until the `end`
    /// event; passes a cancel asked here to that process.
    pub(super) async fn follow(self: Arc<Self>, live: Arc<LiveRun>) {
        let mut cursor = 0;
        let mut quiet = 0u32;
        let mut orphan = 0u32;
        let mut cancel = live.cancel.subscribe();
        let mut cancel_sent = false;
        let ended = loop {
            match self.registry.events_from(&live.run_id, cursor, 1000).await {
                Ok(events) => {
                    quiet = if events.is_empty() { quiet + 1 } else { 0 };
                    let mut end = false;
                    for e in events {
                        let mode = e.mode.as_deref().and_then(|m| WireMode::parse(m).ok());
                        end |= e.event == "end";
                        cursor = e.seq + 1;
                        let key = (e.event == "messages/partial")
                            .then(|| serde_json::from_str::<Value>(&e.data).ok())
                            .flatten()
                            .and_then(|data| partial_key(&e.event, Some(&data)));
                        live.log.push(&e.event, &e.data, mode, key.as_deref());
                    }
                    if end {
                        break None;
                    }
                }
                Err(e) => {
                    quiet += 1;
                    tracing::error!(run_id = %live.run_id, "reading a run's events: {e}");
                }
            }
            if quiet > 0 && quiet.is_multiple_of(FOLLOW_CHECK_POLLS) {
                match self.registry.run(&live.thread_id, &live.run_id).await {
                    // Ended (its events were copied long ago, or never).
                    Ok(Some(record)) if record.status.is_final() => {
                        break Some(record.status.as_str());
                    }
                    // Rolled back: the record went with it.
                    Ok(None) => break Some(RunStatus::Interrupted.as_str()),
                    Ok(Some(_)) => {
                        let busy = self.is_busy(&live.thread_id).await.unwrap_or(true);
                        orphan = if busy { 0 } else { orphan + 1 };
                        if orphan >= FOLLOW_ORPHAN_CHECKS {
                            push_json(
                                &live.log,
                                "error",
                                &json!({"error": "RunLost", "message": "the process running this run stopped before it ended"}),
                            );
                            break Some(RunStatus::Error.as_str());
                        }
                    }
                    Err(e) => tracing::error!("{e}"),
                }
            }
            let asked = *cancel.borrow_and_update();
            if let Some(action) = asked.filter(|_| !cancel_sent) {
                cancel_sent = true;
                self.cancel_elsewhere(&live.run_id, action).await;
            }
            tokio::select! {
                () = tokio::time::sleep(FOLLOW_EVERY) => {}
                _ = cancel.changed() => {}
            }
        };
        close_log(&live, ended);
        self.state.lock().followers.remove(&live.run_id);
    }
}
