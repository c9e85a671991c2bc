//! Composes two middlewares around a scripted model and a tool, and prints the stream.
//!
//! Run: `cargo run -p keel-agent --example compose`
//!
//! The scripted model stands in for a real one (`keel-openai`) so this runs offline.

use std::sync::Arc;

use futures::StreamExt;
use keel_agent::Agent;
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::{
    HookOutcome, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next, Runtime,
};
use keel_core::model::ModelError;
use keel_core::state::{AgentState, StateUpdate};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_testkit::{FnTool, ScriptedModel};
use serde_json::json;

/// Counts model calls in state and tells the UI before each one.
struct CallCounter;

#[keel_core::middleware]
impl Middleware for CallCounter {
    fn name(&self) -> &str {
        "CallCounter"
    }
    async fn before_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let calls = state.get::<u64>("model_calls").unwrap_or(0) + 1;
        runtime
            .writer
            .custom(json!({"type": "thinking", "call": calls}));
        Ok(HookOutcome::update(StateUpdate::value(
            "model_calls",
            json!(calls),
        )))
    }
}

/// Sends the model a low temperature.
struct Deterministic;

#[keel_core::middleware]
impl Middleware for Deterministic {
    fn name(&self) -> &str {
        "Deterministic"
    }
    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        request.settings.temperature = Some(0.0);
        next.run(request).await
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = Arc::new(ScriptedModel::new([
        Message::ai("").with_tool_calls(vec![ToolCall::new(
            "call_1",
            "weather",
            json!({"city": "Oslo"}),
        )]),
        Message::ai("It is 4°C and raining in Oslo."),
    ]));
    let agent = Agent::builder()
        .model(model)
        .system_prompt("You answer weather questions.")
        .tool(FnTool::new("weather", |args| {
            Ok(format!("{}: 4°C, rain", args["city"].as_str().unwrap_or("?")).into())
        }))
        .middleware(CallCounter)
        .middleware(Deterministic)
        .build()?;

    let mut stream = agent.stream(
        "demo",
        vec![Message::human("Weather in Oslo?")],
        &[
            StreamMode::Updates,
            StreamMode::Messages,
            StreamMode::Custom,
        ],
    );
    while let Some(event) = stream.next().await {
        match event {
            StreamEvent::Updates { node, update } => {
                println!("update  {node}: {}", serde_json::to_string(&update)?)
            }
            StreamEvent::Messages {
                chunk, call_index, ..
            } => println!(
                "token   call {call_index}: {}",
                serde_json::to_string(&chunk)?
            ),
            StreamEvent::Custom { node, payload } => println!("custom  {node}: {payload}"),
            // Values, and the task and checkpoint events of modes not asked for here.
            _ => {}
        }
    }
    let out = stream.finish().await?;
    println!(
        "answer: {}",
        out.last_message()
            .map(|m| m.text().into_owned())
            .unwrap_or_default()
    );
    Ok(())
}
