//! [`RunManager`]: starts runs in the background, one at a time per thread, applies the
//! multitask strategies, cancels, and keeps each run's event log for subscribers.
//!
//! A run executes in its own task, independent of the request that created it, so a
//! client that disconnects and reconnects (with `Last-Event-ID`) finds it still going.
//! Cancelling drops the agent's stream at its current await point: the step in flight
//! is abandoned (a model call is aborted, nothing of that step is checkpointed) and
//! every checkpoint written before stays. `rollback` then appends a checkpoint equal to
//! the thread's state before the run, since checkpoints are never deleted.
//!
//! This file holds the manager and admission (create, the multitask strategies' queue,
//! shutdown); its jobs are one file each: `execute` runs a run, `ending` writes how
//! it ended and sends `end`, `cancel` stops one, `shared` follows and mirrors runs
//! across processes on a shared database.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use keel_agent::gate::{Admitted, Cancelled, Gated, Left, Refused, ThreadGate, Waiting};
use keel_agent::{Agent, AgentError};
use keel_core::message::Message;
use keel_core::middleware::MiddlewareError;
use keel_core::state::{INTERRUPT_KEY, StateUpdate};
use keel_core::store::{Checkpoint, CheckpointWrite, Checkpointer, PutOutcome};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, watch};

use super::log::EventLog;
use super::modes::{ModeSet, WireMode};
use super::translate::{Data, RunContext, Translator};
use crate::error::ApiError;
use crate::lease::Leases;
use crate::registry::{Registry, RunRecord, RunStatus, StoredEvent, Strategy, ThreadStatus};
use crate::time::now_ms;
use crate::wire::{message_to_lc, state_to_values};

mod cancel;
mod ending;
mod execute;
mod shared;

use cancel::{cancel_final, wait_cancel};
use ending::close_log;

/// How a run is cancelled (the protocol's `action`): the agent's own type.
pub use keel_agent::CancelAction;

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
    /// to 30 s.
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
    /// The status its clients were told when it ended (`None` while it runs); held
    /// while the end is written, so a run ends once.
    ended: tokio::sync::Mutex<Option<&'static str>>,
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

/// A run in the thread gate: its log and handle, and what it starts with (taken when
/// it starts).
struct Queued {
    live: Arc<LiveRun>,
    start: Mutex<Option<Start>>,
}

/// What a run executes.
struct Start {
    input: Vec<Message>,
    resume: Option<RunCommand>,
    from: Option<u64>,
}

impl Gated for Queued {
    fn id(&self) -> &str {
        &self.live.run_id
    }

    /// The running run stops at its current await point; a queued one never starts.
    fn preempt(&self, action: CancelAction) {
        self.live.cancel(action);
    }
}

#[derive(Default)]
struct State {
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

/// What a run with a `command` does: answer the thread's pause (a pending review, for
/// human in the loop), or write messages.
#[derive(Clone, Debug, PartialEq)]
pub enum RunCommand {
    /// `command: {resume: ...}`: the answer, checked and recorded by the middleware that
    /// paused ([`Agent::record_resume`]), then the agent runs and applies it.
    Resume(Value),
    /// `command: {goto: "__end__"}`: the pause ends with no tool and no model run
    /// ([`Agent::resolve_pause`]); the run ends there.
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
    /// Which run holds each thread and which wait, by the runs' strategies.
    gate: ThreadGate<Queued>,
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
    pub(crate) fn new(
        agent: Agent,
        registry: Arc<Registry>,
        assistant: AssistantInfo,
        limits: RunLimits,
        leases: Leases,
    ) -> Self {
        RunManager {
            leases,
            running: Arc::new(Semaphore::new(limits.max_running.max(1))),
            // As LangGraph Agent Server: an `interrupt`/`rollback` run cancels the queued
            // runs before it, which never start.
            gate: ThreadGate::new(Waiting::Cancel).with_max_waiting(limits.max_queue_per_thread),
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
    pub(crate) fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The assistant.
    pub(crate) fn assistant(&self) -> &AssistantInfo {
        &self.assistant
    }

    /// The limits runs run under.
    pub(crate) fn limits(&self) -> &RunLimits {
        &self.limits
    }

    /// Bytes held by the logs of the finished runs still kept (at most
    /// [`RunLimits::finished_log_bytes`]).
    #[cfg(test)]
    pub(crate) fn finished_log_bytes(&self) -> usize {
        self.state.lock().finished_bytes
    }

    /// The live (or recently finished) run, if its log is still kept.
    pub(crate) fn live(&self, run_id: &str) -> Option<Arc<LiveRun>> {
        self.state.lock().live.get(run_id).cloned()
    }

    /// The thread's runs whose logs are kept here (running, queued, recently finished),
    /// oldest first (run ids are time-ordered).
    pub(crate) fn thread_runs(&self, thread_id: &str) -> Vec<Arc<LiveRun>> {
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
    pub(crate) async fn is_busy(&self, thread_id: &str) -> Result<bool, ApiError> {
        if self.gate.is_busy(thread_id) {
            return Ok(true);
        }
        self.leases
            .held_elsewhere(thread_id)
            .await
            .map_err(|e| ApiError::storage("checking the thread's lease", e))
    }

    /// Creates a run on a thread (whose ownership the caller checked) and starts it, or
    /// queues it, as the thread's state and the run's strategy say.
    pub(crate) async fn create(
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
            ended: tokio::sync::Mutex::new(None),
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
        let queued = Arc::new(Queued {
            live: live.clone(),
            start: Mutex::new(Some(Start {
                input: run.input,
                resume: run.resume,
                from: run.from_checkpoint,
            })),
        });
        // Known before it can start (and end, which retires it from this map).
        self.state.lock().live.insert(run_id.clone(), live.clone());
        let admitted = match self.admit(thread_id, queued.clone(), run.strategy) {
            Ok(admitted) => admitted,
            Err(e) => {
                self.state.lock().live.remove(&run_id);
                self.log_err(self.registry.delete_run(thread_id, &run_id).await);
                return Err(e);
            }
        };
        if let Some(action) = run.strategy.preempts() {
            for displaced in admitted.displaced {
                self.close_unstarted(&displaced.live, action).await;
            }
        }
        if self.registry.is_shared() {
            let manager = self.clone();
            let mirrored = live.clone();
            tokio::spawn(async move { manager.mirror(mirrored).await });
        }
        if admitted.started {
            self.spawn(queued);
        }
        Ok((record, live))
    }

    fn log_err<T>(&self, result: Result<T, crate::registry::RegistryError>) {
        if let Err(e) = result {
            tracing::error!("{e}");
        }
    }

    /// Starts the run now, queues it, or refuses it, by the thread's state and strategy
    /// ([`ThreadGate::admit`]). Also returns the queued runs it displaced (`interrupt`
    /// and `rollback` cancel every run of the thread before them, as LangGraph does),
    /// for the caller to close.
    fn admit(
        &self,
        thread_id: &str,
        queued: Arc<Queued>,
        strategy: Strategy,
    ) -> Result<Admitted<Queued>, ApiError> {
        let thread = crate::auth::public_thread_id(thread_id);
        self.gate
            .admit(&Arc::from(thread_id), queued, strategy)
            .map_err(|refused| match refused {
                Refused::Busy => ApiError::Conflict(format!(
                    "thread {thread} is already running a run; wait for it, or use multitask_strategy enqueue, interrupt or rollback",
                )),
                // Run ids are fresh UUIDs: two runs never share one.
                Refused::DuplicateId => ApiError::Conflict(format!(
                    "thread {thread} already has a run with this id",
                )),
                Refused::Full { waiting } => ApiError::Busy(format!(
                    "thread {thread} already has {waiting} runs waiting; try again later",
                )),
            })
    }

    fn spawn(self: &Arc<Self>, queued: Arc<Queued>) {
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
            if self.driving.load(Ordering::SeqCst) == 0 && self.gate.is_idle() {
                return;
            }
            tokio::time::sleep(IDLE_POLL).await;
        }
    }

    /// Stops every run executing or queued here, as a server that stops must: each is
    /// cancelled (recorded as interrupted); one that has not recorded its end within
    /// `grace` is recorded as failed, as a restart's recovery would, and its subscribers
    /// get its `end` event. Each wait is bounded by `grace`, so storage that refuses
    /// writes cannot hold the stop. Returns how many runs were stopped.
    pub async fn shutdown(self: &Arc<Self>, grace: Duration) -> usize {
        let open: Vec<Arc<LiveRun>> = self
            .gate
            .entries()
            .into_iter()
            .map(|q| q.live.clone())
            .collect();
        for live in &open {
            live.cancel(CancelAction::Interrupt);
        }
        if tokio::time::timeout(grace, self.wait_idle()).await.is_err() {
            for live in open.iter().filter(|live| !live.log.is_closed()) {
                let failed = Final::Status(
                    RunStatus::Error,
                    Some("the server stopped before the run ended".into()),
                );
                // Bounded: a run still retrying its own final write holds its end, and
                // storage that keeps refusing would hold the stop for every retry. Its
                // subscribers are told now; its record is left to the retries, or to
                // the next start's recovery.
                match tokio::time::timeout(grace, self.conclude(live, failed, |_| None)).await {
                    Ok(_) => self.log_err(
                        self.registry
                            .set_thread_status(&live.thread_id, ThreadStatus::Idle)
                            .await,
                    ),
                    Err(_) => {
                        tracing::warn!(run_id = %live.run_id, "the run's end could not be recorded before the stop");
                        close_log(live, Some(RunStatus::Error.as_str()));
                    }
                }
            }
        }
        open.len()
    }
}

fn push_json(log: &EventLog, event: &str, data: &Value) {
    let text = serde_json::to_string(data).unwrap_or_else(|_| "null".into());
    log.push(
        event,
        &text,
        None,
        partial_key(event, Some(data)).as_deref(),
    );
}

fn push_mode(log: &EventLog, event: &str, data: &Data, mode: Option<super::modes::WireMode>) {
    let key = partial_key(event, data.json());
    log.push(event, &data.to_text(), mode, key.as_deref());
}

/// A `messages/partial` event carries its whole message so far, so it supersedes the
/// previous partial of the same message: keyed by the message's id, the log keeps only
/// the latest.
fn partial_key(event: &str, data: Option<&Value>) -> Option<String> {
    if event != "messages/partial" {
        return None;
    }
    data?
        .get(0)
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
        AgentError::NotPaused { .. } | AgentError::ResumeRefused { .. } => "InvalidUpdateError",
        AgentError::Rejected { .. }
        | AgentError::Conflict { .. }
        | AgentError::DuplicateRunId { .. } => "ConflictError",
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
