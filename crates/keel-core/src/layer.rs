//! Middleware built from what the agent knows, when the agent is built: as tower's
//! `Layer::layer` receives the service it wraps, a [`Layer`] receives the agent's model
//! profile and store ([`AgentFacts`]), so neither is passed twice (once to the agent,
//! once to each middleware that needs it).
//!
//! keel-agent's `AgentBuilder::layer` takes one; the builders of summarization
//! (`SummarizationMiddleware::builder`) and session memory
//! (`SessionMemoryMiddleware::builder`) are layers: given no profile or store of their
//! own, they use the agent's.

use std::sync::Arc;

use crate::middleware::Middleware;
use crate::model::ModelProfile;
use crate::store::{ChatHistoryStore, Checkpointer, SessionMemoryStore, SummaryStore};

/// One store for everything an agent and its middleware keep: checkpoints, chat
/// history, session memory, cached summaries. Every store of keel-store is one.
pub trait AgentStore:
    Checkpointer + ChatHistoryStore + SessionMemoryStore + SummaryStore + Send + Sync
{
}

impl<T> AgentStore for T where
    T: Checkpointer + ChatHistoryStore + SessionMemoryStore + SummaryStore + Send + Sync + ?Sized
{
}

/// What the agent knows when it is built.
#[derive(Clone)]
pub struct AgentFacts {
    /// The profile of the model answering every user-facing call.
    pub model_profile: ModelProfile,
    /// The agent's store (keel-agent's `AgentBuilder::store`), when it has one.
    pub store: Option<Arc<dyn AgentStore>>,
}

impl std::fmt::Debug for AgentFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentFacts")
            .field("model_profile", &self.model_profile)
            .field("store", &self.store.as_ref().map(|_| ".."))
            .finish()
    }
}

/// A middleware not yet built: it is built with the agent's [`AgentFacts`].
pub trait Layer: Send {
    /// Builds the middleware.
    fn layer(self: Box<Self>, agent: &AgentFacts) -> Result<Arc<dyn Middleware>, LayerError>;
}

/// A layer that could not build its middleware.
#[derive(Debug, thiserror::Error)]
#[error("{middleware} could not be built: {message}")]
pub struct LayerError {
    /// The middleware.
    pub middleware: String,
    /// Why, naming the setting and what it allows.
    pub message: String,
}
