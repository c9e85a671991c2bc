//! Shared helpers for the acceptance tests.

#![allow(dead_code)]

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::message::{Content, Message, ToolCall};
use keel_core::tool::{Tool, ToolError, ToolSpec};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// A shared, ordered log of what happened.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().push(s.into());
    }
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// An AI message asking for these tool calls.
pub fn ai_calls(calls: &[(&str, &str)]) -> Message {
    Message::ai("").with_tool_calls(
        calls
            .iter()
            .map(|(id, name)| ToolCall::new(*id, *name, json!({"q": id})))
            .collect(),
    )
}

/// A tool that logs its name when it runs and answers "ok".
pub struct LoggingTool {
    spec: ToolSpec,
    log: Log,
}

impl LoggingTool {
    pub fn new(name: &str, log: Log) -> Self {
        LoggingTool {
            spec: ToolSpec::new(name, "logs", json!({"type": "object"})),
            log,
        }
    }
}

#[async_trait]
impl Tool for LoggingTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _args: Value) -> Result<Content, ToolError> {
        self.log.push("tool");
        Ok(Content::Text("ok".into()))
    }
}
