//! [`RunManager`]: starts runs in the background, one at a time per thread, applies the
//! multitask strategies, cancels, and keeps each run's event log for subscribers.
//!
//! A run executes in its own task, independent of the request that created it, so a
//! client that disconnects and reconnects (with `Last-Event-ID`) finds it still going.
//! Cancelling drops the agent's stream at its current await point: the step in flight
//! is abandoned (a model call is aborted, nothing of that step is checkpointed) and
//! every checkpoint written before stays. `rollback` then appends a checkpoint equal to
//! the thread's state before the run, since checkpoints are never deleted.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use keel_agent::{Agent, AgentError};
use keel_core::message::Message;
use keel_core::middleware::MiddlewareError;
use keel_core::state::{INTERRUPT_KEY, MessageOp, StateUpdate};
use keel_core::store::{Checkpoint, CheckpointWrite, Checkpointer, PutOutcome};
use keel_middleware::human_in_the_loop::{Decision, HumanInTheLoop, ResumeError};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, watch};

use super::log::EventLog;
use super::modes::{ModeSet, WireMode};
use super::translate::{RunContext, Translator};
use crate::error::ApiError;
use crate::lease::Leases;
use crate::registry::{Registry, RunRecord, RunStatus, StoredEvent, Strategy, ThreadStatus};
use crate::time::now_ms;
use crate::wire::{message_to_lc, state_to_values};

/// How a run is cancelled (the protocol's `action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelAction {
    /// Stop; keep what the run checkpointed.
    Interrupt,
    /// Stop and restore the thread's state from before the run; the run record goes.
    Rollback,
}

impl CancelAction {
    /// The protocol's name.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelAction::Interrupt => "interrupt",
            CancelAction::Rollback => "rollback",
        }
    }

    /// Reads `interrupt` or `rollback`.
    pub fn parse(s: &str) -> Result<CancelAction, String> {
        match s {
            "interrupt" => Ok(CancelAction::Interrupt),
            "rollback" => Ok(CancelAction::Rollback),
            other => Err(format!("action {other:?} is not interrupt or rollback")),
        }
    }
}

/// Limits on what runs may hold.
#[derive(Clone, Debug)]
pub struct RunLimits {
    /// Bytes of events kept per run for reconnecting subscribers.
    pub max_log_bytes: usize,
    /// Runs executing at once; more wait as `pending`.
    pub max_running: usize,
    /// Runs waiting behind a thread's current one.
    pub max_queue_per_thread: usize,
    /// Finished runs whose event log is kept (oldest dropped first).
    pub finished_logs: usize,
    /// Bytes of events kept across all finished runs' logs: past it the oldest finished
    /// logs go first. A run whose log is gone still answers `join` (the thread's final
    /// values) and a reconnect (its `end` event). Default 64 MiB.
    pub finished_log_bytes: usize,
    /// How long a streaming response may go without the client taking more of it before
    /// the server drops that response (the run goes on). Default 60 s.
    pub write_timeout: Duration,
    /// Tries at writing a run's final status (or removing a rolled-back run's record)
    /// before the run is ended as `error` in this process; the write then goes on being
    /// retried in the background until it succeeds.
    pub final_write_tries: u32,
    /// The pause after the first failed try at a final write, doubled after each one up
    /// to [`FINAL_WRITE_MAX_PAUSE`].
    pub final_write_pause: Duration,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            // A long run of a real model sends well under a MiB of events.
            max_log_bytes: 8 * 1024 * 1024,
            max_running: 512,
            max_queue_per_thread: 64,
            finished_logs: 256,
            finished_log_bytes: 64 * 1024 * 1024,
            write_timeout: Duration::from_secs(60),
            // 0.1 + 0.2 + 0.4 + 0.8 + 1.6 s: a storage hiccup of about 3 s goes unnoticed.
            final_write_tries: 6,
            final_write_pause: Duration::from_millis(100),
        }
    }
}

/// The assistant every run executes.
#[derive(Clone, Debug)]
pub struct AssistantInfo {
    /// Its id.
    pub assistant_id: String,
    /// Its graph id (and name).
    pub graph_id: String,
    /// Its description.
    pub description: Option<String>,
    /// The model's name (`ls_model_name` in message metadata).
    pub model_name: String,
    /// The model's provider (`ls_provider`).
    pub provider: String,
}

/// A run the manager knows: its event log and how to stop it.
#[derive(Debug)]
pub struct LiveRun {
    /// The run's id.
    pub run_id: String,
    /// Its thread.
    pub thread_id: String,
    /// The modes it streams.
    pub modes: ModeSet,
    /// Its events.
    pub log: EventLog,
    cancel: watch::Sender<Option<CancelAction>>,
}

impl LiveRun {
    /// Asks the run to stop.
    pub fn cancel(&self, action: CancelAction) {
        self.cancel.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(action);
                true
            } else {
                false
            }
        });
    }
}

struct Queued {
    live: Arc<LiveRun>,
    input: Vec<Message>,
    resume: Option<RunCommand>,
    from: Option<u64>,
}

/// What [`RunManager::admit`] decided.
#[derive(Default)]
struct Admitted {
    /// The run to start now.
    start: Option<Queued>,
    /// Queued runs taken off the thread's queue, with how they are cancelled.
    displaced: Vec<(Arc<LiveRun>, CancelAction)>,
}

#[derive(Default)]
struct Slot {
    active: Option<Arc<LiveRun>>,
    queue: VecDeque<Queued>,
}

#[derive(Default)]
struct State {
    slots: HashMap<String, Slot>,
    live: HashMap<String, Arc<LiveRun>>,
    /// Finished runs whose log is kept, oldest first, with the bytes each log holds.
    finished: VecDeque<(String, usize)>,
    /// The sum of those bytes.
    finished_bytes: usize,
    /// Runs of other processes (shared database) being followed here, by run id.
    followers: HashMap<String, Weak<LiveRun>>,
    /// Runs that ended here as `error` because their final status could not be written,
    /// by run id, with the error: what clients are told until the write succeeds.
    unwritten: HashMap<String, String>,
}

/// What a run's record becomes when it ends.
#[derive(Clone, Debug)]
enum Final {
    /// Its status (and error).
    Status(RunStatus, Option<String>),
    /// Removed (rolled back).
    Delete,
}

/// The longest pause between two tries at a final write (the background retries of a
/// status that could not be written settle at this pace).
pub const FINAL_WRITE_MAX_PAUSE: Duration = Duration::from_secs(30);

/// How often [`RunManager::wait_idle`] looks.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// How often the process running a run copies its new events to a shared database
/// (and checks for a cancel asked through another process).
const MIRROR_EVERY: Duration = Duration::from_millis(200);
/// How often a process following another's run reads its new events.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// How long a run's copied events stay in a shared database.
pub const EVENTS_KEPT: Duration = Duration::from_secs(15 * 60);
/// Quiet polls after which a follower checks whether the run still exists.
const FOLLOW_CHECK_POLLS: u32 = 20;
/// Checks in a row finding the run unfinished with nobody running its thread before a
/// follower gives up on it (its process stopped).
const FOLLOW_ORPHAN_CHECKS: u32 = 5;

/// What a new run needs, once the request is validated.
#[derive(Clone, Debug)]
pub struct NewRun {
    /// Messages appended to the thread.
    pub input: Vec<Message>,
    /// The earlier checkpoint the run forks from (a new branch whose parent it is);
    /// `None`: the run continues the thread's head.
    pub from_checkpoint: Option<u64>,
    /// The run's `command` (an answer to the thread's pending interrupt, or a state
    /// update), applied when the run starts; the input is then empty.
    pub resume: Option<RunCommand>,
    /// Protocol modes streamed.
    pub modes: ModeSet,
    /// Client metadata.
    pub metadata: Map<String, Value>,
    /// What to do if the thread is busy.
    pub strategy: Strategy,
    /// The request's arguments, echoed in the run's `kwargs`.
    pub kwargs: Value,
}

/// What a run with a `command` does: answer the thread's pending human-in-the-loop
/// review, or write messages.
#[derive(Clone, Debug, PartialEq)]
pub enum RunCommand {
    /// One decision per paused call (`command: {resume: {decisions: [...]}}`): recorded,
    /// then the agent runs and applies them.
    Decide(Vec<Decision>),
    /// `command: {goto: "__end__"}`: the review ends with no tool and no model run
    /// ([`HumanInTheLoop::resolve`]); the run ends there.
    Resolve,
    /// `command: {update: {messages: [...]}}` on a thread that is not paused: the
    /// messages are written as one checkpoint, as LangGraph applies an update to a
    /// thread whose run is over; nothing runs.
    Update(Vec<Message>),
}

/// Starts, queues, cancels and tracks runs.
pub struct RunManager {
    agent: Agent,
    registry: Arc<Registry>,
    assistant: AssistantInfo,
    limits: RunLimits,
    leases: Leases,
    running: Arc<Semaphore>,
    state: Mutex<State>,
    /// Runs started, to prune old copied events now and then.
    started: AtomicU64,
    /// Run tasks not yet done (their end and the thread's status written).
    driving: AtomicUsize,
}

impl std::fmt::Debug for RunManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunManager")
            .field("assistant", &self.assistant)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// How a run ended.
enum Ending {
    Done(Result<keel_agent::RunOutput, AgentError>),
    Cancelled(CancelAction),
}

impl RunManager {
    /// A manager running `agent`.
    pub fn new(
        agent: Agent,
        registry: Arc<Registry>,
        assistant: AssistantInfo,
        limits: RunLimits,
        leases: Leases,
    ) -> Self {
        RunManager {
            leases,
            running: Arc::new(Semaphore::new(limits.max_running.max(1))),
            agent,
            registry,
            assistant,
            limits,
            state: Mutex::new(State::default()),
            started: AtomicU64::new(0),
            driving: AtomicUsize::new(0),
        }
    }

    /// The agent.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The assistant.
    pub fn assistant(&self) -> &AssistantInfo {
        &self.assistant
    }

    /// The limits runs run under.
    pub fn limits(&self) -> &RunLimits {
        &self.limits
    }

    /// Bytes held by the logs of the finished runs still kept (at most
    /// [`RunLimits::finished_log_bytes`]).
    pub fn finished_log_bytes(&self) -> usize {
        self.state.lock().finished_bytes
    }

    /// The live (or recently finished) run, if its log is still kept.
    pub fn live(&self, run_id: &str) -> Option<Arc<LiveRun>> {
        self.state.lock().live.get(run_id).cloned()
    }

    /// The thread's runs whose logs are kept here (running, queued, recently finished),
    /// oldest first (run ids are time-ordered).
    pub fn thread_runs(&self, thread_id: &str) -> Vec<Arc<LiveRun>> {
        let mut runs: Vec<Arc<LiveRun>> = self
            .state
            .lock()
            .live
            .values()
            .filter(|live| live.thread_id == thread_id)
            .cloned()
            .collect();
        runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        runs
    }

    /// True while the thread has a run executing or queued here, or (on a shared
    /// database) while another process runs it.
    pub async fn is_busy(&self, thread_id: &str) -> Result<bool, ApiError> {
        if self.state.lock().slots.contains_key(thread_id) {
            return Ok(true);
        }
        self.leases
            .held_elsewhere(thread_id)
            .await
            .map_err(|e| ApiError::storage("checking the thread's lease", e))
    }

    /// Creates a run on a thread (whose ownership the caller checked) and starts it, or
    /// queues it, as the thread's state and the run's strategy say.
    pub async fn create(
        self: &Arc<Self>,
        thread_id: &str,
        run: NewRun,
    ) -> Result<(RunRecord, Arc<LiveRun>), ApiError> {
        let run_id = uuid::Uuid::now_v7().to_string();
        let live = Arc::new(LiveRun {
            run_id: run_id.clone(),
            thread_id: thread_id.to_owned(),
            modes: run.modes,
            log: EventLog::new(self.limits.max_log_bytes),
            cancel: watch::Sender::new(None),
        });
        let now = now_ms();
        let record = RunRecord {
            run_id: run_id.clone(),
            thread_id: thread_id.to_owned(),
            assistant_id: self.assistant.assistant_id.clone(),
            created_at_ms: now,
            updated_at_ms: now,
            status: RunStatus::Pending,
            metadata: run.metadata,
            strategy: run.strategy,
            kwargs: run.kwargs,
            error: None,
        };
        // Recorded before it can start, so its status updates always find it.
        self.registry
            .insert_run(&record)
            .await
            .map_err(|e| ApiError::storage("recording the run", e))?;
        // Busy before the run can start: a run that ends at once then leaves it idle.
        self.log_err(
            self.registry
                .set_thread_status(thread_id, ThreadStatus::Busy)
                .await,
        );
        let admitted = match self.admit(
            thread_id,
            &live,
            (run.input, run.from_checkpoint),
            run.resume,
            run.strategy,
        ) {
            Ok(admitted) => admitted,
            Err(e) => {
                self.log_err(self.registry.delete_run(thread_id, &run_id).await);
                return Err(e);
            }
        };
        for (displaced, action) in admitted.displaced {
            displaced.cancel(action);
            self.close_unstarted(&displaced, action).await;
        }
        let start = admitted.start;
        if self.registry.is_shared() {
            let manager = self.clone();
            let mirrored = live.clone();
            tokio::spawn(async move { manager.mirror(mirrored).await });
        }
        if let Some(queued) = start {
            self.spawn(queued);
        }
        Ok((record, live))
    }

    fn log_err<T>(&self, result: Result<T, crate::registry::RegistryError>) {
        if let Err(e) = result {
            tracing::error!("{e}");
        }
    }

    /// Starts the run now, queues it, or refuses it, by the thread's state and strategy.
    /// Also returns the queued runs it displaced (`interrupt` and `rollback` cancel every
    /// run of the thread before them, as LangGraph does), for the caller to close.
    fn admit(
        &self,
        thread_id: &str,
        live: &Arc<LiveRun>,
        (input, from): (Vec<Message>, Option<u64>),
        resume: Option<RunCommand>,
        strategy: Strategy,
    ) -> Result<Admitted, ApiError> {
        let run_id = live.run_id.clone();
        let mut state = self.state.lock();
        let slot = state.slots.entry(thread_id.to_owned()).or_default();
        let queued = Queued {
            live: live.clone(),
            input,
            resume,
            from,
        };
        let mut admitted = Admitted::default();
        match (&slot.active, strategy) {
            (None, _) => {
                slot.active = Some(live.clone());
                admitted.start = Some(queued);
            }
            (Some(_), Strategy::Reject) => {
                return Err(ApiError::Conflict(format!(
                    "thread {} is already running a run; wait for it, or use multitask_strategy enqueue, interrupt or rollback",
                    crate::auth::public_thread_id(thread_id)
                )));
            }
            (Some(_), Strategy::Enqueue) => {
                if slot.queue.len() >= self.limits.max_queue_per_thread {
                    return Err(ApiError::Busy(format!(
                        "thread {} already has {} runs waiting; try again later",
                        crate::auth::public_thread_id(thread_id),
                        slot.queue.len()
                    )));
                }
                slot.queue.push_back(queued);
            }
            // Interrupt or rollback: every run of the thread before this one stops (the
            // running one at its current step, the queued ones before they start), so
            // only the newest input is answered.
            (Some(active), strategy) => {
                let action = if strategy == Strategy::Rollback {
                    CancelAction::Rollback
                } else {
                    CancelAction::Interrupt
                };
                active.cancel(action);
                admitted.displaced = slot.queue.drain(..).map(|q| (q.live, action)).collect();
                slot.queue.push_back(queued);
            }
        }
        state.live.insert(run_id, live.clone());
        Ok(admitted)
    }

    fn spawn(self: &Arc<Self>, queued: Queued) {
        let manager = self.clone();
        self.driving.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            manager.clone().drive(queued).await;
            manager.driving.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Returns once no run is executing or queued here and every ended run's status
    /// has been written (or handed to the background retries).
    pub async fn wait_idle(&self) {
        loop {
            if self.driving.load(Ordering::SeqCst) == 0 && self.state.lock().slots.is_empty() {
                return;
            }
            tokio::time::sleep(IDLE_POLL).await;
        }
    }

    /// Stops every run executing or queued here, as a server that stops must: each is
    /// cancelled (recorded as interrupted); one that has not recorded its end within
    /// `grace` is recorded as failed, as a restart's recovery would. Returns how many
    /// runs were stopped.
    pub async fn shutdown(&self, grace: Duration) -> usize {
        let open: Vec<Arc<LiveRun>> = {
            let state = self.state.lock();
            state
                .slots
                .values()
                .flat_map(|slot| {
                    slot.active
                        .iter()
                        .cloned()
                        .chain(slot.queue.iter().map(|q| q.live.clone()))
                })
                .collect()
        };
        for live in &open {
            live.cancel(CancelAction::Interrupt);
        }
        if tokio::time::timeout(grace, self.wait_idle()).await.is_err() {
            for live in open.iter().filter(|live| !live.log.is_closed()) {
                self.log_err(
                    self.registry
                        .set_run_status(
                            &live.thread_id,
                            &live.run_id,
                            RunStatus::Error,
                            Some("the server stopped before the run ended".into()),
                        )
                        .await,
                );
                self.log_err(
                    self.registry
                        .set_thread_status(&live.thread_id, ThreadStatus::Idle)
                        .await,
                );
            }
        }
        open.len()
    }

    /// Cancels a run of a thread: a running one stops at its current step, a queued one
    /// never starts. A finished run is left as it is.
    pub async fn cancel(self: &Arc<Self>, thread_id: &str, run_id: &str, action: CancelAction) {
        // Found here: `Some(dequeued run)` or `None` once signalled; not here: `Err`.
        let found: Result<Option<Queued>, ()> = {
            let mut state = self.state.lock();
            match state.slots.get_mut(thread_id) {
                None => Err(()),
                Some(slot) => {
                    if let Some(active) = slot.active.as_ref().filter(|a| a.run_id == run_id) {
                        active.cancel(action);
                        Ok(None)
                    } else {
                        let position = slot.queue.iter().position(|q| q.live.run_id == run_id);
                        position
                            .and_then(|i| slot.queue.remove(i))
                            .map(Some)
                            .ok_or(())
                    }
                }
            }
        };
        match found {
            Ok(Some(queued)) => {
                queued.live.cancel(action);
                self.close_unstarted(&queued.live, action).await;
            }
            Ok(None) => {}
            Err(()) => self.cancel_elsewhere(run_id, action).await,
        }
    }

    async fn close_unstarted(self: &Arc<Self>, live: &LiveRun, action: CancelAction) {
        let status = self.finalize(live, cancel_final(action)).await;
        push_json(
            &live.log,
            "end",
            &json!({"run_id": live.run_id, "status": status}),
        );
        live.log.close();
        self.retire(&live.run_id);
    }

    /// On a shared database, asks the process running `run_id` to cancel it (it reads
    /// the request within [`MIRROR_EVERY`]).
    async fn cancel_elsewhere(&self, run_id: &str, action: CancelAction) {
        if !self.registry.is_shared() || self.live(run_id).is_some() {
            return;
        }
        self.log_err(self.registry.request_cancel(run_id, action.as_str()).await);
    }

    /// The run, to stream or wait for: this process's, or on a shared database one that
    /// another process is running (or ran recently), followed through its copied events.
    /// `None` when its events are gone.
    pub async fn find(self: &Arc<Self>, record: &RunRecord) -> Option<Arc<LiveRun>> {
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
    async fn mirror(self: Arc<Self>, live: Arc<LiveRun>) {
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
    async fn follow(self: Arc<Self>, live: Arc<LiveRun>) {
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
                            .and_then(|data| partial_key(&e.event, &data));
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
        if let Some(status) = ended {
            push_json(
                &live.log,
                "end",
                &json!({"run_id": live.run_id, "status": status}),
            );
        }
        live.log.close();
        self.state.lock().followers.remove(&live.run_id);
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

    async fn write_final(
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
    async fn reconcile(
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
    pub fn overlay(&self, mut record: RunRecord) -> RunRecord {
        if !record.status.is_final()
            && let Some(message) = self.state.lock().unwritten.get(&record.run_id)
        {
            record.status = RunStatus::Error;
            record.error = Some(message.clone());
        }
        record
    }

    /// Runs one run to its end, then starts the next queued one of its thread.
    async fn drive(self: Arc<Self>, queued: Queued) {
        let Queued {
            live,
            input,
            resume,
            from,
        } = queued;
        let mut cancel = live.cancel.subscribe();
        let ending = self
            .execute(&live, (input, from), resume, &mut cancel)
            .await;
        let mut paused = false;
        let status = match ending {
            Ending::Done(Ok(output)) => {
                paused = output
                    .state
                    .values
                    .get(INTERRUPT_KEY)
                    .is_some_and(|v| !v.is_null());
                let values = state_to_values(&output.state);
                let mut out = Vec::new();
                Translator::new(live.modes, self.context(&live)).finish(values, &mut out);
                for (mode, event, data) in out {
                    push_mode(&live.log, event, &data, mode);
                }
                self.finalize(&live, Final::Status(RunStatus::Success, None))
                    .await
            }
            Ending::Done(Err(error)) => {
                let message = error.to_string();
                tracing::warn!(run_id = %live.run_id, "run failed: {message}");
                push_json(
                    &live.log,
                    "error",
                    &json!({"error": error_name(&error), "message": message}),
                );
                self.finalize(&live, Final::Status(RunStatus::Error, Some(message)))
                    .await
            }
            Ending::Cancelled(action) => {
                // As langgraph-api does, a run stopped with action `interrupt` leaves its
                // thread `interrupted` (a rolled-back one leaves it as it was before).
                paused = action == CancelAction::Interrupt;
                self.finalize(&live, cancel_final(action)).await
            }
        };
        let next = {
            let mut state = self.state.lock();
            let next = match state.slots.get_mut(&live.thread_id) {
                Some(slot) => {
                    slot.active = None;
                    let next = slot.queue.pop_front();
                    if let Some(next) = &next {
                        slot.active = Some(next.live.clone());
                    }
                    next
                }
                None => None,
            };
            if next.is_none() {
                state.slots.remove(&live.thread_id);
            }
            next
        };
        // The thread's status is written before the `end` event: a client that reads
        // the thread once its stream ended (or its join returned) sees it idle,
        // interrupted or failed, never still busy.
        if next.is_none() {
            let thread_status = if status == "error" {
                ThreadStatus::Error
            } else if paused {
                ThreadStatus::Interrupted
            } else {
                ThreadStatus::Idle
            };
            self.write_thread_status(&live.thread_id, thread_status)
                .await;
        }
        push_json(
            &live.log,
            "end",
            &json!({"run_id": live.run_id, "status": status}),
        );
        live.log.close();
        self.retire(&live.run_id);
        if let Some(next) = next {
            self.spawn(next);
        }
    }

    /// Writes a thread's status once its last run here ended, retrying as final writes
    /// are, then in the background (unless a newer run of the thread starts first).
    async fn write_thread_status(self: &Arc<Self>, thread_id: &str, status: ThreadStatus) {
        let mut pause = self.limits.final_write_pause;
        for tries in 1..=self.limits.final_write_tries.max(1) {
            if self.state.lock().slots.contains_key(thread_id) {
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
                if manager.state.lock().slots.contains_key(&thread_id) {
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
    fn retire(&self, run_id: &str) {
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

    fn context(&self, live: &LiveRun) -> RunContext {
        RunContext {
            run_id: live.run_id.clone(),
            thread_id: live.thread_id.clone(),
            assistant_id: self.assistant.assistant_id.clone(),
            graph_id: self.assistant.graph_id.clone(),
            model_name: self.assistant.model_name.clone(),
            provider: self.assistant.provider.clone(),
        }
    }

    async fn execute(
        &self,
        live: &LiveRun,
        (input, from): (Vec<Message>, Option<u64>),
        resume: Option<RunCommand>,
        cancel: &mut watch::Receiver<Option<CancelAction>>,
    ) -> Ending {
        // Wait for a running slot, unless cancelled first.
        let permit = tokio::select! {
            permit = self.running.clone().acquire_owned() => permit.ok(),
            action = wait_cancel(cancel) => return Ending::Cancelled(action),
        };
        // Another process sharing the database may be running this thread: wait for it.
        let lease = tokio::select! {
            lease = self.leases.acquire(&live.thread_id) => match lease {
                Ok(lease) => lease,
                Err(e) => {
                    tracing::error!(run_id = %live.run_id, "could not lease the thread: {e}");
                    return Ending::Done(Err(AgentError::Checkpoint {
                        thread_id: live.thread_id.clone(),
                        source: keel_core::store::StoreError::Backend(e.to_string()),
                    }));
                }
            },
            action = wait_cancel(cancel) => return Ending::Cancelled(action),
        };
        self.log_err(
            self.registry
                .set_run_status(&live.thread_id, &live.run_id, RunStatus::Running, None)
                .await,
        );
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
        let resume_failed = |e: ResumeError| {
            Ending::Done(Err(match e {
                ResumeError::Agent(e) => e,
                other => AgentError::Middleware(MiddlewareError {
                    middleware: "HumanInTheLoopMiddleware".into(),
                    hook: "resume",
                    message: other.to_string(),
                }),
            }))
        };
        match resume {
            // A resume records its decisions under the lease, so the run applies them.
            Some(RunCommand::Decide(decisions)) => {
                if let Err(e) =
                    HumanInTheLoop::record_decisions(&self.agent, &live.thread_id, decisions).await
                {
                    lease.release().await;
                    return resume_failed(e);
                }
            }
            // Ending the review is the whole run: one checkpoint, under the lease.
            Some(RunCommand::Resolve) => {
                let ending = match self.resolve(live).await {
                    Ok(ending) => ending,
                    Err(e) => resume_failed(e),
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
        let ending = match ending {
            Some(ending) => ending,
            // The stream has ended, so this returns the outcome it holds.
            None => Ending::Done(stream.finish().await),
        };
        drop(permit);
        if let Ending::Cancelled(CancelAction::Rollback) = ending {
            rollback(checkpointer.as_ref(), &live.thread_id, &live.run_id, before).await;
        }
        lease.release().await;
        ending
    }
}

impl RunManager {
    /// Ends the thread's pending review ([`HumanInTheLoop::resolve`]) and streams what
    /// that step changed, as a node's update and the state after it.
    async fn resolve(&self, live: &LiveRun) -> Result<Ending, ResumeError> {
        let update = HumanInTheLoop::resolve(&self.agent, &live.thread_id, &live.run_id).await?;
        Ok(self
            .one_step(live, "HumanInTheLoopMiddleware.resolve", update)
            .await?)
    }

    /// Writes `messages` on the thread (`head`, read under the lease) as one checkpoint,
    /// with compare-and-swap on the head, unless a review is pending.
    async fn update(
        &self,
        live: &LiveRun,
        head: Option<&Checkpoint>,
        messages: Vec<Message>,
    ) -> Result<Ending, AgentError> {
        if head.is_some_and(|cp| cp.values.get(INTERRUPT_KEY).is_some_and(|v| !v.is_null())) {
            return Err(AgentError::Middleware(MiddlewareError {
                middleware: "HumanInTheLoopMiddleware".into(),
                hook: "update",
                message:
                    "the thread is waiting for a review; answer it before updating its messages"
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
    async fn one_step(
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

/// How a cancelled run's record ends.
fn cancel_final(action: CancelAction) -> Final {
    match action {
        CancelAction::Rollback => Final::Delete,
        CancelAction::Interrupt => Final::Status(RunStatus::Interrupted, None),
    }
}

/// Restores the thread to `before` (the head when the run started) with one more
/// checkpoint, since checkpoints are append-only: the rolled-back run's steps stay in the
/// history, and the head's state is `before`'s again. Values the run added stay (an
/// update can set values, not unset them).
async fn rollback(
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
    let mut update = StateUpdate {
        messages: vec![MessageOp::RemoveAll],
        values,
    };
    update.messages.extend(
        messages
            .into_iter()
            .map(|message| MessageOp::Upsert { message }),
    );
    let write = CheckpointWrite {
        parent: head,
        run_id: run_id.to_owned(),
        node: "rollback".into(),
        update,
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

async fn wait_cancel(cancel: &mut watch::Receiver<Option<CancelAction>>) -> CancelAction {
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

fn push_json(log: &EventLog, event: &str, data: &Value) {
    push_mode(log, event, data, None);
}

fn push_mode(log: &EventLog, event: &str, data: &Value, mode: Option<super::modes::WireMode>) {
    let text = serde_json::to_string(data).unwrap_or_else(|_| "null".into());
    let key = partial_key(event, data);
    log.push(event, &text, mode, key.as_deref());
}

/// A `messages/partial` event carries its whole message so far, so it supersedes the
/// previous partial of the same message: keyed by the message's id, the log keeps only
/// the latest.
fn partial_key(event: &str, data: &Value) -> Option<String> {
    if event != "messages/partial" {
        return None;
    }
    data.get(0)
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
        .map(|id| format!("partial:{id}"))
}

/// The error's kind, as the `error` event's `error` field.
fn error_name(error: &AgentError) -> &'static str {
    match error {
        AgentError::Middleware(_) => "MiddlewareError",
        AgentError::UndeclaredJump { .. } | AgentError::JumpAfterEnd { .. } => "GraphError",
        AgentError::Model { .. } => "ModelError",
        AgentError::State { .. } => "InvalidUpdateError",
        AgentError::RecursionLimit { .. } => "GraphRecursionError",
        AgentError::Checkpoint { .. }
        | AgentError::DeleteThreadData { .. }
        | AgentError::ForkThreadData { .. }
        | AgentError::UnknownCheckpoint { .. }
        | AgentError::UnknownThread { .. } => "CheckpointError",
        AgentError::Rejected { .. } | AgentError::Conflict { .. } => "ConflictError",
        AgentError::Interrupted { .. } | AgentError::RolledBack { .. } => "InterruptedError",
    }
}

#[cfg(test)]
mod tests {
    use keel_testkit::ScriptedModel;

    use super::*;

    fn manager(limits: RunLimits) -> Arc<RunManager> {
        let model = ScriptedModel::from_fn(|_| Ok(Message::ai("x".repeat(100_000))));
        let agent = Agent::builder().model(Arc::new(model)).build().unwrap();
        let assistant = AssistantInfo {
            assistant_id: "a".into(),
            graph_id: "agent".into(),
            description: None,
            model_name: "scripted".into(),
            provider: "scripted".into(),
        };
        Arc::new(RunManager::new(
            agent,
            Arc::new(Registry::memory()),
            assistant,
            limits,
            Leases::Local,
        ))
    }

    fn new_run() -> NewRun {
        NewRun {
            input: vec![Message::human("hi")],
            from_checkpoint: None,
            resume: None,
            modes: ModeSet::of(&[WireMode::Values]),
            metadata: Map::new(),
            strategy: Strategy::Enqueue,
            kwargs: json!({}),
        }
    }

    #[tokio::test]
    async fn finished_logs_stay_under_their_byte_budget() {
        let budget = 1024 * 1024;
        let manager = manager(RunLimits {
            finished_log_bytes: budget,
            ..RunLimits::default()
        });
        let mut runs = Vec::new();
        for i in 0..40 {
            let (_, live) = manager.create(&format!("t{i}"), new_run()).await.unwrap();
            live.log.closed().await;
            assert!(live.log.bytes() > 100_000, "each log holds the answer");
            runs.push(live.run_id.clone());
            // Retired just after its log closed.
            while manager.live(&live.run_id).is_some()
                && manager.state.lock().finished.back().map(|f| &f.0) != Some(&live.run_id)
            {
                tokio::task::yield_now().await;
            }
            assert!(
                manager.finished_log_bytes() <= budget,
                "{} bytes kept after {} runs",
                manager.finished_log_bytes(),
                i + 1
            );
        }
        // The newest are kept, the oldest went first.
        assert!(manager.live(&runs[39]).is_some());
        assert!(manager.live(&runs[0]).is_none());
        let kept: usize = runs
            .iter()
            .filter_map(|id| manager.live(id))
            .map(|live| live.log.bytes())
            .sum();
        assert_eq!(kept, manager.finished_log_bytes());
    }
}
