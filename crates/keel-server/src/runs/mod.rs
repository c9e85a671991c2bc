//! Runs: the manager that executes them, their event logs, and the translation of
//! Keel's stream events into the protocol's stream modes.

pub mod log;
pub mod manager;
pub mod modes;
pub mod translate;

pub use log::{EventLog, Next, SseEvent};
pub use manager::{
    AssistantInfo, CancelAction, LiveRun, NewRun, RunCommand, RunLimits, RunManager,
};
pub use modes::{ModeSet, WireMode};
