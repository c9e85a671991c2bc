//! [`Agent`]: the public handle on a built agent; runs it to completion or as a stream.

use std::sync::Arc;

use keel_core::message::Message;
use keel_core::state::{AgentState, COMPACTED_THROUGH};
use keel_core::store::{Checkpointer, StoreError};
use keel_core::stream::{StreamMode, StreamWriter};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::AgentError;
use crate::multitask::ThreadRuns;
use crate::options::RunOptions;
use crate::output::{Modes, RunOutput};
use crate::run::{Inner, Run};
use crate::strategy::{CancelAction, MultitaskStrategy};
use crate::stream::AgentStream;

/// What [`Agent::compact`] did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Compaction {
    /// True when a middleware compacted the thread.
    pub compacted: bool,
    /// Each compacting middleware's report, by name (transient summarization's is its
    /// compaction report: tokens before and after, messages summarized and kept).
    pub reports: serde_json::Map<String, serde_json::Value>,
    /// The checkpoint recording the compaction in the thread's state, when one was
    /// written (none when nothing was compacted or the state already said so).
    pub checkpoint: Option<u64>,
}

/// An agent: a model, tools and a middleware pipeline. Cheap to clone; one agent serves
/// many threads and concurrent runs.
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.inner.model.profile().name)
            .field("tools", &self.inner.tools.len())
            .field("middleware", &self.middleware_names())
            .field("recursion_limit", &self.inner.recursion_limit)
            .finish_non_exhaustive()
    }
}

impl Agent {
    pub(crate) fn from_inner(inner: Inner) -> Self {
        Agent {
            inner: Arc::new(inner),
        }
    }

    /// The middleware names, outermost first.
    pub fn middleware_names(&self) -> Vec<&str> {
        self.inner.middleware.iter().map(|m| m.name()).collect()
    }

    /// The profile (name, provider, context window) of the model answering every
    /// user-facing call: servers report it in stream metadata.
    pub fn model_profile(&self) -> &keel_core::model::ModelProfile {
        self.inner.model.profile()
    }

    /// The checkpointer holding every thread's history.
    pub fn checkpointer(&self) -> &Arc<dyn Checkpointer> {
        &self.inner.checkpointer
    }

    /// The latest state of a thread, or `None` for a thread that never ran.
    pub async fn state(&self, thread_id: &str) -> Result<Option<AgentState>, AgentError> {
        Ok(self
            .inner
            .checkpointer
            .latest(thread_id)
            .await
            .map_err(|source| AgentError::Checkpoint {
                thread_id: thread_id.to_owned(),
                source,
            })?
            .map(|cp| AgentState {
                messages: Arc::new(cp.messages),
                values: cp.values,
                lineage: Default::default(),
            }))
    }

    /// Deletes everything the agent keeps for a thread: what each middleware stored
    /// for it ([`Middleware::delete_thread_data`](keel_core::middleware::Middleware::delete_thread_data): session memory's chat history and
    /// state, cached summaries, ...), then every checkpoint. Returns how many stored
    /// records went. A later run, by anyone, starts the thread afresh (see
    /// `docs/operations.md`, "Deleting a session").
    ///
    /// The middleware data goes first and the checkpoints last, so a deletion that
    /// fails half-way leaves the thread readable and can simply be run again: every
    /// step is idempotent.
    pub async fn delete_thread(&self, thread_id: &str) -> Result<u64, AgentError> {
        let mut deleted = 0;
        for middleware in &self.inner.middleware {
            deleted += middleware
                .delete_thread_data(thread_id)
                .await
                .map_err(|source| AgentError::DeleteThreadData {
                    thread_id: thread_id.to_owned(),
                    middleware: middleware.name().to_owned(),
                    source,
                })?;
        }
        // A recreated thread restarts at seq 0: its list is not the old one's.
        self.inner.lineages.lock().pop(thread_id);
        let steps = self
            .inner
            .checkpointer
            .delete_thread(thread_id)
            .await
            .map_err(|source| AgentError::Checkpoint {
                thread_id: thread_id.to_owned(),
                source,
            })?;
        Ok(deleted + steps)
    }

    /// Compacts a thread now, as a user or a UI asks (`/compact`; `POST
    /// /threads/{id}/compact` on `keel serve`): waits for the thread's active run, if
    /// any, then asks every middleware ([`Middleware::compact_thread`]) with the request
    /// the thread's next model call would start from. Transient summarization folds
    /// what left its kept window into the thread's summary (one summary call, through
    /// the thread's single flight, with `context_compacting`/`context_compacted`); when
    /// a middleware reports [`COMPACTED_THROUGH`], the agent records it in a new
    /// checkpoint (node `compact`), so every later call, in any process, sends the
    /// compacted request even under the triggers. The thread's messages are untouched.
    ///
    /// A thread that never ran is [`AgentError::UnknownThread`].
    ///
    /// [`Middleware::compact_thread`]: keel_core::middleware::Middleware::compact_thread
    /// [`COMPACTED_THROUGH`]: keel_core::state::COMPACTED_THROUGH
    pub async fn compact(&self, thread_id: &str) -> Result<Compaction, AgentError> {
        use keel_core::middleware::{ModelRequest, Runtime};
        let key: Arc<str> = Arc::from(thread_id);
        let id: Arc<str> = Arc::from(keel_core::message::new_id().as_str());
        let _turn = self
            .inner
            .registry
            .enter(&key, &id, MultitaskStrategy::Enqueue)
            .await;
        let Some(head) = self
            .inner
            .checkpointer
            .latest(thread_id)
            .await
            .map_err(|source| checkpoint_error(thread_id, source))?
        else {
            return Err(AgentError::UnknownThread {
                thread_id: thread_id.to_owned(),
            });
        };
        let state = Arc::new(AgentState {
            messages: Arc::new(head.messages),
            values: head.values,
            lineage: Default::default(),
        });
        let request = ModelRequest {
            messages: state.messages.clone(),
            system: self.inner.system.clone(),
            tools: self.inner.tool_specs.clone(),
            tool_choice: self.inner.tool_choice.clone(),
            settings: self.inner.settings.clone(),
            model: self.inner.model.clone(),
            state: state.clone(),
            runtime: Runtime::detached(thread_id),
        };
        let (reports, through) = self.compact_reports(&request).await?;
        let checkpoint = match through {
            Some(mark) if state.values.get(COMPACTED_THROUGH) != Some(&mark) => {
                Some(self.record_compaction(thread_id, head.seq, mark).await?)
            }
            _ => None,
        };
        Ok(Compaction {
            compacted: !reports.is_empty(),
            reports,
            checkpoint,
        })
    }

    /// Asks every middleware to compact the thread: their reports by name, and the
    /// first [`COMPACTED_THROUGH`] mark one reported.
    async fn compact_reports(
        &self,
        request: &keel_core::middleware::ModelRequest,
    ) -> Result<(serde_json::Map<String, Value>, Option<Value>), AgentError> {
        let mut reports = serde_json::Map::new();
        let mut through = None;
        for middleware in &self.inner.middleware {
            let report =
                middleware
                    .compact_thread(request)
                    .await
                    .map_err(|source| AgentError::Model {
                        call_index: 0,
                        source,
                    })?;
            if let Some(report) = report {
                if through.is_none() {
                    through = report.get(COMPACTED_THROUGH).cloned();
                }
                reports.insert(middleware.name().to_owned(), report);
            }
        }
        Ok((reports, through))
    }

    /// Records a compaction mark in a new checkpoint (node `compact`) on `parent`, the
    /// head the compaction read: its sequence number.
    async fn record_compaction(
        &self,
        thread_id: &str,
        parent: u64,
        mark: Value,
    ) -> Result<u64, AgentError> {
        use keel_core::state::StateUpdate;
        use keel_core::store::{CheckpointWrite, PutOutcome};
        let mut update = StateUpdate::default();
        update.values.insert(COMPACTED_THROUGH.to_owned(), mark);
        let write = CheckpointWrite {
            parent: Some(parent),
            run_id: keel_core::message::new_id(),
            node: "compact".to_owned(),
            update,
            created_at_ms: crate::run::now_ms(),
        };
        match self
            .inner
            .checkpointer
            .put(thread_id, write)
            .await
            .map_err(|source| checkpoint_error(thread_id, source))?
        {
            PutOutcome::Saved { seq } => Ok(seq),
            PutOutcome::Conflict { head } => Err(AgentError::Conflict {
                thread_id: thread_id.to_owned(),
                parent: Some(parent),
                head,
            }),
        }
    }

    /// The strategy for a run that arrives while another is active on its thread.
    pub fn multitask_strategy(&self) -> MultitaskStrategy {
        self.inner.multitask
    }

    /// Runs the agent on a thread to completion. The thread resumes from its latest
    /// checkpoint; `input` is appended to its messages (empty input resumes a thread
    /// whose run stopped, for example after a crash). Tool calls the thread left without
    /// results are answered with a "cancelled" result first. While another run of this
    /// agent is active on the thread, the [`MultitaskStrategy`] decides.
    pub async fn invoke(
        &self,
        thread_id: &str,
        input: Vec<Message>,
    ) -> Result<RunOutput, AgentError> {
        self.invoke_with(thread_id, input, RunOptions::new()).await
    }

    /// Runs the agent on a thread from one of its checkpoints (LangGraph's time travel):
    /// from the head this is [`invoke`](Self::invoke); from an earlier checkpoint the
    /// run forks, starting a new branch whose parent is that checkpoint, with `input`
    /// appended to that checkpoint's messages. The new branch becomes the thread's head
    /// (its state, and where the next run continues); the older branch is left as it
    /// was and stays readable through the checkpointer
    /// ([`Checkpointer::checkpoint_at`], [`Checkpointer::branch_page`]).
    ///
    /// `checkpoint` is a [`Checkpoint::seq`](keel_core::store::Checkpoint::seq) of the
    /// thread; one the thread does not hold is [`AgentError::UnknownCheckpoint`]. To
    /// edit the first message, fork from the thread's first checkpoint, which is empty.
    /// Another writer moving the head before the fork's first write is
    /// [`AgentError::Conflict`], as for any run.
    pub async fn invoke_from(
        &self,
        thread_id: &str,
        checkpoint: u64,
        input: Vec<Message>,
    ) -> Result<RunOutput, AgentError> {
        let options = RunOptions::new().from_checkpoint(checkpoint);
        self.invoke_with(thread_id, input, options).await
    }

    /// [`invoke`](Self::invoke) as `options` set the run: its checkpoint, its
    /// [`MultitaskStrategy`], its id.
    pub async fn invoke_with(
        &self,
        thread_id: &str,
        input: Vec<Message>,
        options: RunOptions,
    ) -> Result<RunOutput, AgentError> {
        let run = Run::new(thread_id, StreamWriter::disconnected(), Modes::NONE).with(options);
        run.execute(self.inner.clone(), input).await
    }

    /// [`stream`](Self::stream) from one of the thread's checkpoints: a fork when it is
    /// not the head, as [`invoke_from`](Self::invoke_from) describes (`None`: the head,
    /// the same as [`stream`](Self::stream)).
    pub fn stream_from(
        &self,
        thread_id: &str,
        checkpoint: Option<u64>,
        input: Vec<Message>,
        modes: &[StreamMode],
    ) -> AgentStream {
        let options = RunOptions {
            checkpoint,
            ..RunOptions::new()
        };
        self.stream_with(thread_id, input, modes, options)
    }

    /// Runs the agent, yielding the events of the requested modes in the order they
    /// happen. Drive the stream to its end, then take the outcome with
    /// [`AgentStream::into_result`], or call [`AgentStream::finish`].
    pub fn stream(
        &self,
        thread_id: &str,
        input: Vec<Message>,
        modes: &[StreamMode],
    ) -> AgentStream {
        self.stream_with(thread_id, input, modes, RunOptions::new())
    }

    /// [`stream`](Self::stream) as `options` set the run: its checkpoint, its
    /// [`MultitaskStrategy`], its id.
    pub fn stream_with(
        &self,
        thread_id: &str,
        input: Vec<Message>,
        modes: &[StreamMode],
        options: RunOptions,
    ) -> AgentStream {
        let (tx, rx) = mpsc::unbounded_channel();
        let modes = Modes::from(modes);
        let run = Run::new(thread_id, StreamWriter::new(tx), modes).with(options);
        let inner = self.inner.clone();
        AgentStream::new(rx, modes, Box::pin(run.execute(inner, input)))
    }

    /// The run of this agent holding `thread_id` and the runs waiting behind it, by id
    /// ([`RunOptions::run_id`]), first in line first. Runs of other processes sharing
    /// the checkpointer are not here.
    pub fn thread_runs(&self, thread_id: &str) -> ThreadRuns {
        self.inner.registry.runs(thread_id)
    }

    /// Stops run `run_id` of `thread_id` as `action` says: the run holding the thread
    /// stops at its next step (as a newer `interrupt` or `rollback` run would stop it),
    /// a waiting run leaves the queue without starting. The run's caller gets
    /// [`AgentError::Interrupted`] or [`AgentError::RolledBack`]. False when this agent
    /// has no such run active or waiting (it ended, or never began).
    pub fn cancel_run(&self, thread_id: &str, run_id: &str, action: CancelAction) -> bool {
        self.inner.registry.cancel(thread_id, run_id, action)
    }
}

/// A checkpoint store error on `thread_id`.
fn checkpoint_error(thread_id: &str, source: StoreError) -> AgentError {
    AgentError::Checkpoint {
        thread_id: thread_id.to_owned(),
        source,
    }
}
