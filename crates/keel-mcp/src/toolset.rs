//! [`McpToolset`]: the tools of one or more MCP servers, for an agent.

use std::collections::HashMap;
use std::sync::Arc;

use keel_core::tool::{Tool, Toolset};
use tokio::sync::watch;

use crate::config::{McpServerConfig, validate_servers};
use crate::error::McpError;
use crate::server::{self, Server};

/// The tools of a list of MCP servers, kept current: listed at connect, listed again on
/// `notifications/tools/list_changed`, and each server restarted with backoff when it
/// goes away. Give it to [`AgentBuilder::toolset`](https://docs.rs/keel-agent) and its
/// tools are ordinary tools of the agent (middleware wrap their calls).
///
/// Cloning is cheap; the servers stop (child processes are killed) when the last clone
/// is dropped.
#[derive(Clone)]
pub struct McpToolset {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Vec<Arc<Server>>,
    /// Dropped with the last clone: the supervisors see it and stop.
    _stop: watch::Sender<()>,
}

impl std::fmt::Debug for McpToolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpToolset")
            .field(
                "servers",
                &self
                    .inner
                    .servers
                    .iter()
                    .map(|s| s.config.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl McpToolset {
    /// Checks the configurations, connects every server (at once) and lists their
    /// tools. Fails if any server cannot be started, naming it, or if two servers offer
    /// a tool under the same name. Needs a Tokio runtime with time and I/O enabled.
    pub async fn connect(configs: Vec<McpServerConfig>) -> Result<McpToolset, McpError> {
        validate_servers(&configs)?;
        let (stop, watch) = watch::channel(());
        let started =
            futures::future::join_all(configs.into_iter().map(|c| server::start(c, watch.clone())))
                .await;
        let servers = started.into_iter().collect::<Result<Vec<_>, _>>()?;
        let toolset = McpToolset {
            inner: Arc::new(Inner {
                servers,
                _stop: stop,
            }),
        };
        let mut owner: HashMap<String, String> = HashMap::new();
        for server in &toolset.inner.servers {
            for tool in server.tools().iter() {
                let name = tool.spec().name.clone();
                if let Some(first) = owner.insert(name.clone(), server.config.name.clone()) {
                    return Err(McpError::DuplicateTool {
                        tool: name,
                        first,
                        second: server.config.name.clone(),
                    });
                }
            }
        }
        Ok(toolset)
    }

    /// The names of the tools offered now, in order.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools().iter().map(|t| t.spec().name.clone()).collect()
    }

    /// How many times the server `name` has been connected (1 after
    /// [`connect`](Self::connect), one more after each restart); `None` for a name not
    /// in the list.
    pub fn connections(&self, name: &str) -> Option<u64> {
        self.inner
            .servers
            .iter()
            .find(|s| s.config.name == name)
            .map(|s| s.generation())
    }
}

impl McpToolset {
    /// The process id of the stdio server `name`'s current child process (for
    /// operators: which process to look at, or to stop); `None` for an HTTP server or
    /// a name not in the list.
    pub fn process_id(&self, name: &str) -> Option<u32> {
        self.inner
            .servers
            .iter()
            .find(|s| s.config.name == name)
            .and_then(|s| s.process_id())
    }
}

impl Toolset for McpToolset {
    fn tools(&self) -> Arc<[Arc<dyn Tool>]> {
        match self.inner.servers.as_slice() {
            [one] => one.tools(),
            servers => servers
                .iter()
                .flat_map(|s| s.tools().iter().cloned().collect::<Vec<_>>())
                .collect(),
        }
    }
}
