//! Helpers for the unit tests: scripted answers and an agent around them.

use std::sync::Arc;

use keel_agent::{Agent, AgentBuilder};
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::Middleware;
use keel_core::tool::ToolError;
use keel_testkit::{FnTool, ScriptedModel};
use serde_json::{Value, json};

/// An AI message calling `tool` with `args` (call id `id`).
pub(crate) fn call(id: &str, tool: &str, args: Value) -> Message {
    Message::ai("").with_tool_calls(vec![ToolCall::new(id, tool, args)])
}

/// An AI message calling several tools at once.
pub(crate) fn calls(list: &[(&str, &str)]) -> Message {
    Message::ai("").with_tool_calls(
        list.iter()
            .map(|(id, tool)| ToolCall::new(*id, *tool, json!({})))
            .collect(),
    )
}

/// A builder with the scripted model, an `echo` and a failing `fail` tool, and `middleware`.
pub(crate) fn builder(
    model: &Arc<ScriptedModel>,
    middleware: Vec<Arc<dyn Middleware>>,
) -> AgentBuilder {
    let mut b = Agent::builder()
        .model(model.clone())
        .tool(FnTool::echo("echo"))
        .tool(FnTool::echo("search"))
        .tool(FnTool::new("fail", |_| {
            Err(ToolError::Failed {
                tool: "fail".into(),
                message: "boom".into(),
            })
        }));
    for m in middleware {
        b = b.middleware_shared(m);
    }
    b
}

/// The built agent (see [`builder`]).
pub(crate) fn agent(model: &Arc<ScriptedModel>, middleware: Vec<Arc<dyn Middleware>>) -> Agent {
    match builder(model, middleware).build() {
        Ok(agent) => agent,
        Err(e) => panic!("agent does not build: {e}"),
    }
}

/// Messages as `(role, text)` pairs, for compact assertions.
pub(crate) fn roles_and_texts(messages: &[Message]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| (m.role().as_str().to_owned(), m.text().into_owned()))
        .collect()
}
