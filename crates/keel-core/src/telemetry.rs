//! Spans and counters in the shape of the OpenTelemetry semantic conventions for
//! generative AI (<https://opentelemetry.io/docs/specs/semconv/gen-ai/>), as plain
//! `tracing` spans: one `invoke_agent` span per agent run, one `chat` span per model call
//! (the agent's own and those middleware make: summaries, folds, tool selection) and
//! one `execute_tool` span per tool call.
//!
//! Nothing here exports anything: `keel-otel` installs the layer that turns these spans
//! into OpenTelemetry spans. Without a subscriber that enables the [`TARGET`] target,
//! every span is [`Span::none`] and no attribute is computed, formatted or allocated.
//!
//! Message content (`gen_ai.input.messages`, `gen_ai.output.messages`,
//! `gen_ai.system_instructions`, tool arguments and results) is recorded only after
//! [`set_capture_content`]`(true)`, as the conventions require content capture to be
//! opt-in.
//!
//! ```
//! use keel_core::message::Message;
//! use keel_core::model::{ChatRequest, ModelProfile, ModelSettings};
//! use keel_core::telemetry::{CallPurpose, ChatSpan};
//!
//! let profile = ModelProfile::new("gpt-4o-mini", "openai");
//! let settings = ModelSettings::default();
//! let history = [Message::human("hi")];
//! let chat = ChatSpan::new(&profile, &ChatRequest::new(&history, &settings), CallPurpose::Agent);
//! // No subscriber is installed here, so the span is disabled and recording is free.
//! assert!(chat.span().is_disabled());
//! chat.record(&Ok(Message::ai("hello")));
//! ```

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use serde_json::{Value, json};
use tracing::Span;
use tracing::field::Empty;

use crate::message::ToolStatus;
use crate::message::{Message, MessageBody, ToolCall};
use crate::model::{ChatModel, ChatRequest, ModelError, ModelProfile};

/// The `tracing` target of every span this module makes (`keel-otel` enables it).
pub const TARGET: &str = "keel::genai";

/// The `tracing` target of the counter events ([`count`]); `keel-otel` turns them
/// into OpenTelemetry counters and keeps them out of the spans.
pub const METRICS_TARGET: &str = "keel::metrics";

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Turns recording of message content on or off for the whole process (off by default;
/// `keel-otel` sets it from `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`).
pub fn set_capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

/// Whether message content is recorded on spans.
pub fn capture_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// Why a model was called: the `keel.call.purpose` attribute of a `chat` span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallPurpose {
    /// The agent's own model step.
    Agent,
    /// A summary written by summarization (compaction).
    Summary,
    /// Session memory folding evicted messages into its notes.
    Fold,
    /// An LLM choosing which tools to offer.
    ToolSelection,
    /// An LLM emulating a tool.
    ToolEmulation,
    /// A classifier choosing the model to route to.
    Routing,
}

impl CallPurpose {
    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            CallPurpose::Agent => "agent",
            CallPurpose::Summary => "summary",
            CallPurpose::Fold => "fold",
            CallPurpose::ToolSelection => "tool_selection",
            CallPurpose::ToolEmulation => "tool_emulation",
            CallPurpose::Routing => "routing",
        }
    }
}

thread_local! {
    static SCOPED_PURPOSE: Cell<Option<CallPurpose>> = const { Cell::new(None) };
}

/// A future whose model calls are labelled with a purpose (see [`with_purpose`]).
#[derive(Debug)]
pub struct WithPurpose<F> {
    purpose: CallPurpose,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for WithPurpose<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let previous = SCOPED_PURPOSE.with(|p| p.replace(Some(self.purpose)));
        let out = self.inner.as_mut().poll(cx);
        SCOPED_PURPOSE.with(|p| p.set(previous));
        out
    }
}

/// Runs `future` with every `chat` span it makes labelled `purpose`, whatever default
/// the code that calls the model gives: session memory's folds go through the same
/// summary caller as summarization's summaries. The label is set around each poll and
/// restored after it, so it follows the future across threads and never leaks into
/// other tasks.
pub fn with_purpose<F: Future>(purpose: CallPurpose, future: F) -> WithPurpose<F> {
    WithPurpose {
        purpose,
        inner: Box::pin(future),
    }
}

/// The `invoke_agent` span of one run on thread `thread_id`.
pub fn agent_span(thread_id: &str, run_id: &str, model: &ModelProfile) -> Span {
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = "invoke_agent keel",
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "keel",
        gen_ai.provider.name = %model.provider,
        gen_ai.request.model = %model.name,
        gen_ai.conversation.id = %thread_id,
        keel.run.id = %run_id,
        keel.model_steps = Empty,
        error.type = Empty,
    )
}

/// Records how a run ended on its `invoke_agent` span.
pub fn record_agent<E: std::fmt::Display>(
    span: &Span,
    model_steps: usize,
    outcome: Result<(), &E>,
) {
    if span.is_disabled() {
        return;
    }
    span.record("keel.model_steps", attribute_int(model_steps as u64));
    if let Err(e) = outcome {
        span.record("otel.status_code", "error");
        span.record("otel.status_description", e.to_string());
        span.record("error.type", "agent_error");
    }
}

/// The `chat` span of one model call, and the purpose it is labelled with.
#[derive(Debug)]
pub struct ChatSpan {
    span: Span,
    purpose: CallPurpose,
}

impl ChatSpan {
    /// Opens the span of a call of `profile`'s model with `request`. `default_purpose`
    /// labels it unless the call runs inside [`with_purpose`].
    pub fn new(
        profile: &ModelProfile,
        request: &ChatRequest<'_>,
        default_purpose: CallPurpose,
    ) -> Self {
        let span = tracing::info_span!(
            target: TARGET,
            "chat",
            otel.name = %format!("chat {}", profile.name),
            otel.kind = "client",
            otel.status_code = Empty,
            otel.status_description = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = %profile.provider,
            gen_ai.request.model = %profile.name,
            gen_ai.request.max_tokens = Empty,
            gen_ai.request.temperature = Empty,
            gen_ai.request.top_p = Empty,
            gen_ai.response.model = Empty,
            gen_ai.response.id = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            gen_ai.system_instructions = Empty,
            error.type = Empty,
            keel.call.purpose = Empty,
            keel.request.messages = attribute_int(request.messages.len() as u64),
            keel.request.tools = attribute_int(request.tools.len() as u64),
        );
        if span.is_disabled() {
            return ChatSpan {
                span,
                purpose: default_purpose,
            };
        }
        let purpose = SCOPED_PURPOSE.with(Cell::get).unwrap_or(default_purpose);
        span.record("keel.call.purpose", purpose.as_str());
        let settings = request.settings;
        if let Some(n) = settings.max_tokens {
            span.record("gen_ai.request.max_tokens", i64::from(n));
        }
        if let Some(t) = settings.temperature {
            span.record("gen_ai.request.temperature", f64::from(t));
        }
        if let Some(p) = settings.top_p {
            span.record("gen_ai.request.top_p", f64::from(p));
        }
        if capture_content() {
            if let Some(system) = request.system {
                span.record(
                    "gen_ai.system_instructions",
                    json!([{"type": "text", "content": system.text()}]).to_string(),
                );
            }
            let messages: Vec<Value> = request
                .messages
                .iter()
                .map(|m| message_json(m, None))
                .collect();
            span.record("gen_ai.input.messages", Value::Array(messages).to_string());
        }
        ChatSpan { span, purpose }
    }

    /// The span, to instrument the call with.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// Records a model call's answer (usage, finish reasons, response model) or its error
    /// on its `chat` span, and counts the call and its tokens.
    ///
    /// `gen_ai.response.finish_reasons` is the provider's `finish_reason` when it reported
    /// one, else what the answer shows: `tool_calls` when it called tools, `stop`
    /// otherwise. It is recorded as a JSON array of strings (`["stop"]`), which `keel-otel`
    /// exports as a string array attribute.
    pub fn record(&self, result: &Result<Message, ModelError>) {
        let span = &self.span;
        if span.is_disabled() {
            return;
        }
        let purpose = self.purpose.as_str();
        match result {
            Ok(message) => {
                let MessageBody::Ai(ai) = message.body() else {
                    return;
                };
                let reason = finish_reason(message);
                span.record(
                    "gen_ai.response.finish_reasons",
                    json!([reason]).to_string(),
                );
                if let Some(model) = ai.response_metadata.get("model").and_then(Value::as_str) {
                    span.record("gen_ai.response.model", model);
                }
                if let Some(id) = ai.response_metadata.get("id").and_then(Value::as_str) {
                    span.record("gen_ai.response.id", id);
                }
                if let Some(usage) = ai.usage {
                    span.record(
                        "gen_ai.usage.input_tokens",
                        attribute_int(usage.input_tokens),
                    );
                    span.record(
                        "gen_ai.usage.output_tokens",
                        attribute_int(usage.output_tokens),
                    );
                    count(
                        Counter::Tokens {
                            kind: "input",
                            purpose,
                        },
                        usage.input_tokens,
                    );
                    count(
                        Counter::Tokens {
                            kind: "output",
                            purpose,
                        },
                        usage.output_tokens,
                    );
                }
                if capture_content() {
                    span.record(
                        "gen_ai.output.messages",
                        json!([message_json(message, Some(&reason))]).to_string(),
                    );
                }
                count(
                    Counter::ModelCalls {
                        purpose,
                        error: None,
                    },
                    1,
                );
            }
            Err(e) => {
                let kind = error_kind(e);
                span.record("error.type", kind.as_str());
                span.record("otel.status_code", "error");
                span.record("otel.status_description", e.message.as_str());
                count(
                    Counter::ModelCalls {
                        purpose,
                        error: Some(&kind),
                    },
                    1,
                );
            }
        }
    }
}

/// `model.invoke(request)` inside a `chat` span: what middleware use for the model calls
/// they make themselves.
pub async fn invoke(
    model: &dyn ChatModel,
    request: ChatRequest<'_>,
    purpose: CallPurpose,
) -> Result<Message, ModelError> {
    use tracing::Instrument;
    let chat = ChatSpan::new(model.profile(), &request, purpose);
    let result = model.invoke(request).instrument(chat.span().clone()).await;
    chat.record(&result);
    result
}

/// The `execute_tool` span of one tool call.
pub fn tool_span(call: &ToolCall, description: Option<&str>) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = %format!("execute_tool {}", call.name),
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.id,
        gen_ai.tool.type = "function",
        gen_ai.tool.description = description,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
    );
    if !span.is_disabled() && capture_content() {
        span.record("gen_ai.tool.call.arguments", call.args.to_string());
    }
    span
}

/// Records a tool call's result message on its `execute_tool` span.
pub fn record_tool(span: &Span, result: &Message) {
    if span.is_disabled() {
        return;
    }
    if let MessageBody::Tool(tool) = result.body()
        && tool.status == ToolStatus::Error
    {
        span.record("error.type", "tool_error");
        span.record("otel.status_code", "error");
        span.record("otel.status_description", result.text().as_ref());
    }
    if capture_content() {
        span.record("gen_ai.tool.call.result", result.text().as_ref());
    }
}

/// `n` as a span attribute: OpenTelemetry integers are signed 64-bit, and
/// `tracing-opentelemetry` records a `u64` field as text.
pub fn attribute_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A counter [`count`] adds to.
#[derive(Clone, Copy, Debug)]
pub enum Counter<'a> {
    /// `keel.model.calls`: model calls, by purpose (and error type when one failed).
    ModelCalls {
        /// The `keel.call.purpose` of the call.
        purpose: &'static str,
        /// The `error.type` of a failed call.
        error: Option<&'a str>,
    },
    /// `keel.model.tokens`: tokens the provider reported, by `gen_ai.token.type`.
    Tokens {
        /// `input` or `output`.
        kind: &'static str,
        /// The `keel.call.purpose` of the call.
        purpose: &'static str,
    },
    /// `keel.compaction.cache_hits`: compactions served from the summary cache.
    CacheHits,
    /// `keel.memory.folds`: session memory folds.
    Folds,
    /// `keel.retries`: retried model or tool calls, by the retrying middleware.
    Retries {
        /// The middleware's name.
        middleware: &'a str,
    },
    /// `keel.pii.redactions`: PII matches redacted, masked or hashed.
    Redactions {
        /// The middleware's name.
        middleware: &'a str,
    },
}

/// Adds `n` to a counter, as a `tracing` event on [`METRICS_TARGET`] whose
/// `monotonic_counter.*` field `keel-otel`'s metrics layer reads. Free without one.
pub fn count(counter: Counter<'_>, n: u64) {
    match counter {
        Counter::ModelCalls {
            purpose,
            error: None,
        } => tracing::event!(target: METRICS_TARGET, tracing::Level::INFO,
            monotonic_counter.keel.model.calls = n,
            keel.call.purpose = purpose,
        ),
        Counter::ModelCalls {
            purpose,
            error: Some(error),
        } => tracing::event!(target: METRICS_TARGET, tracing::Level::INFO,
            monotonic_counter.keel.model.calls = n,
            keel.call.purpose = purpose,
            error.type = error,
        ),
        Counter::Tokens { kind, purpose } => {
            tracing::event!(target: METRICS_TARGET, tracing::Level::INFO,
                monotonic_counter.keel.model.tokens = n,
                gen_ai.token.type = kind,
                keel.call.purpose = purpose,
            )
        }
        Counter::CacheHits => {
            tracing::event!(target: METRICS_TARGET, tracing::Level::INFO, monotonic_counter.keel.compaction.cache_hits = n)
        }
        Counter::Folds => {
            tracing::event!(target: METRICS_TARGET, tracing::Level::INFO, monotonic_counter.keel.memory.folds = n)
        }
        Counter::Retries { middleware } => {
            tracing::event!(target: METRICS_TARGET, tracing::Level::INFO,
                monotonic_counter.keel.retries = n,
                keel.middleware = middleware,
            )
        }
        Counter::Redactions { middleware } => {
            tracing::event!(target: METRICS_TARGET, tracing::Level::INFO,
                monotonic_counter.keel.pii.redactions = n,
                keel.middleware = middleware,
            )
        }
    }
}

fn error_kind(e: &ModelError) -> String {
    match serde_json::to_value(e.kind) {
        Ok(Value::String(s)) => s,
        _ => format!("{:?}", e.kind),
    }
}

fn finish_reason(message: &Message) -> String {
    if let MessageBody::Ai(ai) = message.body()
        && let Some(reason) = ai
            .response_metadata
            .get("finish_reason")
            .and_then(Value::as_str)
    {
        return reason.to_owned();
    }
    if message.tool_calls().is_empty() {
        "stop".to_owned()
    } else {
        "tool_calls".to_owned()
    }
}

/// A message in the conventions' JSON shape: `{"role", "parts": [...]}`.
fn message_json(message: &Message, finish_reason: Option<&str>) -> Value {
    let mut parts = Vec::new();
    let text = message.text();
    if !text.is_empty() {
        match message.body() {
            MessageBody::Tool(tool) => parts.push(json!({
                "type": "tool_call_response",
                "id": tool.tool_call_id,
                "response": text,
            })),
            _ => parts.push(json!({"type": "text", "content": text})),
        }
    }
    for call in message.tool_calls() {
        parts.push(json!({
            "type": "tool_call",
            "id": call.id,
            "name": call.name,
            "arguments": call.args,
        }));
    }
    let mut out = json!({"role": message.role().as_str(), "parts": parts});
    if let Some(reason) = finish_reason {
        out["finish_reason"] = json!(reason);
    }
    out
}
