//! # keel-server
//!
//! Serves a Keel [`Agent`](keel_agent::Agent) over the HTTP protocol of LangGraph's
//! Agent Server (see LangGraph's "Agent Server API reference"), so clients written for
//! LangGraph — the `langgraph-sdk` Python and `@langchain/langgraph-sdk` JavaScript
//! clients, `agent-chat-ui` — use it unchanged; plus a chat page at `/`.
//!
//! ```text
//! request ─▶ CORS ─▶ body cap ─▶ x-api-key → Owner ─▶ routes/{assistants, threads, runs}
//!                                                          │
//!            registry (thread and run records, owner-scoped; memory, SQLite, PostgreSQL)
//!            runs::RunManager ── one run at a time per thread (multitask strategies),
//!                 │               a lease per thread across processes (PostgreSQL)
//!                 ├── Agent::stream ─▶ runs::translate (values, updates, messages,
//!                 │                    messages-tuple, custom, events)
//!                 └── runs::EventLog (numbered events: SSE ids, Last-Event-ID resume;
//!                                     copied to PostgreSQL so any process can follow)
//! ```
//!
//! A router for any agent (no authentication, records in memory):
//!
//! ```
//! use std::sync::Arc;
//! use keel_agent::Agent;
//! use keel_agent::offline::OfflineModel;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let agent = Agent::builder().model(Arc::new(OfflineModel::new())).build()?;
//! let app: axum::Router = keel_server::router(agent);
//! // axum::serve(tokio::net::TcpListener::bind("127.0.0.1:2024").await?, app).await?;
//! # drop(app);
//! # Ok(())
//! # }
//! ```
//!
//! `keel serve --config keel.yaml` ([`serve::run`]) builds the agent from YAML
//! ([`config`]), keeps records next to the checkpoints in the database, and takes API
//! keys. A run executes in its own task: a client that disconnects can reconnect with
//! `Last-Event-ID` and get what it missed; `on_disconnect: cancel` stops it instead.
//! With `HumanInTheLoopMiddleware` in the stack, a paused run shows as LangGraph's
//! `__interrupt__` (in `updates`, `values` and thread state) and a run request's
//! `command: {resume: {"decisions": [...]}}` records the decisions and continues it
//! ([`RunManager`] applies them under the thread's lease). The assistant is also a
//! tool of an MCP server at `/mcp` ([`mcp`]), for Model Context Protocol clients.
pub mod app;
pub(crate) mod auth;
pub mod config;
pub(crate) mod error;
pub(crate) mod extract;
pub(crate) mod lease;
pub mod mcp;
pub mod origin;
pub(crate) mod registry;
pub(crate) mod routes;
pub(crate) mod runs;
pub mod store_api;
pub(crate) mod time;
pub(crate) mod wire;

pub use app::{AppState, ServerOptions, router, router_parts, router_with};
pub use auth::ApiKeys;
pub use lease::Leases;
pub use registry::{Registry, RegistryError};
pub use runs::{RunLimits, RunManager};
pub mod serve;
pub(crate) mod state;

// The in-crate tests name the crate as its users do.
#[cfg(test)]
extern crate self as keel_server;
#[cfg(test)]
mod tests;
