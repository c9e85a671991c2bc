//! Answering a paused thread through whichever middleware paused it
//! ([`Resumable`]): LangGraph's `Command(resume=...)` and `Command(goto=END)` for a
//! Keel agent, as a server or an application calls them.

use keel_core::interrupt::{Pause, Resumable};
use keel_core::state::{AgentState, StateUpdate};
use keel_core::store::{CheckpointWrite, PutOutcome};
use serde_json::Value;

use crate::agent::Agent;
use crate::error::AgentError;

impl Agent {
    /// The middleware that pauses runs for an answer from outside (human in the loop),
    /// with its name: the outermost one that does. `None` when no middleware of this
    /// agent ever pauses, so no thread of it can be waiting.
    pub fn resumable(&self) -> Option<(&str, &dyn Resumable)> {
        self.inner
            .middleware
            .iter()
            .find_map(|m| m.resumable().map(|r| (m.name(), r)))
    }

    /// What the thread waits for, read from its head checkpoint; `None` when it is not
    /// paused (or never ran).
    pub async fn pause(&self, thread_id: &str) -> Result<Option<Pause>, AgentError> {
        let Some((_, resumable)) = self.resumable() else {
            return Ok(None);
        };
        Ok(self
            .head_state(thread_id)
            .await?
            .and_then(|(_, state)| resumable.pause(&state)))
    }

    /// Checks `resume` against the thread's pause and records it on the head (one
    /// checkpoint, compare-and-swap), so the thread's next run, with no input, applies
    /// it. Nothing runs here: a caller that streams the resumed run starts it itself.
    /// [`AgentError::NotPaused`] when nothing is pending, [`AgentError::ResumeRefused`]
    /// when the answer does not fit.
    pub async fn record_resume(&self, thread_id: &str, resume: &Value) -> Result<(), AgentError> {
        let (name, resumable, head, state) = self.paused(thread_id).await?;
        let update = resumable.resume_update(&state, resume).map_err(|source| {
            AgentError::ResumeRefused {
                thread_id: thread_id.to_owned(),
                source,
            }
        })?;
        self.put_on_head(thread_id, head, "resume", &format!("{name}.resume"), update)
            .await
    }

    /// Ends the thread's pause without running anything (LangGraph's
    /// `Command(goto=END)`; agent-chat-ui's "Mark as resolved"): one checkpoint by
    /// `run_id`, written with compare-and-swap on the head. Returns the update written.
    pub async fn resolve_pause(
        &self,
        thread_id: &str,
        run_id: &str,
    ) -> Result<StateUpdate, AgentError> {
        let (name, resumable, head, state) = self.paused(thread_id).await?;
        let update = resumable
            .resolve_update(&state)
            .ok_or_else(|| AgentError::NotPaused {
                thread_id: thread_id.to_owned(),
            })?;
        self.put_on_head(
            thread_id,
            head,
            run_id,
            &format!("{name}.resolve"),
            update.clone(),
        )
        .await?;
        Ok(update)
    }

    /// The pausing middleware, the head's seq and its state, when the thread is paused.
    async fn paused(
        &self,
        thread_id: &str,
    ) -> Result<(&str, &dyn Resumable, u64, AgentState), AgentError> {
        let not_paused = || AgentError::NotPaused {
            thread_id: thread_id.to_owned(),
        };
        let (name, resumable) = self.resumable().ok_or_else(not_paused)?;
        let (head, state) = self.head_state(thread_id).await?.ok_or_else(not_paused)?;
        if resumable.pause(&state).is_none() {
            return Err(not_paused());
        }
        Ok((name, resumable, head, state))
    }

    async fn head_state(&self, thread_id: &str) -> Result<Option<(u64, AgentState)>, AgentError> {
        let head = self
            .inner
            .checkpointer
            .latest(thread_id)
            .await
            .map_err(|source| AgentError::Checkpoint {
                thread_id: thread_id.to_owned(),
                source,
            })?;
        // The checkpoint's messages and values move into the state: nothing is copied.
        Ok(head.map(|cp| {
            let state = AgentState {
                messages: std::sync::Arc::new(cp.messages),
                values: cp.values,
                lineage: Default::default(),
            };
            (cp.seq, state)
        }))
    }

    /// Writes `update` as step `node` after checkpoint `head`, if that is still the
    /// thread's head.
    async fn put_on_head(
        &self,
        thread_id: &str,
        head: u64,
        run_id: &str,
        node: &str,
        update: StateUpdate,
    ) -> Result<(), AgentError> {
        let write = CheckpointWrite {
            parent: Some(head),
            run_id: run_id.to_owned(),
            node: node.to_owned(),
            update,
            created_at_ms: crate::run::now_ms(),
        };
        let outcome = self
            .inner
            .checkpointer
            .put(thread_id, write)
            .await
            .map_err(|source| AgentError::Checkpoint {
                thread_id: thread_id.to_owned(),
                source,
            })?;
        match outcome {
            PutOutcome::Saved { .. } => Ok(()),
            PutOutcome::Conflict { head: now } => Err(AgentError::Conflict {
                thread_id: thread_id.to_owned(),
                parent: Some(head),
                head: now,
            }),
        }
    }
}
