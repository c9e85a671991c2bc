//! Test doubles and builders shared by the integration tests.
// Test helpers: a broken fixture should fail the test loudly.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::{Middleware, ModelHandler, ModelRequest, ModelResponse, Next, Runtime};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile, ModelSettings};
use keel_core::state::AgentState;
use keel_core::stream::{StreamEvent, StreamWriter};
use keel_core::tokens::TokenCounter;
use keel_summarization::SUMMARY_NAME;
use keel_summarization::cache::SummaryCache;
use keel_summarization::config::{ContextSize, SummarizationConfig, SummarizationConfigBuilder};
use keel_summarization::middleware::{SummarizationMiddleware, SummarizationMiddlewareBuilder};
use keel_summarization::summary_call::CircuitBreaker;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// One token per character of text and tool-call arguments: easy to reason about.
pub struct CharCounter;

impl TokenCounter for CharCounter {
    fn name(&self) -> &str {
        "chars"
    }
    fn count_message(&self, m: &Message) -> u64 {
        let args: usize = m
            .tool_calls()
            .iter()
            .map(|c| c.args.to_string().len())
            .sum();
        (m.text().chars().count() + args) as u64
    }
    fn count_text(&self, text: &str) -> u64 {
        text.chars().count() as u64
    }
}

/// The terminal of the chain: records every request it gets and answers "ok", or fails
/// with the scripted errors first.
#[derive(Default)]
pub struct Terminal {
    pub requests: Mutex<Vec<ModelRequest>>,
    pub errors: Mutex<Vec<ModelError>>,
}

#[async_trait]
impl ModelHandler for Terminal {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        self.requests.lock().push(request);
        if let Some(e) = self.errors.lock().pop() {
            return Err(e);
        }
        Ok(ModelResponse::new(Message::ai("ok")))
    }
}

impl Terminal {
    pub fn last(&self) -> ModelRequest {
        self.requests
            .lock()
            .last()
            .cloned()
            .expect("a request reached the model")
    }
    pub fn count(&self) -> usize {
        self.requests.lock().len()
    }
}

type Answer = Box<dyn Fn(usize) -> Result<String, ModelError> + Send + Sync>;

/// A summary model: answers internal calls with `summary #n` after an optional delay,
/// records each prompt, and can be told to fail.
pub struct SummaryModel {
    pub profile: ModelProfile,
    pub calls: AtomicUsize,
    pub prompts: Mutex<Vec<String>>,
    pub delay: Duration,
    pub answer: Mutex<Answer>,
}

impl SummaryModel {
    pub fn new() -> Arc<Self> {
        Self::with(|n| Ok(format!("- summary #{n}")))
    }
    pub fn with(
        f: impl Fn(usize) -> Result<String, ModelError> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(SummaryModel {
            profile: ModelProfile::new("summary-model", "scripted"),
            calls: AtomicUsize::new(0),
            prompts: Mutex::new(Vec::new()),
            delay: Duration::ZERO,
            answer: Mutex::new(Box::new(f)),
        })
    }
    pub fn slow(delay: Duration) -> Arc<Self> {
        Arc::new(SummaryModel {
            delay,
            ..Arc::into_inner(Self::new()).expect("fresh")
        })
    }
    pub fn named(
        name: &str,
        f: impl Fn(usize) -> Result<String, ModelError> + Send + Sync + 'static,
    ) -> Arc<Self> {
        let mut m = Arc::into_inner(Self::with(f)).expect("fresh");
        m.profile = ModelProfile::new(name, "scripted");
        Arc::new(m)
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    pub fn last_prompt(&self) -> String {
        self.prompts.lock().last().cloned().unwrap_or_default()
    }
}

#[async_trait]
impl ChatModel for SummaryModel {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }
    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        assert!(request.internal, "summary calls must be internal");
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.prompts
            .lock()
            .push(request.messages[0].text().into_owned());
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        (self.answer.lock())(n).map(Message::ai)
    }
}

pub fn config() -> SummarizationConfigBuilder {
    SummarizationConfig::builder()
}

pub fn middleware(config: SummarizationConfig) -> SummarizationMiddlewareBuilder {
    SummarizationMiddleware::builder(config)
        .report_ids(true)
        .token_counter(Arc::new(CharCounter))
        .cache(Arc::new(SummaryCache::new(64)))
        .circuit_breaker(Arc::new(CircuitBreaker::new(
            3,
            Duration::from_secs(60),
            64,
        )))
}

pub fn request(messages: Vec<Message>, model: Arc<dyn ChatModel>, thread: &str) -> ModelRequest {
    ModelRequest {
        messages: Arc::new(messages),
        system: None,
        tools: Arc::new(vec![]),
        tool_choice: None,
        settings: ModelSettings::default(),
        model,
        state: Arc::new(AgentState::default()),
        runtime: Runtime::detached(thread),
    }
}

/// A request whose custom events are captured.
pub fn request_with_events(
    messages: Vec<Message>,
    model: Arc<dyn ChatModel>,
    thread: &str,
) -> (ModelRequest, mpsc::UnboundedReceiver<StreamEvent>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut r = request(messages, model, thread);
    r.runtime.writer = StreamWriter::new(tx);
    (r, rx)
}

pub fn custom_events(rx: &mut mpsc::UnboundedReceiver<StreamEvent>) -> Vec<Value> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let StreamEvent::Custom { payload, .. } = e {
            out.push(payload);
        }
    }
    out
}

pub fn event_types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Runs the middleware once, with `terminal` as the model.
pub async fn run(
    mw: &SummarizationMiddleware,
    request: ModelRequest,
    terminal: &Terminal,
) -> Result<ModelResponse, ModelError> {
    let chain: Vec<Arc<dyn Middleware>> = Vec::new();
    mw.wrap_model_call(request, Next::new(&chain, terminal))
        .await
}

/// `n` alternating user/assistant messages of `size` characters, ids `m0..`.
pub fn chat(n: usize, size: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let text = format!("{i:04} {}", "x".repeat(size.saturating_sub(5)));
            let m = if i % 2 == 0 {
                Message::human(text)
            } else {
                Message::ai(text)
            };
            m.with_id(format!("m{i}"))
        })
        .collect()
}

pub fn ai_calls(id: &str, calls: &[(&str, &str, Value)]) -> Message {
    Message::ai("")
        .with_tool_calls(
            calls
                .iter()
                .map(|(cid, name, args)| ToolCall::new(*cid, *name, args.clone()))
                .collect(),
        )
        .with_id(id)
}

pub fn tool(id: &str, call: &str, text: &str) -> Message {
    Message::tool(call, text).with_id(id)
}

/// A skill read whose result has `size` characters (tokens with [`CharCounter`]).
pub fn skill_read(ai_id: &str, call: &str, path: &str, size: usize) -> Vec<Message> {
    vec![
        ai_calls(ai_id, &[(call, "read_file", json!({"path": path}))]),
        tool(&format!("{ai_id}-r"), call, &"k".repeat(size)),
    ]
}

pub fn ids(messages: &[Message]) -> Vec<String> {
    messages.iter().map(|m| m.id().to_owned()).collect()
}

pub fn is_summary(m: &Message) -> bool {
    m.name() == Some(SUMMARY_NAME)
}

pub fn tokens(n: u64) -> ContextSize {
    ContextSize::Tokens(n)
}

pub fn msgs(n: u64) -> ContextSize {
    ContextSize::Messages(n)
}

/// Wraps a model and gives it a known context window.
pub struct WindowedModel {
    pub inner: Arc<SummaryModel>,
    pub window: u64,
}

#[async_trait]
impl ChatModel for WindowedModel {
    fn profile(&self) -> &ModelProfile {
        static P: std::sync::OnceLock<ModelProfile> = std::sync::OnceLock::new();
        P.get_or_init(|| ModelProfile::new("windowed", "scripted").with_max_input_tokens(50))
    }
    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        self.inner.invoke(request).await
    }
}
