//! [`Registry`]: the server's records of threads and runs (who owns them, their
//! metadata and status). A thread's messages live in the agent's checkpointer; this
//! holds what the protocol adds around them.

use std::collections::HashMap;

use parking_lot::RwLock;
use serde_json::{Map, Value, json};

use crate::time::{now_ms, rfc3339};

/// A run's status, as the protocol names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    /// Queued behind another run of its thread.
    Pending,
    /// Executing.
    Running,
    /// Failed.
    Error,
    /// Finished.
    Success,
    /// Cancelled (or interrupted by a newer run); its checkpoints are kept.
    Interrupted,
}

impl RunStatus {
    /// The protocol's name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Error => "error",
            RunStatus::Success => "success",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// True once the run can no longer change.
    pub fn is_final(self) -> bool {
        !matches!(self, RunStatus::Pending | RunStatus::Running)
    }
}

/// A thread's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadStatus {
    /// No run in progress.
    Idle,
    /// A run is in progress.
    Busy,
    /// The last run failed.
    Error,
}

impl ThreadStatus {
    /// The protocol's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Idle => "idle",
            ThreadStatus::Busy => "busy",
            ThreadStatus::Error => "error",
        }
    }

    /// Reads a status filter.
    pub fn parse(s: &str) -> Option<ThreadStatus> {
        match s {
            "idle" => Some(ThreadStatus::Idle),
            "busy" => Some(ThreadStatus::Busy),
            "error" => Some(ThreadStatus::Error),
            _ => None,
        }
    }
}

/// What to do when a run is created on a thread that is already running one (the
/// protocol's `multitask_strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Refuse the new run (409).
    Reject,
    /// Cancel the current run (its checkpoints stay), then start the new one.
    Interrupt,
    /// Cancel the current run and restore the thread to its state before that run.
    Rollback,
    /// Run the new one after the ones ahead of it.
    Enqueue,
}

impl Strategy {
    /// The protocol's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Reject => "reject",
            Strategy::Interrupt => "interrupt",
            Strategy::Rollback => "rollback",
            Strategy::Enqueue => "enqueue",
        }
    }

    /// Reads the protocol's name.
    pub fn parse(s: &str) -> Result<Strategy, String> {
        match s {
            "reject" => Ok(Strategy::Reject),
            "interrupt" => Ok(Strategy::Interrupt),
            "rollback" => Ok(Strategy::Rollback),
            "enqueue" => Ok(Strategy::Enqueue),
            other => Err(format!(
                "multitask_strategy {other:?} is not one of reject, interrupt, rollback, enqueue"
            )),
        }
    }
}

/// A thread's record.
#[derive(Clone, Debug)]
pub struct ThreadRecord {
    /// The id.
    pub thread_id: String,
    /// The API-key owner that created it ("" without auth).
    pub owner: String,
    /// Creation time, ms since the epoch.
    pub created_at_ms: i64,
    /// Last change, ms since the epoch.
    pub updated_at_ms: i64,
    /// Client metadata.
    pub metadata: Map<String, Value>,
    /// Status.
    pub status: ThreadStatus,
}

impl ThreadRecord {
    /// The protocol's `Thread` object, with the thread's current values.
    pub fn to_json(&self, values: Value) -> Value {
        json!({
            "thread_id": self.thread_id,
            "created_at": rfc3339(self.created_at_ms),
            "updated_at": rfc3339(self.updated_at_ms),
            "metadata": self.metadata,
            "status": self.status.as_str(),
            "values": values,
            "interrupts": {},
        })
    }
}

/// A run's record.
#[derive(Clone, Debug)]
pub struct RunRecord {
    /// The id.
    pub run_id: String,
    /// Its thread.
    pub thread_id: String,
    /// The assistant it runs.
    pub assistant_id: String,
    /// Creation time, ms since the epoch.
    pub created_at_ms: i64,
    /// Last change, ms since the epoch.
    pub updated_at_ms: i64,
    /// Status.
    pub status: RunStatus,
    /// Client metadata.
    pub metadata: Map<String, Value>,
    /// Its multitask strategy.
    pub strategy: Strategy,
    /// The request's arguments (input, stream modes...), echoed as `kwargs`.
    pub kwargs: Value,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

impl RunRecord {
    /// The protocol's `Run` object.
    pub fn to_json(&self) -> Value {
        json!({
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": rfc3339(self.created_at_ms),
            "updated_at": rfc3339(self.updated_at_ms),
            "status": self.status.as_str(),
            "metadata": self.metadata,
            "multitask_strategy": self.strategy.as_str(),
            "kwargs": self.kwargs,
        })
    }
}

#[derive(Debug, Default)]
struct Tables {
    threads: HashMap<String, ThreadRecord>,
    runs: HashMap<String, RunRecord>,
    /// Run ids per thread, oldest first.
    thread_runs: HashMap<String, Vec<String>>,
}

/// Thread and run records of one server process. Every read is scoped by owner: a
/// thread of another owner is reported as missing.
#[derive(Debug, Default)]
pub struct Registry {
    tables: RwLock<Tables>,
}

/// Filters of `POST /threads/search`.
#[derive(Clone, Debug, Default)]
pub struct ThreadFilter {
    /// Every key must be present with an equal value.
    pub metadata: Map<String, Value>,
    /// Only these ids.
    pub ids: Option<Vec<String>>,
    /// Only this status.
    pub status: Option<ThreadStatus>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts a thread; `false` when the id is taken.
    pub fn insert_thread(&self, record: ThreadRecord) -> bool {
        let mut t = self.tables.write();
        if t.threads.contains_key(&record.thread_id) {
            return false;
        }
        t.threads.insert(record.thread_id.clone(), record);
        true
    }

    /// The thread, if it exists and belongs to `owner`.
    pub fn thread(&self, owner: &str, thread_id: &str) -> Option<ThreadRecord> {
        self.tables
            .read()
            .threads
            .get(thread_id)
            .filter(|t| t.owner == owner)
            .cloned()
    }

    /// True when a thread with this id exists, whoever owns it.
    pub fn thread_exists(&self, thread_id: &str) -> bool {
        self.tables.read().threads.contains_key(thread_id)
    }

    /// Changes a thread of `owner`; `None` when it is not theirs or does not exist.
    pub fn update_thread(
        &self,
        owner: &str,
        thread_id: &str,
        change: impl FnOnce(&mut ThreadRecord),
    ) -> Option<ThreadRecord> {
        let mut t = self.tables.write();
        let record = t.threads.get_mut(thread_id).filter(|t| t.owner == owner)?;
        change(record);
        record.updated_at_ms = now_ms();
        Some(record.clone())
    }

    /// Sets a thread's status, whoever owns it (the run manager's bookkeeping).
    pub fn set_thread_status(&self, thread_id: &str, status: ThreadStatus) {
        if let Some(record) = self.tables.write().threads.get_mut(thread_id) {
            record.status = status;
            record.updated_at_ms = now_ms();
        }
    }

    /// Deletes a thread of `owner` and its run records.
    pub fn delete_thread(&self, owner: &str, thread_id: &str) -> bool {
        let mut t = self.tables.write();
        if t.threads.get(thread_id).is_none_or(|r| r.owner != owner) {
            return false;
        }
        t.threads.remove(thread_id);
        for run_id in t.thread_runs.remove(thread_id).unwrap_or_default() {
            t.runs.remove(&run_id);
        }
        true
    }

    /// The threads of `owner` matching `filter`, newest first unless `ascending`.
    pub fn search_threads(
        &self,
        owner: &str,
        filter: &ThreadFilter,
        sort_by: &str,
        ascending: bool,
        offset: usize,
        limit: usize,
    ) -> Vec<ThreadRecord> {
        let t = self.tables.read();
        let mut found: Vec<ThreadRecord> = t
            .threads
            .values()
            .filter(|r| r.owner == owner)
            .filter(|r| filter.status.is_none_or(|s| r.status == s))
            .filter(|r| {
                filter
                    .ids
                    .as_ref()
                    .is_none_or(|ids| ids.contains(&r.thread_id))
            })
            .filter(|r| {
                filter
                    .metadata
                    .iter()
                    .all(|(k, v)| r.metadata.get(k) == Some(v))
            })
            .cloned()
            .collect();
        found.sort_by(|a, b| {
            let key = |r: &ThreadRecord| match sort_by {
                "created_at" => (r.created_at_ms, r.thread_id.clone()),
                "thread_id" => (0, r.thread_id.clone()),
                _ => (r.updated_at_ms, r.thread_id.clone()),
            };
            key(a).cmp(&key(b))
        });
        if !ascending {
            found.reverse();
        }
        found.into_iter().skip(offset).take(limit).collect()
    }

    /// Records a new run.
    pub fn insert_run(&self, record: RunRecord) {
        let mut t = self.tables.write();
        t.thread_runs
            .entry(record.thread_id.clone())
            .or_default()
            .push(record.run_id.clone());
        t.runs.insert(record.run_id.clone(), record);
    }

    /// A run of a thread.
    pub fn run(&self, thread_id: &str, run_id: &str) -> Option<RunRecord> {
        self.tables
            .read()
            .runs
            .get(run_id)
            .filter(|r| r.thread_id == thread_id)
            .cloned()
    }

    /// Sets a run's status (and error).
    pub fn set_run_status(&self, run_id: &str, status: RunStatus, error: Option<String>) {
        if let Some(record) = self.tables.write().runs.get_mut(run_id) {
            record.status = status;
            record.error = error;
            record.updated_at_ms = now_ms();
        }
    }

    /// Deletes a run record.
    pub fn delete_run(&self, thread_id: &str, run_id: &str) -> bool {
        let mut t = self.tables.write();
        if t.runs.get(run_id).is_none_or(|r| r.thread_id != thread_id) {
            return false;
        }
        t.runs.remove(run_id);
        if let Some(ids) = t.thread_runs.get_mut(thread_id) {
            ids.retain(|id| id != run_id);
        }
        true
    }

    /// The runs of a thread, newest first.
    pub fn runs(
        &self,
        thread_id: &str,
        status: Option<RunStatus>,
        offset: usize,
        limit: usize,
    ) -> Vec<RunRecord> {
        let t = self.tables.read();
        t.thread_runs
            .get(thread_id)
            .map(|ids| {
                ids.iter()
                    .rev()
                    .filter_map(|id| t.runs.get(id))
                    .filter(|r| status.is_none_or(|s| r.status == s))
                    .skip(offset)
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}
