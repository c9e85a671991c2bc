//! keel-server (in progress).
pub mod app;
pub mod auth;
pub mod config;
pub mod error;
pub mod extract;
pub mod lease;
pub mod registry;
pub mod routes;
pub mod runs;
pub mod time;
pub mod wire;

pub use app::{AppState, ServerOptions, router, router_with};
pub mod serve;
