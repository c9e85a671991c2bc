//! # Keel
//!
//! An agent middleware framework: a LangGraph-style hook pipeline (`before_agent`,
//! `before_model`, `wrap_model_call`, `after_model`, `wrap_tool_call`, `after_agent`)
//! with transient summarization and rolling session memory.
//!
//! This facade re-exports the workspace crates under one name.

pub use keel_core as core;
pub use keel_core::*;
