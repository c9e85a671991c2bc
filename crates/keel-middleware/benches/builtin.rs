//! Each built-in middleware's own cost per model call, and per tool call.
//!
//! `model_call/*`: the hooks one model call runs through a middleware (`before_model`,
//! `wrap_model_call` around a terminal that answers at once, `after_model`), on a
//! 22-message support thread (five tool pairs with 2 KB results, an email address and an
//! IP in the user's last message). Each middleware is configured to do its real work on
//! every call: context editing clears, PII redacts input, output and tool results, the
//! limits count, todo_list adds its prompt and tool, retry and fallback wrap a call that
//! succeeds, the selector makes its selection call, the router swaps the model (its
//! `before_agent` runs once per run and is not measured), human_in_the_loop checks the
//! answer's calls. `bare` is the terminal alone; a middleware's cost is its time minus `bare`.
//! `tool_call/*`: the same for `wrap_tool_call` around a terminal tool.
//! The 10-layer pipeline overhead is `cargo bench -p keel-agent --bench pipeline`.
//!
//! Time is the bench thread's CPU time (keel_testkit::cpu), on a current-thread runtime.
//!
//! Run: `cargo bench -p keel-middleware --bench builtin`

// A benchmark whose setup fails must stop loudly, like a test.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::{
    Middleware, ModelHandler, ModelRequest, ModelResponse, Next, Runtime, ToolCallRequest,
    ToolHandler, ToolNext,
};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile, ModelSettings};
use keel_core::state::AgentState;
use keel_core::tool::ToolError;
use keel_middleware::stack::Stack;
use keel_testkit::cpu::ThreadCpu;
use serde_json::json;

/// A model the terminal never calls (it answers by itself).
struct Unused(ModelProfile);

#[async_trait]
impl ChatModel for Unused {
    fn profile(&self) -> &ModelProfile {
        &self.0
    }
    async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
        Ok(Message::ai("unused"))
    }
}

/// The innermost model call: the answer, at once.
struct Answer;

#[async_trait]
impl ModelHandler for Answer {
    async fn call(&self, _request: ModelRequest) -> Result<ModelResponse, ModelError> {
        Ok(ModelResponse::new(Message::ai(
            "All set; I will write to ada@example.com.",
        )))
    }
}

#[async_trait]
impl ToolHandler for Answer {
    async fn call(&self, request: ToolCallRequest) -> Result<Message, ToolError> {
        Ok(Message::tool(request.call.id, "ok").with_name(request.call.name))
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
    ("model_refusal", "middleware: [{model_refusal: {}}]"),
    (
        "human_in_the_loop",
        "middleware: [{human_in_the_loop: {interrupt_on: {delete_file: true}}}]",
    ),
    // The selector's model is the in-bench one, whose answer is not a selection: one
    // selection call, then every tool (on_parsing_failure: all).
    (
        "llm_tool_selector",
        "middleware: [{llm_tool_selector: {max_retries: 0, on_parsing_failure: all}}]",
    ),
    (
        "model_router",
        "middleware: [{model_router: {instructions: Pick., classifier: x, choices: {fast: {model: x, criteria: all}}}}]",
    ),
    (
        "llm_tool_emulator",
        "middleware: [{llm_tool_emulator: {model: x}}]",
    ),
];

fn middleware(stack: &str) -> Option<Arc<dyn Middleware>> {
    let model: Arc<dyn ChatModel> = Arc::new(Unused(ModelProfile::new("bench", "bench")));
    Stack::from_yaml_str(stack)
        .unwrap()
        .middleware(Arc::new(move |_: &str| Some(model.clone())))
        .unwrap()
        .pop()
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let runtime = Runtime::detached("bench");
    let mut state = AgentState::with_messages(thread());
    // The route model_router's before_agent (once per run, not measured) would store.
    state
        .values
        .insert("model_route".into(), json!({"choice": "fast"}));
    let state = Arc::new(state);
    let mut answered = (*state).clone();
    answered
        .apply(keel_core::state::StateUpdate::messages([Message::ai(
            "All set; I will write to ada@example.com.",
        )]))
        .unwrap();
    let request = ModelRequest {
        messages: state.messages.clone(),
        system: Some(Message::system("You are a support agent.")),
        tools: Arc::new(vec![keel_core::tool::ToolSpec::new(
            "echo",
            "Returns its arguments.",
            json!({"type": "object"}),
        )]),
        tool_choice: None,
        settings: ModelSettings::default(),
        model: Arc::new(Unused(ModelProfile::new("bench", "bench"))),
        state: state.clone(),
        runtime: runtime.clone(),
    };
    let tool_request = ToolCallRequest {
        call: ToolCall::new("call_x", "echo", json!({"q": "status"})),
        tool: None,
        state: state.clone(),
        runtime: runtime.clone(),
    };

    let mut model_group = c.benchmark_group("model_call");
    model_group.sampling_mode(SamplingMode::Flat);
    for (name, stack) in STACKS {
        let m = middleware(stack);
        let chain: Vec<Arc<dyn Middleware>> = m
            .iter()
            .filter(|m| m.hooks().wrap_model_call())
            .cloned()
            .collect();
        let hooks = m.as_ref().map(|m| m.hooks());
        model_group.bench_function(*name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    if let (Some(m), Some(h)) = (&m, hooks)
                        && h.before_model()
                    {
                        black_box(m.before_model(&state, &runtime).await.unwrap());
                    }
                    let response = Next::new(&chain, &Answer)
                        .run(request.clone())
                        .await
                        .unwrap();
                    black_box(response);
                    if let (Some(m), Some(h)) = (&m, hooks)
                        && h.after_model()
                    {
                        black_box(m.after_model(&answered, &runtime).await.unwrap());
                    }
                })
            })
        });
    }
    model_group.finish();

    let mut tool_group = c.benchmark_group("tool_call");
    tool_group.sampling_mode(SamplingMode::Flat);
    for (name, stack) in STACKS {
        let m = middleware(stack);
        let chain: Vec<Arc<dyn Middleware>> = m
            .into_iter()
            .filter(|m| m.hooks().wrap_tool_call())
            .collect();
        if *name != "bare" && chain.is_empty() {
            continue;
        }
        tool_group.bench_function(*name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    black_box(
                        ToolNext::new(&chain, &Answer)
                            .run(tool_request.clone())
                            .await
                            .unwrap(),
                    )
                })
            })
        });
    }
    tool_group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench
}
criterion_main!(benches);
