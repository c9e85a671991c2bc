//! # keel-mcp
//!
//! Tools from [Model Context Protocol](https://modelcontextprotocol.io/specification)
//! servers as ordinary Keel tools, through the official Rust SDK,
//! [rmcp](https://docs.rs/rmcp): a server started as a child process (stdio) or
//! reached over streamable HTTP. Their calls go through the agent's `wrap_tool_call`
//! middleware like any tool's, so tool-call limits, retries, human review and PII
//! redaction apply to them.
//!
//! ```text
//! config (mcp_servers: in YAML, McpServerConfig in Rust)
//!   └─▶ McpToolset::connect ── one server::Server per entry (spawn or dial, initialize,
//!         │                     tools/list; relist on list_changed; restart with backoff)
//!         └─▶ Toolset::tools ── McpTool per admitted tool (schema unchanged, prefixed name)
//!               └─▶ Tool::call ── tools/call with the per-call timeout ─▶ result::map_result
//! ```
//!
//! ```no_run
//! use std::sync::Arc;
//! use keel_agent::Agent;
//! use keel_agent::offline::OfflineModel;
//! use keel_mcp::{McpServerConfig, McpToolset};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut time = McpServerConfig::stdio("time", "python3", ["-m", "mcp_server_time"]);
//! time.prefix = Some("time_".into());
//! let tools = McpToolset::connect(vec![time]).await?;
//! let agent = Agent::builder()
//!     .model(Arc::new(OfflineModel::new()))
//!     .toolset(tools)
//!     .build()?;
//! # drop(agent);
//! # Ok(())
//! # }
//! ```
//!
//! Module dependencies point down: `toolset` → `server` → `tool` → `result`; `config`
//! and `error` are used by all.

pub mod config;
mod error;
pub mod result;
mod server;
mod tool;
mod toolset;

pub use config::{
    McpConfigError, McpServerConfig, servers_from_node, servers_from_yaml, validate_servers,
};
pub use error::McpError;
pub use server::{CONNECT_TIMEOUT, RESTART_INITIAL_DELAY, RESTART_MAX_DELAY};
pub use tool::McpTool;
pub use toolset::McpToolset;
