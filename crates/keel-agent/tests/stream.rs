//! Streaming: event order across modes, custom events from hooks, internal calls hidden.

mod common;

use std::sync::Arc;

use common::ai_calls;
use futures::StreamExt;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::middleware::{
    HookOutcome, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next, Runtime,
};
use keel_core::model::{ChatChunk, ModelError};
use keel_core::state::{AgentState, StateUpdate};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_testkit::{FnTool, ScriptedModel};
use serde_json::json;

/// Writes a custom event, then updates state, in `before_model`.
struct Notifier;

#[keel_core::middleware]
impl Middleware for Notifier {
    fn name(&self) -> &str {
        "Notifier"
    }
    async fn before_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        runtime.writer.custom(json!({
            "type": "context_compacting",
            "call": runtime.model_call_index,
        }));
        Ok(HookOutcome::update(StateUpdate::value(
            "seen",
            json!(state.messages.len()),
        )))
    }
}

/// A compact label per event, to compare sequences.
fn label(e: &StreamEvent) -> String {
    match e {
        StreamEvent::Values { state } => format!("values:{}", state.messages.len()),
        StreamEvent::Updates { node, .. } => format!("updates:{node}"),
        StreamEvent::Messages {
            chunk,
            call_index,
            node,
            ..
        } => match chunk {
            ChatChunk::Text { text } => format!("messages:{node}:{call_index}:{text}"),
            ChatChunk::ToolCall { name, .. } => {
                format!(
                    "messages:{node}:{call_index}:call:{}",
                    name.clone().unwrap_or_default()
                )
            }
            other => format!("messages:{node}:{call_index}:{other:?}"),
        },
        StreamEvent::Custom { node, payload } => format!("custom:{node}:{}", payload["call"]),
        StreamEvent::TaskStart { node, .. } => format!("task:{node}"),
        StreamEvent::TaskEnd { node, update } => {
            format!("task_end:{node}:{}", update.messages.len())
        }
        StreamEvent::Checkpoint {
            seq, parent, node, ..
        } => format!("checkpoint:{node}:{seq}:{parent:?}"),
        other => format!("other:{:?}", other.mode()),
    }
}

#[tokio::test]
async fn custom_events_reach_consumers_in_order_with_other_events() {
    let model = Arc::new(ScriptedModel::new([
        ai_calls(&[("c1", "echo")]),
        Message::ai("hello"),
    ]));
    let agent = Agent::builder()
        .model(model)
        .tool(FnTool::echo("echo"))
        .middleware(Notifier)
        .build()
        .unwrap();
    let mut stream = agent.stream(
        "t",
        vec![Message::human("hi")],
        &[
            StreamMode::Updates,
            StreamMode::Messages,
            StreamMode::Custom,
        ],
    );
    let mut labels = Vec::new();
    while let Some(event) = stream.next().await {
        labels.push(label(&event));
    }
    assert_eq!(
        labels,
        [
            "custom:Notifier.before_model:0",
            "updates:Notifier.before_model",
            "messages:model:0:call:echo",
            "updates:model",
            "updates:tools",
            "custom:Notifier.before_model:1",
            "updates:Notifier.before_model",
            "messages:model:1:hello",
            "updates:model",
        ]
    );
    let out = stream.into_result().unwrap().unwrap();
    assert_eq!(out.last_message().unwrap().text(), "hello");
}

#[tokio::test]
async fn values_mode_yields_the_state_after_each_step_and_nothing_else() {
    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([Message::ai("a")])))
        .middleware(Notifier)
        .build()
        .unwrap();
    let stream = agent.stream("t", vec![Message::human("hi")], &[StreamMode::Values]);
    let labels: Vec<_> = stream.map(|e| label(&e)).collect().await;
    // input, Notifier.before_model, model
    assert_eq!(labels, ["values:1", "values:1", "values:2"]);
}

/// Reads state and writes nothing.
struct Bystander;

#[keel_core::middleware]
impl Middleware for Bystander {
    fn name(&self) -> &str {
        "Bystander"
    }
    async fn before_agent(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::proceed())
    }
    async fn before_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::proceed())
    }
    async fn after_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::proceed())
    }
    async fn after_agent(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome::proceed())
    }
}

/// A node that writes nothing sends no `values`: each state reaches the client once
/// (LangGraph's create_agent streams `[1, 2]` messages for a middleware whose hooks
/// return None, and a `values` event carries the whole thread).
#[tokio::test]
async fn nodes_that_write_nothing_send_no_values() {
    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([Message::ai("a")])))
        .middleware(Bystander)
        .build()
        .unwrap();
    let stream = agent.stream("t", vec![Message::human("hi")], &[StreamMode::Values]);
    let labels: Vec<_> = stream.map(|e| label(&e)).collect().await;
    assert_eq!(labels, ["values:1", "values:2"]);
}

/// Makes an internal call (a summary, say) on the request's model before the real one.
struct Summarizer;

#[keel_core::middleware]
impl Middleware for Summarizer {
    fn name(&self) -> &str {
        "Summarizer"
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let mut internal = request.chat_request();
        internal.internal = true;
        let summary = request.model.stream(internal).await?;
        // Consume it fully: streamed or not, it must never reach the user.
        let _chunks: Vec<_> = summary.collect().await;
        next.run(request).await
    }
}

#[tokio::test]
async fn internal_model_calls_never_reach_the_messages_stream() {
    let model = Arc::new(ScriptedModel::new([
        Message::ai("SECRET SUMMARY"),
        Message::ai("user answer"),
    ]));
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(Summarizer)
        .build()
        .unwrap();
    let stream = agent.stream("t", vec![Message::human("hi")], &[StreamMode::Messages]);
    let labels: Vec<_> = stream.map(|e| label(&e)).collect().await;
    assert_eq!(labels, ["messages:model:0:user answer"]);
    assert_eq!(model.internal_calls(), 1);
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn finish_returns_the_outcome_without_reading_events() {
    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([Message::ai("a")])))
        .build()
        .unwrap();
    let out = agent
        .stream("t", vec![Message::human("hi")], &[StreamMode::Values])
        .finish()
        .await
        .unwrap();
    assert_eq!(out.state.messages.len(), 2);
}

/// `tasks` mode: each node's start and end, a node that wrote nothing included, in the
/// order they run; `checkpoints` mode: each checkpoint as written, with its parent (the
/// thread's empty root, seq 0, is written before the run's first step).
#[tokio::test]
async fn tasks_and_checkpoints_modes_follow_every_node_and_write() {
    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([
            ai_calls(&[("c1", "echo")]),
            Message::ai("done"),
        ])))
        .tool(FnTool::new("echo", |args| Ok(args.to_string().into())))
        .middleware(Bystander)
        .build()
        .unwrap();
    let stream = agent.stream(
        "t",
        vec![Message::human("hi")],
        &[StreamMode::Tasks, StreamMode::Checkpoints],
    );
    let labels: Vec<_> = stream.map(|e| label(&e)).collect().await;
    assert_eq!(
        labels,
        [
            "checkpoint:input:1:Some(0)",
            "task:Bystander.before_agent",
            "task_end:Bystander.before_agent:0",
            "task:Bystander.before_model",
            "task_end:Bystander.before_model:0",
            "task:model",
            "task_end:model:1",
            "checkpoint:model:2:Some(1)",
            "task:Bystander.after_model",
            "task_end:Bystander.after_model:0",
            "task:tools",
            "task_end:tools:1",
            "checkpoint:tools:3:Some(2)",
            "task:Bystander.before_model",
            "task_end:Bystander.before_model:0",
            "task:model",
            "task_end:model:1",
            "checkpoint:model:4:Some(3)",
            "task:Bystander.after_model",
            "task_end:Bystander.after_model:0",
            "task:Bystander.after_agent",
            "task_end:Bystander.after_agent:0",
        ]
    );
}
