//! Tools the model may call.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::Content;

/// A tool's description as sent to the model: name, purpose and a JSON schema for its
/// arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// A tool description.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// A failed tool run. The agent turns it into a tool message with `status: error`, so
/// the model sees the failure and the run goes on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The model asked for a tool the agent does not have.
    #[error("unknown tool {name:?}; available: {available}")]
    Unknown {
        /// The requested name.
        name: String,
        /// Comma-separated names of the tools there are.
        available: String,
    },
    /// The arguments did not fit the tool's schema.
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong.
        message: String,
    },
    /// The tool ran and failed.
    #[error("{tool} failed: {message}")]
    Failed {
        /// The tool.
        tool: String,
        /// What went wrong.
        message: String,
    },
}

/// A callable tool.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The description sent to the model; `spec().name` is the tool's name.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool with the model's arguments.
    async fn call(&self, args: Value) -> Result<Content, ToolError>;
}

/// A set of tools that may change while an agent runs: the tools of an MCP server,
/// which it lists at start and lists again when it says they changed. The agent asks
/// for the current set before every model call (the specs the model is offered) and
/// before every tool step (the tool a call runs), so a change reaches the next call.
///
/// A toolset's tool whose name is already taken (by a tool added on its own, or by an
/// earlier toolset) is left out: names stay unique in what the model sees.
pub trait Toolset: Send + Sync {
    /// The tools as of now, in a stable order.
    fn tools(&self) -> std::sync::Arc<[std::sync::Arc<dyn Tool>]>;
}
