//! The chat-model contract: [`ChatModel`], its request, streamed chunks and typed errors.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_core::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::{AiMessage, Message, ToolCall, Usage, new_id};
use crate::tool::ToolSpec;

/// What a model is and how much it can read.
///
/// `max_input_tokens` is the context window as the provider's model page states it;
/// the answer's tokens come out of the same window for most providers, so what a
/// request may carry is [`usable_input_tokens`](Self::usable_input_tokens): the window
/// less the request's `max_tokens`, or less the model's output limit when the request
/// sets none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelProfile {
    /// Model name as the provider knows it (`gpt-4o-mini`).
    pub name: String,
    /// Provider (`openai`, `anthropic`, `vllm`, `scripted`, ...).
    pub provider: String,
    /// Context window in tokens, when known; fraction triggers need it.
    pub max_input_tokens: Option<u64>,
    /// The most tokens one answer may have, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
}

impl ModelProfile {
    /// A profile with a name and provider and no known context window.
    pub fn new(name: impl Into<String>, provider: impl Into<String>) -> Self {
        ModelProfile {
            name: name.into(),
            provider: provider.into(),
            max_input_tokens: None,
            max_output_tokens: None,
        }
    }

    /// Returns the profile with a known context window.
    pub fn with_max_input_tokens(mut self, n: u64) -> Self {
        self.max_input_tokens = Some(n);
        self
    }

    /// Returns the profile with a known output limit.
    pub fn with_max_output_tokens(mut self, n: u64) -> Self {
        self.max_output_tokens = Some(n);
        self
    }

    /// The tokens a request may carry: the window less the answer's room, which is
    /// `request_max_tokens` when the request sets it and the model's output limit
    /// otherwise. `None` when the window is unknown; never below 1.
    ///
    /// ```
    /// use keel_core::model::ModelProfile;
    /// let p = ModelProfile::new("gpt-4o", "openai")
    ///     .with_max_input_tokens(128_000)
    ///     .with_max_output_tokens(16_384);
    /// assert_eq!(p.usable_input_tokens(None), Some(111_616));
    /// assert_eq!(p.usable_input_tokens(Some(1_000)), Some(127_000));
    /// assert_eq!(ModelProfile::new("local", "vllm").usable_input_tokens(None), None);
    /// ```
    pub fn usable_input_tokens(&self, request_max_tokens: Option<u32>) -> Option<u64> {
        let window = self.max_input_tokens?;
        let reserve = request_max_tokens
            .map(u64::from)
            .or(self.max_output_tokens)
            .unwrap_or(0);
        Some(window.saturating_sub(reserve).max(1))
    }
}

/// How the model may use tools.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool.
    Named(String),
}

/// Sampling and output settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelSettings {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Output token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Provider-specific settings passed through verbatim.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

/// One call to a chat model, borrowed from the caller so no history is copied.
#[derive(Clone, Copy, Debug)]
pub struct ChatRequest<'a> {
    /// The system message, sent first when present.
    pub system: Option<&'a Message>,
    /// The conversation (without the system message).
    pub messages: &'a [Message],
    /// Tools the model may call.
    pub tools: &'a [ToolSpec],
    /// Tool policy.
    pub tool_choice: Option<&'a ToolChoice>,
    /// Settings.
    pub settings: &'a ModelSettings,
    /// An internal call (a summary, a classifier): never streamed to the user.
    pub internal: bool,
}

impl<'a> ChatRequest<'a> {
    /// A request with only messages and default settings.
    pub fn new(messages: &'a [Message], settings: &'a ModelSettings) -> Self {
        ChatRequest {
            system: None,
            messages,
            tools: &[],
            tool_choice: None,
            settings,
            internal: false,
        }
    }
}

/// A piece of a streamed answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChatChunk {
    /// Text tokens.
    Text {
        /// The text delta.
        text: String,
    },
    /// A fragment of a tool call; fragments with the same `index` belong together.
    ToolCall {
        /// Position of the call in the message.
        index: usize,
        /// The call id, usually only on the first fragment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool name, usually only on the first fragment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// A fragment of the JSON argument text.
        #[serde(default)]
        args: String,
    },
    /// Final usage.
    Usage {
        /// The usage.
        usage: Usage,
    },
    /// Response facts (`finish_reason`, `model`, ...), merged into `response_metadata`.
    Metadata {
        /// Entries to merge.
        metadata: Map<String, Value>,
    },
    /// The whole answer, sent last by a model that has it in one piece (one that does
    /// not stream, or an internal call): the pieces before it are for display, and the
    /// aggregator returns this message as is, so what pieces cannot carry (the message's
    /// id, name and metadata, list content) is not lost. The agent does not forward it
    /// to the `messages` stream mode, which has already carried the pieces.
    Complete {
        /// The answer.
        message: Box<Message>,
    },
}

/// A stream of chunks.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatChunk, ModelError>> + Send>>;

/// A chat model: OpenAI-compatible servers, scripted test doubles, anything that answers.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// Name, provider and context window.
    fn profile(&self) -> &ModelProfile;

    /// One complete answer.
    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError>;

    /// A streamed answer. The default calls [`invoke`](Self::invoke) and yields it as
    /// chunks ([`message_to_chunks`]), ending with [`ChatChunk::Complete`].
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ChatStream, ModelError> {
        let message = self.invoke(request).await?;
        let chunks: Vec<Result<ChatChunk, ModelError>> =
            message_to_chunks(&message).into_iter().map(Ok).collect();
        Ok(Box::pin(IterStream(chunks.into_iter())))
    }
}

struct IterStream<I>(I);

impl<I: Iterator + Unpin> Stream for IterStream<I> {
    type Item = I::Item;
    fn poll_next(
        mut self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(self.0.next())
    }
}

/// Splits a complete AI message into the chunks a stream would have carried, followed
/// by [`ChatChunk::Complete`] with the message itself (so aggregating the chunks gives
/// back exactly `message`).
pub fn message_to_chunks(message: &Message) -> Vec<ChatChunk> {
    let mut out = Vec::new();
    let text = message.text();
    if !text.is_empty() {
        out.push(ChatChunk::Text {
            text: text.into_owned(),
        });
    }
    for (index, call) in message.tool_calls().iter().enumerate() {
        out.push(ChatChunk::ToolCall {
            index,
            id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            args: call.args.to_string(),
        });
    }
    if let Some(ai) = message.as_ai() {
        if let Some(usage) = ai.usage {
            out.push(ChatChunk::Usage { usage });
        }
        if !ai.response_metadata.is_empty() {
            out.push(ChatChunk::Metadata {
                metadata: ai.response_metadata.clone(),
            });
        }
    }
    out.push(ChatChunk::Complete {
        message: Box::new(message.clone()),
    });
    out
}

#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    args: String,
}

/// Assembles streamed chunks into one AI message.
#[derive(Default)]
pub struct ChunkAggregator {
    text: String,
    calls: BTreeMap<usize, PartialCall>,
    usage: Option<Usage>,
    metadata: Map<String, Value>,
    complete: Option<Message>,
}

impl ChunkAggregator {
    /// An empty aggregator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one chunk.
    pub fn push(&mut self, chunk: &ChatChunk) {
        match chunk {
            ChatChunk::Text { text } => self.text.push_str(text),
            ChatChunk::ToolCall {
                index,
                id,
                name,
                args,
            } => {
                let call = self.calls.entry(*index).or_default();
                if let Some(id) = id.as_ref().filter(|s| !s.is_empty()) {
                    call.id = Some(id.clone());
                }
                if let Some(name) = name {
                    call.name.push_str(name);
                }
                call.args.push_str(args);
            }
            ChatChunk::Usage { usage } => self.usage = Some(*usage),
            ChatChunk::Metadata { metadata } => {
                for (k, v) in metadata {
                    self.metadata.insert(k.clone(), v.clone());
                }
            }
            ChatChunk::Complete { message } => self.complete = Some((**message).clone()),
        }
    }

    /// The assembled message. Tool-call arguments that are not valid JSON are a
    /// [`ModelErrorKind::MalformedResponse`] carrying the raw text.
    /// A [`ChatChunk::Complete`] message, when one was pushed, is returned as is.
    pub fn finish(self) -> Result<Message, ModelError> {
        if let Some(message) = self.complete {
            return Ok(message);
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (index, call) in self.calls {
            let args = if call.args.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(&call.args).map_err(|e| {
                    ModelError::new(
                        ModelErrorKind::MalformedResponse,
                        format!(
                            "tool call #{index} ({}) has invalid JSON arguments: {e}",
                            call.name
                        ),
                    )
                    .with_raw(call.args.clone())
                })?
            };
            tool_calls.push(ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{}", new_id())),
                name: call.name,
                args,
            });
        }
        Ok(AiMessage {
            content: self.text.into(),
            tool_calls,
            id: new_id(),
            usage: self.usage,
            response_metadata: self.metadata,
            ..Default::default()
        }
        .into())
    }
}

/// What kind of failure a model call had; middleware decides on retries from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelErrorKind {
    /// Bad or missing credentials. Not retryable.
    Authentication,
    /// Too many requests; see `retry_after`. Retryable.
    RateLimited,
    /// The request did not fit the model's context window. Not retryable as is: compact first.
    ContextOverflow,
    /// The server rejected the request. Not retryable.
    InvalidRequest,
    /// A server-side failure (5xx). Retryable.
    Server,
    /// No answer in time. Retryable.
    Timeout,
    /// An answer that could not be understood; `raw` holds it. Not retryable.
    MalformedResponse,
    /// The connection failed. Retryable.
    Connection,
    /// A middleware or the agent refused the call. Not retryable.
    Rejected,
    /// The model answered with a refusal (it declined to produce the output), reported
    /// as an error by a middleware that was asked to (LangChain's `ModelRefusalError`).
    /// Not retryable: the same request is unlikely to succeed.
    Refused,
}

impl ModelErrorKind {
    /// True for failures that may succeed if tried again unchanged.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ModelErrorKind::RateLimited
                | ModelErrorKind::Server
                | ModelErrorKind::Timeout
                | ModelErrorKind::Connection
        )
    }
}

/// The figures of a context-window overflow: how many tokens were sent and how many
/// the model takes, as the provider's message gave them (or as Keel counted them when
/// it did not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverflowFigures {
    /// Tokens of the request that overflowed.
    pub sent_tokens: Option<u64>,
    /// The limit it went over: the model's context window, or the per-request token
    /// limit of a deployment that rejected it for size.
    pub window_tokens: Option<u64>,
}

impl OverflowFigures {
    /// These figures, each missing one taken from `other`.
    pub fn or(self, other: OverflowFigures) -> OverflowFigures {
        OverflowFigures {
            sent_tokens: self.sent_tokens.or(other.sent_tokens),
            window_tokens: self.window_tokens.or(other.window_tokens),
        }
    }
}

impl std::fmt::Display for OverflowFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.sent_tokens {
            Some(n) => write!(f, "{n} tokens sent")?,
            None => f.write_str("an unknown number of tokens sent")?,
        }
        match self.window_tokens {
            Some(n) => write!(f, ", the model's window is {n} tokens"),
            None => f.write_str(", the model's window is unknown"),
        }
    }
}

/// A failed model call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("model call failed ({kind:?}): {message}")]
pub struct ModelError {
    /// What went wrong.
    pub kind: ModelErrorKind,
    /// A human-readable explanation.
    pub message: String,
    /// How long the server asked us to wait, for rate limits.
    pub retry_after: Option<Duration>,
    /// The raw response text, when it could not be understood.
    pub raw: Option<String>,
    /// For [`ModelErrorKind::ContextOverflow`]: what was sent and the model's window,
    /// when known.
    pub overflow: Option<OverflowFigures>,
}

impl ModelError {
    /// An error of the given kind.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        ModelError {
            kind,
            message: message.into(),
            retry_after: None,
            raw: None,
            overflow: None,
        }
    }

    /// Attaches the figures of a context overflow.
    pub fn with_overflow(mut self, figures: OverflowFigures) -> Self {
        self.overflow = Some(figures);
        self
    }

    /// Attaches the raw response text.
    pub fn with_raw(mut self, raw: impl Into<String>) -> Self {
        self.raw = Some(raw.into());
        self
    }

    /// Attaches a retry-after hint.
    pub fn with_retry_after(mut self, d: Duration) -> Self {
        self.retry_after = Some(d);
        self
    }

    /// True when retrying unchanged may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

/// Resolves a model name to a chat model (the application's model registry or
/// factory): summary models, fallback models, a router's choices, a stack file's
/// `model` key. Any `Fn(&str) -> Option<Arc<dyn ChatModel>>` is one.
pub trait ModelRegistry: Send + Sync {
    /// The model called `name`, if there is one.
    fn resolve(&self, name: &str) -> Option<std::sync::Arc<dyn ChatModel>>;
}

impl<F> ModelRegistry for F
where
    F: Fn(&str) -> Option<std::sync::Arc<dyn ChatModel>> + Send + Sync,
{
    fn resolve(&self, name: &str) -> Option<std::sync::Arc<dyn ChatModel>> {
        self(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_and_usage_written_before_the_new_fields_still_read() {
        let p: ModelProfile = serde_json::from_str(
            r#"{"name":"gpt-4o","provider":"openai","max_input_tokens":128000}"#,
        )
        .unwrap();
        assert_eq!(p.max_output_tokens, None);
        assert_eq!(p.usable_input_tokens(None), Some(128_000));
        let u: Usage =
            serde_json::from_str(r#"{"input_tokens":9,"output_tokens":7,"total_tokens":16}"#)
                .unwrap();
        assert_eq!(u.cached_input_tokens, 0);
        // Nothing new is written when there is nothing to say.
        assert_eq!(
            serde_json::to_string(&u).unwrap(),
            r#"{"input_tokens":9,"output_tokens":7,"total_tokens":16}"#
        );
        assert!(
            !serde_json::to_string(&p)
                .unwrap()
                .contains("max_output_tokens")
        );
    }

    #[test]
    fn usable_input_never_drops_to_zero_and_overflow_figures_print() {
        let p = ModelProfile::new("m", "p")
            .with_max_input_tokens(100)
            .with_max_output_tokens(200);
        assert_eq!(p.usable_input_tokens(None), Some(1));
        let f = OverflowFigures {
            sent_tokens: Some(9),
            window_tokens: None,
        };
        assert_eq!(
            f.to_string(),
            "9 tokens sent, the model's window is unknown"
        );
        let g = f.or(OverflowFigures {
            sent_tokens: Some(1),
            window_tokens: Some(8),
        });
        assert_eq!(
            g.to_string(),
            "9 tokens sent, the model's window is 8 tokens"
        );
    }

    #[test]
    fn aggregator_assembles_split_arguments() {
        let mut agg = ChunkAggregator::new();
        for c in [
            ChatChunk::ToolCall {
                index: 0,
                id: Some("c1".into()),
                name: Some("ls".into()),
                args: "{\"di".into(),
            },
            ChatChunk::ToolCall {
                index: 0,
                id: None,
                name: None,
                args: "r\":1}".into(),
            },
            ChatChunk::Text { text: "ok".into() },
        ] {
            agg.push(&c);
        }
        let m = agg.finish().unwrap();
        assert_eq!(m.tool_calls()[0].args, serde_json::json!({"dir": 1}));
        assert_eq!(m.text(), "ok");
    }

    /// A model that only answers in one piece.
    struct InvokeOnly(ModelProfile, Message);

    #[async_trait]
    impl ChatModel for InvokeOnly {
        fn profile(&self) -> &ModelProfile {
            &self.0
        }
        async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
            Ok(self.1.clone())
        }
    }

    #[test]
    fn default_stream_keeps_everything_the_model_answered() {
        use crate::message::{Content, ContentPart, TextPart, ToolCall};
        let answer = Message::from(AiMessage {
            content: Content::Parts(vec![ContentPart::Text(TextPart::new("see the file"))]),
            ..Default::default()
        })
        .with_id("answer-7")
        .with_name("planner")
        .with_metadata("trace", serde_json::json!("t-1"))
        .with_tool_calls(vec![ToolCall::new("c1", "ls", serde_json::json!({}))]);
        let model = InvokeOnly(ModelProfile::new("m", "p"), answer.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got = rt.block_on(async {
            let settings = ModelSettings::default();
            let mut stream = model
                .stream(ChatRequest::new(&[], &settings))
                .await
                .unwrap();
            let mut agg = ChunkAggregator::new();
            let mut texts = 0;
            while let Some(chunk) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
                let chunk = chunk.unwrap();
                texts += usize::from(matches!(chunk, ChatChunk::Text { .. }));
                agg.push(&chunk);
            }
            assert_eq!(texts, 1, "the text is still streamed for display");
            agg.finish().unwrap()
        });
        assert_eq!(got, answer);
        assert_eq!(got.id(), "answer-7");
        assert_eq!(got.name(), Some("planner"));
    }

    #[test]
    fn broken_arguments_are_a_typed_error_with_raw_text() {
        let mut agg = ChunkAggregator::new();
        agg.push(&ChatChunk::ToolCall {
            index: 0,
            id: None,
            name: Some("ls".into()),
            args: "{nope".into(),
        });
        let err = agg.finish().unwrap_err();
        assert_eq!(err.kind, ModelErrorKind::MalformedResponse);
        assert_eq!(err.raw.as_deref(), Some("{nope"));
    }
}
