//! [`McpTool`]: one tool of an MCP server, as a Keel [`Tool`].

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use keel_core::message::Content;
use keel_core::tool::{Tool, ToolError, ToolSpec};
use rmcp::ServiceError;
use rmcp::model::CallToolRequestParams;
use serde_json::Value;

use crate::error::McpError;
use crate::server::Server;

/// One tool of an MCP server. Its spec is the server's: the input schema reaches the
/// model unchanged, under the server's name with the configured `prefix`.
pub struct McpTool {
    spec: ToolSpec,
    /// The server's name for the tool (without the prefix).
    remote: String,
    server: Weak<Server>,
    server_name: String,
}

impl McpTool {
    pub(crate) fn new(server: &Arc<Server>, tool: &rmcp::model::Tool, exposed: String) -> Self {
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or_default()
            .to_owned();
        McpTool {
            spec: ToolSpec::new(
                exposed,
                description,
                Value::Object(tool.input_schema.as_ref().clone()),
            ),
            remote: tool.name.to_string(),
            server: Arc::downgrade(server),
            server_name: server.config.name.clone(),
        }
    }

    /// The MCP server's name for this tool.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }

    /// The `name` of the server this tool belongs to.
    pub fn server_name(&self) -> &str {
        &self.server_name
    }

    fn failed(&self, message: impl Into<String>) -> ToolError {
        ToolError::Failed {
            tool: self.spec.name.clone(),
            message: message.into(),
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value) -> Result<Content, ToolError> {
        let unavailable = |reason: &str| McpError::Unavailable {
            server: self.server_name.clone(),
            reason: reason.to_owned(),
        };
        let Some(server) = self.server.upgrade() else {
            return Err(self.failed(unavailable("its toolset was dropped").to_string()));
        };
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => Default::default(),
            other => {
                return Err(ToolError::InvalidArguments {
                    tool: self.spec.name.clone(),
                    message: format!("arguments must be a JSON object, not {other}"),
                });
            }
        };
        let (peer, generation) = server.peer().map_err(|e| self.failed(e.to_string()))?;
        let timeout = server.config.timeout();
        let params = CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments);
        // Dropping the call on timeout sends notifications/cancelled to the server.
        let result = match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Err(_) => {
                return Err(self.failed(format!(
                    "MCP server {:?} did not answer within {} s (timeout_seconds)",
                    self.server_name,
                    timeout.as_secs_f64()
                )));
            }
            Ok(Err(ServiceError::McpError(e))) => {
                return Err(self.failed(format!(
                    "MCP server {:?} answered with error {}: {}",
                    self.server_name, e.code.0, e.message
                )));
            }
            Ok(Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)))) => {
                server.mark_down(generation, e.to_string());
                return Err(self.failed(unavailable(&e.to_string()).to_string()));
            }
            Ok(Err(e)) => {
                return Err(self.failed(format!("MCP server {:?}: {e}", self.server_name)));
            }
            Ok(Ok(result)) => result,
        };
        crate::result::map_result(&self.spec.name, result)
    }
}
