//! Stream events (LangGraph's `values`, `updates`, `messages`, `custom`, `tasks` and
//! `checkpoints` modes) and the
//! writer hooks use to emit custom events.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::model::ChatChunk;
use crate::state::{AgentState, StateUpdate};

/// Which kinds of event a stream consumer wants. New modes add variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// The full state after each step.
    Values,
    /// Each node's update, keyed by node name (`SummarizationMiddleware.before_model`).
    Updates,
    /// Model token chunks of user-facing calls.
    Messages,
    /// JSON payloads written by hooks.
    Custom,
    /// Each node's start and end (LangGraph's `tasks`).
    Tasks,
    /// Each checkpoint as it is written (LangGraph's `checkpoints`).
    Checkpoints,
}

/// One streamed event. New modes add variants: match with a wildcard arm.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum StreamEvent {
    /// The state after a step.
    Values {
        /// The state.
        state: Arc<AgentState>,
    },
    /// A node's update.
    Updates {
        /// Node name: `model`, `tools`, or `<Middleware>.<hook>`.
        node: String,
        /// What it changed.
        update: StateUpdate,
    },
    /// A chunk of a user-facing model call.
    Messages {
        /// The chunk.
        chunk: ChatChunk,
        /// The node that made the call (`model`).
        node: String,
        /// Which model call of the run (0-based).
        call_index: u64,
        /// The id the answer is stored under (unless the model named it itself), so a
        /// client can merge the streamed chunks into the thread's messages by id.
        message_id: String,
    },
    /// A payload written by a hook.
    Custom {
        /// The node that wrote it.
        node: String,
        /// The payload, e.g. `{"type": "context_compacting", "message": "..."}`.
        payload: Value,
    },
    /// A node starts (`tasks` mode).
    TaskStart {
        /// Node name, as in [`StreamEvent::Updates`].
        node: String,
        /// The state it starts from (for `tools`, the pending calls are its last
        /// message's).
        input: Arc<AgentState>,
    },
    /// A node ended (`tasks` mode), with what it wrote (empty when it wrote nothing).
    TaskEnd {
        /// Node name.
        node: String,
        /// What it changed.
        update: StateUpdate,
    },
    /// A checkpoint was written (`checkpoints` mode).
    Checkpoint {
        /// Its seq in the thread.
        seq: u64,
        /// The checkpoint it follows (`None`: the thread's first).
        parent: Option<u64>,
        /// The node that wrote it.
        node: String,
        /// The state it holds.
        state: Arc<AgentState>,
    },
}

impl StreamEvent {
    /// The mode this event belongs to.
    pub fn mode(&self) -> StreamMode {
        match self {
            StreamEvent::Values { .. } => StreamMode::Values,
            StreamEvent::Updates { .. } => StreamMode::Updates,
            StreamEvent::Messages { .. } => StreamMode::Messages,
            StreamEvent::Custom { .. } => StreamMode::Custom,
            StreamEvent::TaskStart { .. } | StreamEvent::TaskEnd { .. } => StreamMode::Tasks,
            StreamEvent::Checkpoint { .. } => StreamMode::Checkpoints,
        }
    }
}

/// Sends events to the run's stream consumer. Cheap to clone; a writer with no consumer
/// (an `invoke` run, or a test) drops events.
#[derive(Clone, Debug, Default)]
pub struct StreamWriter {
    tx: Option<mpsc::UnboundedSender<StreamEvent>>,
    node: Arc<str>,
}

impl StreamWriter {
    /// A writer sending to `tx`.
    pub fn new(tx: mpsc::UnboundedSender<StreamEvent>) -> Self {
        StreamWriter {
            tx: Some(tx),
            node: Arc::from(""),
        }
    }

    /// A writer that drops everything.
    pub fn disconnected() -> Self {
        Self::default()
    }

    /// The same channel, labelling custom events with `node`.
    pub fn for_node(&self, node: &str) -> Self {
        StreamWriter {
            tx: self.tx.clone(),
            node: Arc::from(node),
        }
    }

    /// True when someone is listening.
    pub fn is_connected(&self) -> bool {
        self.tx.as_ref().is_some_and(|t| !t.is_closed())
    }

    /// Emits a custom event.
    pub fn custom(&self, payload: Value) {
        self.send(StreamEvent::Custom {
            node: self.node.to_string(),
            payload,
        });
    }

    /// Emits any event. A closed consumer is not an error: the run goes on.
    pub fn send(&self, event: StreamEvent) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(event);
        }
    }
}
