//! Runs: the manager that executes them, their event logs, and the translation of
//! Keel's stream events into the protocol's stream modes.

pub(crate) mod log;
pub(crate) mod manager;
pub(crate) mod modes;
pub(crate) mod translate;

pub use log::{Next, SseEvent};
pub use manager::{
    AssistantInfo, CancelAction, LiveRun, NewRun, RunCommand, RunLimits, RunManager,
};
pub use modes::{ModeSet, WireMode};
