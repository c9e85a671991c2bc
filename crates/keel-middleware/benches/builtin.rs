//! Each built-in middleware's own cost per model call.
//!
//! Every iteration is one whole `invoke` on a 22-message support thread (five tool
//! pairs with 2 KB results, an email address in the user's last message) that makes two
//! model calls and one tool call: the model asks for `echo` once, then answers. `bare`
//! has no middleware; each other benchmark has exactly one, configured so it does its
//! real work on every call (context editing clears, PII redacts input, output and tool
//! results, the limits count, the retry and fallback layers wrap a call that succeeds).
//! The cost of a middleware per model call is (its time - `bare`) / 2.
//!
//! The model is an in-bench function and the checkpointer discards, so the differences
//! are the middleware's own cost. Wall time on a current-thread runtime.
//!
//! Run: `cargo bench -p keel-middleware --bench builtin`

// A benchmark whose setup fails must stop loudly, like a test.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use keel_agent::Agent;
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::Middleware;
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile};
use keel_core::store::{Checkpoint, Checkpointer, StoreError};
use keel_middleware::stack::Stack;
use keel_testkit::FnTool;
use serde_json::json;

/// Calls `echo` when the user spoke last, answers otherwise.
struct Model(ModelProfile);

#[async_trait]
impl ChatModel for Model {
    fn profile(&self) -> &ModelProfile {
        &self.0
    }
    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        Ok(match request.messages.last() {
            Some(m) if m.is_human() => Message::ai("").with_tool_calls(vec![ToolCall::new(
                "call_x",
                "echo",
                json!({"q": "status"}),
            )]),
            _ => Message::ai("All set; I will write to ada@example.com."),
        })
    }
}

/// Keeps nothing, so every iteration starts from the same thread.
struct Discard;

#[async_trait]
impl Checkpointer for Discard {
    async fn put(&self, _: &str, _: Checkpoint) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn latest(&self, _: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(None)
    }
    async fn history(&self, _: &str) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(Vec::new())
    }
}

fn thread() -> Vec<Message> {
    let mut m = vec![Message::human("My instance keeps rebooting.")];
    for i in 0..5 {
        m.push(Message::ai("").with_tool_calls(vec![ToolCall::new(
            format!("h{i}"),
            "echo",
            json!({"step": i}),
        )]));
        m.push(
            Message::tool(
                format!("h{i}"),
                format!("log {i}: {}", "kernel panic; ".repeat(150)),
            )
            .with_name("echo"),
        );
        m.push(Message::ai(format!("Step {i} checked.")));
    }
    m.push(Message::ai("Shall I open a ticket?"));
    m.push(Message::human(
        "Yes, reach me at ada@example.com from 10.0.0.7.",
    ));
    m
}

const STACKS: &[(&str, &str)] = &[
    ("bare", "middleware: []"),
    (
        "model_call_limit",
        "middleware: [{model_call_limit: {thread_limit: 1000000, run_limit: 100}}]",
    ),
    (
        "tool_call_limit",
        "middleware: [{tool_call_limit: {run_limit: 100}}]",
    ),
    (
        "model_retry",
        "middleware: [{model_retry: {max_retries: 2}}]",
    ),
    ("tool_retry", "middleware: [{tool_retry: {max_retries: 2}}]"),
    (
        "tool_error",
        "middleware: [{tool_error: {on_error: 'Error: {error}'}}]",
    ),
    ("model_fallback", "middleware: [{model_fallback: [backup]}]"),
    (
        "context_editing",
        "middleware: [{context_editing: {edits: [{clear_tool_uses: {trigger: 100, keep: 1}}]}}]",
    ),
    (
        "pii_email_all",
        "middleware: [{pii: {pii_type: email, apply_to_input: true, apply_to_output: true, apply_to_tool_results: true}}]",
    ),
    ("pii_url_input", "middleware: [{pii: {pii_type: url}}]"),
    ("todo_list", "middleware: [{todo_list: {}}]"),
];

fn agent(stack: &str) -> Agent {
    let model: Arc<dyn ChatModel> = Arc::new(Model(ModelProfile::new("bench", "bench")));
    let m = model.clone();
    let middleware: Vec<Arc<dyn Middleware>> = Stack::from_yaml_str(stack)
        .unwrap()
        .middleware(Arc::new(move |_: &str| Some(m.clone())))
        .unwrap();
    let mut b = Agent::builder()
        .model(model)
        .checkpointer(Arc::new(Discard))
        .tool(FnTool::echo("echo"));
    for mw in middleware {
        b = b.middleware_shared(mw);
    }
    b.build().unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let input = thread();
    let mut group = c.benchmark_group("builtin");
    for (name, stack) in STACKS {
        let agent = agent(stack);
        // Each configuration must do what it is measured doing.
        let out = rt.block_on(agent.invoke("t", input.clone())).unwrap();
        assert_eq!(out.model_steps, 2, "{name}");
        group.bench_function(*name, |b| {
            b.iter(|| {
                rt.block_on(agent.invoke("t", black_box(input.clone())))
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
