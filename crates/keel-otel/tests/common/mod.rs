//! One agent run (a retried model call, a tool call, a compaction with a summary call,
//! a PII redaction) through the real middleware stack, exported to in-memory exporters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)] // test code: failures should be loud

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_core::message::{Content, Message, MessageBody, ToolCall, Usage};
use keel_core::model::{ChatModel, ModelError, ModelErrorKind, ModelProfile};
use keel_middleware::stack::{ModelRegistry, StackLoader};
use keel_otel::Telemetry;
use keel_summarization::stack::SummarizationEntry;
use keel_testkit::{FnTool, ScriptedModel};
use opentelemetry::Value;
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tracing_subscriber::layer::SubscriberExt;

const STACK: &str = "\
model: weather-model
system_prompt: You answer weather questions.
middleware:
  - pii: {pii_type: email, strategy: redact, apply_to_input: true}
  - model_retry: {max_retries: 2, initial_delay: 0}
  - summarization:
      trigger: {type: messages, value: 6}
      keep: {type: messages, value: 2}
";

fn with_usage(mut message: Message, input: u64, output: u64) -> Message {
    if let MessageBody::Ai(ai) = message.body_mut() {
        ai.usage = Some(Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            cached_input_tokens: 0,
            cache_creation_input_tokens: 0,
        });
    }
    message
}

/// Summaries for internal calls; for the agent: a server error first, then a tool call,
/// then the answer.
fn model() -> Arc<ScriptedModel> {
    let agent_calls = AtomicUsize::new(0);
    ScriptedModel::from_fn(move |request| {
        if request.internal {
            return Ok(with_usage(Message::ai("- the user lives in Paris"), 40, 8));
        }
        match agent_calls.fetch_add(1, Ordering::Relaxed) {
            0 => Err(ModelError::new(ModelErrorKind::Server, "upstream 503")),
            _ if request.messages.last().is_some_and(Message::is_tool) => {
                Ok(with_usage(Message::ai("It is sunny in Paris."), 60, 7))
            }
            _ => Ok(with_usage(
                Message::ai("").with_tool_calls(vec![ToolCall::new(
                    "call_1",
                    "weather",
                    serde_json::json!({"city": "Paris"}),
                )]),
                50,
                5,
            )),
        }
    })
    .with_profile(ModelProfile::new("weather-model", "scripted"))
    .shared()
}

fn thread() -> Vec<Message> {
    vec![
        Message::human("Hi, I live in Paris."),
        Message::ai("Nice to meet you."),
        Message::human("I like walking."),
        Message::ai("Good for you."),
        Message::human("I also cycle."),
        Message::ai("Great."),
        Message::human("What is the weather today? Mail me at ada@example.com"),
    ]
}

pub struct Exported {
    pub spans: Vec<SpanData>,
    pub counters: HashMap<String, u64>,
}

pub fn run_once() -> Exported {
    let spans = InMemorySpanExporter::default();
    let metrics = InMemoryMetricExporter::default();
    let telemetry = Telemetry::from_exporters("keel-test", spans.clone(), Some(metrics.clone()));
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let model = model();
    let shared: Arc<dyn ChatModel> = model.clone();
    let models: Arc<dyn ModelRegistry> = {
        let m = shared.clone();
        Arc::new(move |_: &str| Some(m.clone()))
    };
    let stack = StackLoader::builtin()
        .with(SummarizationEntry)
        .load_str(STACK)
        .unwrap();
    let agent = stack
        .agent_builder(shared, models)
        .unwrap()
        .tool(FnTool::new("weather", |_| {
            Ok(Content::Text("sunny, 21 C".into()))
        }))
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let output = tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(agent.invoke("thread-7", thread()))
    })
    .unwrap();
    assert_eq!(
        output.state.messages.last().map(|m| m.text().into_owned()),
        Some("It is sunny in Paris.".to_owned())
    );
    telemetry.flush().unwrap();
    let mut counters = HashMap::new();
    for resource in metrics.get_finished_metrics().unwrap() {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics() {
                if let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() {
                    let total: u64 = sum.data_points().map(|p| p.value()).sum();
                    *counters.entry(metric.name().to_owned()).or_default() += total;
                }
            }
        }
    }
    let spans = spans.get_finished_spans().unwrap();
    telemetry.shutdown().unwrap();
    Exported { spans, counters }
}

pub fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

pub fn text(span: &SpanData, key: &str) -> String {
    attr(span, key)
        .map(|v| v.as_str().into_owned())
        .unwrap_or_else(|| panic!("span {:?} has no {key}", span.name))
}

pub fn int(span: &SpanData, key: &str) -> i64 {
    match attr(span, key) {
        Some(Value::I64(n)) => *n,
        other => panic!("span {:?}: {key} = {other:?}", span.name),
    }
}

pub fn children<'a>(spans: &'a [SpanData], parent: &SpanData) -> Vec<&'a SpanData> {
    let mut out: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_context.span_id())
        .collect();
    out.sort_by_key(|s| s.start_time);
    out
}
