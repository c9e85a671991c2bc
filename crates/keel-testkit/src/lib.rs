//! # keel-testkit
//!
//! Test doubles, in the spirit of `tower_test::mock`: the test says exactly what the
//! model answers and then checks exactly what it was asked.
//!
//! - [`ScriptedModel`] answers from a queue and records every request as received.
//! - [`FnTool`] turns a closure into a [`Tool`].
//! - [`anthropic_cache::PromptCache`] applies Anthropic's documented prompt-caching rules
//!   to Messages API request bodies (for measuring and testing breakpoint placement).
//! - `cpu::ThreadCpu` (feature `criterion`) measures benches in thread CPU time.
//! - [`planted`] generates sessions with planted facts, to measure what a summary keeps.
//! - [`styles`] generates sessions written in other styles (plain-language facts,
//!   corrections, read-tool findings, dense, multilingual, long), each fact with a probe.
//!
//! ```
//! use keel_core::message::Message;
//! use keel_core::model::{ChatModel, ChatRequest, ModelSettings};
//! use keel_testkit::ScriptedModel;
//!
//! # tokio_test_block_on(async {
//! let model = ScriptedModel::new([Message::ai("hello")]);
//! let settings = ModelSettings::default();
//! let history = [Message::human("hi")];
//! let answer = model.invoke(ChatRequest::new(&history, &settings)).await.unwrap();
//! assert_eq!(answer.text(), "hello");
//! assert_eq!(model.requests()[0].messages[0].text(), "hi");
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     use std::task::{Context, Poll, Waker};
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = Context::from_waker(Waker::noop());
//! #     loop { if let Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! ```
//!
//! This crate is never a dependency of a binary's default features.

pub mod anthropic_cache;
#[cfg(feature = "criterion")]
pub mod cpu;
pub mod planted;
pub mod styles;

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::message::{Content, Message};
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, ModelError, ModelErrorKind, ModelProfile,
    ModelSettings, ToolChoice, message_to_chunks,
};
use keel_core::tool::{Tool, ToolError, ToolSpec};
use parking_lot::Mutex;
use serde_json::Value;

/// A request exactly as the scripted model received it (owned copy).
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    /// The system message.
    pub system: Option<Message>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tool names offered.
    pub tools: Vec<ToolSpec>,
    /// Tool policy.
    pub tool_choice: Option<ToolChoice>,
    /// Settings.
    pub settings: ModelSettings,
    /// Whether the caller marked the call internal (a summary call).
    pub internal: bool,
}

type Responder = Box<dyn Fn(&RecordedRequest) -> Result<Message, ModelError> + Send + Sync>;

enum Script {
    Queue(VecDeque<Result<Message, ModelError>>),
    Fn(Responder),
}

/// A chat model that answers from a queue (or a function) and records every request.
///
/// When the queue is empty it answers with a [`ModelErrorKind::InvalidRequest`] error
/// saying so, so a test that makes one call too many fails with a clear message.
pub struct ScriptedModel {
    profile: ModelProfile,
    script: Mutex<Script>,
    requests: Mutex<Vec<RecordedRequest>>,
    chunk_chars: Option<usize>,
    record: bool,
}

impl ScriptedModel {
    /// A model that answers with these messages, in order.
    pub fn new(answers: impl IntoIterator<Item = Message>) -> Self {
        Self::with_results(answers.into_iter().map(Ok))
    }

    /// A model that answers with these results (errors included), in order.
    pub fn with_results(answers: impl IntoIterator<Item = Result<Message, ModelError>>) -> Self {
        ScriptedModel {
            profile: ModelProfile::new("scripted", "scripted"),
            script: Mutex::new(Script::Queue(answers.into_iter().collect())),
            requests: Mutex::new(Vec::new()),
            chunk_chars: None,
            record: true,
        }
    }

    /// A model that computes each answer from the request.
    pub fn from_fn(
        f: impl Fn(&RecordedRequest) -> Result<Message, ModelError> + Send + Sync + 'static,
    ) -> Self {
        ScriptedModel {
            profile: ModelProfile::new("scripted", "scripted"),
            script: Mutex::new(Script::Fn(Box::new(f))),
            requests: Mutex::new(Vec::new()),
            chunk_chars: None,
            record: true,
        }
    }

    /// Returns the model with another profile (name, provider, context window).
    pub fn with_profile(mut self, profile: ModelProfile) -> Self {
        self.profile = profile;
        self
    }

    /// Returns the model streaming each answer's text in pieces of `chars` characters
    /// (then the whole answer, as [`ChatChunk::Complete`]), as a provider streams tokens,
    /// so tests can check what a stream carries mid-answer. Without it, the text is one
    /// piece.
    pub fn streaming_in(mut self, chars: usize) -> Self {
        self.chunk_chars = Some(chars.max(1));
        self
    }

    /// Returns the model keeping no copy of the requests it answers (a long soak run
    /// would otherwise hold every request in memory): [`requests`](Self::requests) is
    /// then empty, and [`calls`](Self::calls) 0.
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// Queues more answers (queue-scripted models only).
    pub fn push(&self, answer: Result<Message, ModelError>) {
        if let Script::Queue(q) = &mut *self.script.lock() {
            q.push_back(answer);
        }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().clone()
    }

    /// How many calls were made.
    pub fn calls(&self) -> usize {
        self.requests.lock().len()
    }

    /// How many calls were marked internal.
    pub fn internal_calls(&self) -> usize {
        self.requests.lock().iter().filter(|r| r.internal).count()
    }

    /// Shares the model as a trait object.
    pub fn shared(self) -> Arc<Self> {
        Arc::new(self)
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        let recorded = RecordedRequest {
            system: request.system.cloned(),
            messages: request.messages.to_vec(),
            tools: request.tools.to_vec(),
            tool_choice: request.tool_choice.cloned(),
            settings: request.settings.clone(),
            internal: request.internal,
        };
        let answer = match &mut *self.script.lock() {
            Script::Queue(q) => q.pop_front().unwrap_or_else(|| {
                Err(ModelError::new(
                    ModelErrorKind::InvalidRequest,
                    format!(
                        "ScriptedModel has no answer left for call #{}",
                        self.requests.lock().len() + 1
                    ),
                ))
            }),
            Script::Fn(f) => f(&recorded),
        };
        if self.record {
            self.requests.lock().push(recorded);
        }
        answer
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ChatStream, ModelError> {
        let message = self.invoke(request).await?;
        let mut chunks = message_to_chunks(&message);
        if let Some(n) = self.chunk_chars {
            let text: Vec<char> = message.text().chars().collect();
            chunks.retain(|c| !matches!(c, ChatChunk::Text { .. }));
            let pieces = text.chunks(n).map(|piece| ChatChunk::Text {
                text: piece.iter().collect(),
            });
            chunks.splice(0..0, pieces);
        }
        Ok(Box::pin(ready_stream(chunks)))
    }
}

/// A stream over ready chunks.
fn ready_stream(
    chunks: Vec<ChatChunk>,
) -> impl futures_core::Stream<Item = Result<ChatChunk, ModelError>> + Send {
    struct Iter(std::vec::IntoIter<ChatChunk>);
    impl futures_core::Stream for Iter {
        type Item = Result<ChatChunk, ModelError>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Ready(self.0.next().map(Ok))
        }
    }
    Iter(chunks.into_iter())
}

type ToolFn = Box<dyn Fn(Value) -> Result<Content, ToolError> + Send + Sync>;

/// A tool made from a closure.
pub struct FnTool {
    spec: ToolSpec,
    f: ToolFn,
}

impl FnTool {
    /// A tool named `name` that runs `f` on its arguments.
    pub fn new(
        name: &str,
        f: impl Fn(Value) -> Result<Content, ToolError> + Send + Sync + 'static,
    ) -> Self {
        FnTool {
            spec: ToolSpec::new(
                name,
                format!("test tool {name}"),
                serde_json::json!({"type": "object", "properties": {}}),
            ),
            f: Box::new(f),
        }
    }

    /// A tool that answers with its arguments as JSON text.
    pub fn echo(name: &str) -> Self {
        Self::new(name, |args| Ok(Content::Text(args.to_string())))
    }
}

#[async_trait]
impl Tool for FnTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value) -> Result<Content, ToolError> {
        (self.f)(args)
    }
}
