//! [`GenAiExporter`]: the last touches before spans leave the process.

use std::time::Duration;

use opentelemetry::{Array, Key, KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// Attributes `keel_core::telemetry` records as JSON arrays of strings (a `tracing`
/// field holds one scalar) and the conventions define as string arrays.
const STRING_ARRAYS: &[&str] = &["gen_ai.response.finish_reasons"];

/// Wraps an exporter: turns the JSON-array attributes back into string arrays, and adds
/// the OpenInference attributes (<https://github.com/Arize-ai/openinference/blob/main/spec/semantic_conventions.md>)
/// that OpenInference-based UIs such as Arize Phoenix use to show span kinds, models,
/// token counts, sessions and content: `openinference.span.kind` (`AGENT`, `LLM`,
/// `TOOL`, `CHAIN`), `llm.model_name`, `llm.provider`, `llm.token_count.*`,
/// `tool.name`, `session.id`, and `input.value` / `output.value` when content is
/// captured. The GenAI attributes are kept as they are.
#[derive(Debug)]
pub struct GenAiExporter<E> {
    inner: E,
}

impl<E> GenAiExporter<E> {
    /// Wraps `inner`.
    pub fn new(inner: E) -> Self {
        GenAiExporter { inner }
    }
}

impl<E: SpanExporter> SpanExporter for GenAiExporter<E> {
    fn export(&self, mut batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        for span in &mut batch {
            adapt(&mut span.attributes);
        }
        self.inner.export(batch)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

fn get<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn int(value: Option<&Value>) -> Option<i64> {
    match value {
        Some(Value::I64(n)) => Some(*n),
        _ => None,
    }
}

/// One span's attributes, adapted in place.
fn adapt(attributes: &mut Vec<KeyValue>) {
    for kv in attributes.iter_mut() {
        if STRING_ARRAYS.contains(&kv.key.as_str())
            && let Value::String(text) = &kv.value
            && let Ok(items) = serde_json::from_str::<Vec<String>>(text.as_str())
        {
            kv.value = Value::Array(Array::String(
                items.into_iter().map(StringValue::from).collect(),
            ));
        }
    }
    let Some(operation) = get(attributes, "gen_ai.operation.name").map(Value::as_str) else {
        if get(attributes, "keel.compaction.action").is_some() {
            attributes.push(KeyValue::new("openinference.span.kind", "CHAIN"));
        }
        return;
    };
    let mut extra = Vec::new();
    let copy = |from: &str, to: &'static str, extra: &mut Vec<KeyValue>| {
        if let Some(v) = get(attributes, from) {
            extra.push(KeyValue::new(Key::from_static_str(to), v.clone()));
        }
    };
    match operation.as_ref() {
        "chat" => {
            extra.push(KeyValue::new("openinference.span.kind", "LLM"));
            copy("gen_ai.request.model", "llm.model_name", &mut extra);
            copy("gen_ai.provider.name", "llm.provider", &mut extra);
            let input = int(get(attributes, "gen_ai.usage.input_tokens"));
            let output = int(get(attributes, "gen_ai.usage.output_tokens"));
            if let Some(n) = input {
                extra.push(KeyValue::new("llm.token_count.prompt", n));
            }
            if let Some(n) = output {
                extra.push(KeyValue::new("llm.token_count.completion", n));
            }
            if let (Some(i), Some(o)) = (input, output) {
                extra.push(KeyValue::new("llm.token_count.total", i + o));
            }
            copy("gen_ai.input.messages", "input.value", &mut extra);
            copy("gen_ai.output.messages", "output.value", &mut extra);
        }
        "execute_tool" => {
            extra.push(KeyValue::new("openinference.span.kind", "TOOL"));
            copy("gen_ai.tool.name", "tool.name", &mut extra);
            copy("gen_ai.tool.description", "tool.description", &mut extra);
            copy("gen_ai.tool.call.arguments", "input.value", &mut extra);
            copy("gen_ai.tool.call.result", "output.value", &mut extra);
        }
        "invoke_agent" => {
            extra.push(KeyValue::new("openinference.span.kind", "AGENT"));
            copy("gen_ai.conversation.id", "session.id", &mut extra);
            copy("gen_ai.request.model", "llm.model_name", &mut extra);
        }
        _ => {}
    }
    for (key, mime) in [
        ("input.value", "input.mime_type"),
        ("output.value", "output.mime_type"),
    ] {
        if extra.iter().any(|kv| kv.key.as_str() == key) {
            let json = operation == "chat";
            extra.push(KeyValue::new(
                Key::from_static_str(mime),
                if json {
                    "application/json"
                } else {
                    "text/plain"
                },
            ));
        }
    }
    attributes.extend(extra);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_become_a_string_array_and_chat_spans_get_openinference_names() {
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.request.model", "m"),
            KeyValue::new("gen_ai.response.finish_reasons", r#"["tool_calls"]"#),
            KeyValue::new("gen_ai.usage.input_tokens", 12_i64),
            KeyValue::new("gen_ai.usage.output_tokens", 3_i64),
        ];
        adapt(&mut attributes);
        assert_eq!(
            get(&attributes, "gen_ai.response.finish_reasons"),
            Some(&Value::Array(Array::String(vec!["tool_calls".into()])))
        );
        assert_eq!(
            get(&attributes, "openinference.span.kind"),
            Some(&"LLM".into())
        );
        assert_eq!(get(&attributes, "llm.model_name"), Some(&"m".into()));
        assert_eq!(int(get(&attributes, "llm.token_count.total")), Some(15));
        assert!(
            get(&attributes, "input.value").is_none(),
            "no content unless captured"
        );
    }

    #[test]
    fn spans_of_other_libraries_are_left_alone() {
        let mut attributes = vec![KeyValue::new("http.method", "GET")];
        adapt(&mut attributes);
        assert_eq!(attributes, vec![KeyValue::new("http.method", "GET")]);
    }
}
