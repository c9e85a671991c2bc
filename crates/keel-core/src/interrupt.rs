//! Pausing a run for an answer from outside it, and taking the answer: LangGraph's
//! `interrupt()` and `Command(resume=...)`, as a contract any middleware can implement
//! ([`Middleware::resumable`](crate::middleware::Middleware::resumable)).
//!
//! A middleware that pauses writes its pending question into the thread's state under
//! [`INTERRUPT_KEY`](crate::state::INTERRUPT_KEY) and stops the run. Whoever runs the
//! agent (a server, a CLI, an application) then needs three things without knowing
//! which middleware paused or what its answers look like:
//! - [`Resumable::pause`]: what the thread waits for, from its state;
//! - [`Resumable::resume_update`]: an answer (`resume`, any JSON the middleware reads),
//!   checked against the pause and turned into the update that records it on the
//!   thread's head, for the thread's next run to apply;
//! - [`Resumable::resolve_update`]: the update that ends the pause without running
//!   anything (LangGraph's `Command(goto=END)`).
//!
//! Each returns plain data; the agent writes the updates with compare-and-swap on the
//! head (keel-agent's `Agent::record_resume` and `Agent::resolve_pause`). Human in the
//! loop is the implementation this workspace ships.

use serde_json::Value;

use crate::state::{AgentState, StateUpdate};

/// What a paused thread waits for.
#[derive(Clone, Debug, PartialEq)]
pub struct Pause {
    /// The calls of the paused step still without a result, as `(call id, tool name)`,
    /// in order: new input that abandons the pause must close each one (providers
    /// refuse a call without a result).
    pub open_calls: Vec<(String, String)>,
    /// What the pause asks, in a few words, for error messages ("a review of 2 tool
    /// call(s) (echo, search)").
    pub asks: String,
}

/// An answer that does not fit the pause: the message names what is wrong and what
/// would fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResumeRefused(pub String);

/// A middleware that pauses a run for an answer from outside (see the
/// [module docs](self)).
pub trait Resumable: Send + Sync {
    /// The pause pending in `state`, if this middleware paused the thread.
    fn pause(&self, state: &AgentState) -> Option<Pause>;

    /// Checks `resume` against the pause in `state` and returns the update that records
    /// it, so the thread's next run applies it. Nothing is written here.
    fn resume_update(
        &self,
        state: &AgentState,
        resume: &Value,
    ) -> Result<StateUpdate, ResumeRefused>;

    /// The update that ends the pause in `state` without running anything: every open
    /// call gets a result saying it was not run, and the pause is cleared. `None` when
    /// nothing is pending.
    fn resolve_update(&self, state: &AgentState) -> Option<StateUpdate>;
}
