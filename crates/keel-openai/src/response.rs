//! Tolerant decoding of chat-completion answers and stream chunks.
//!
//! Servers differ in what they leave out or add: empty `finish_reason` strings, missing
//! ids, `content: null` next to tool calls, arguments as an object instead of JSON text,
//! `reasoning_content`, usage on every chunk or none at all. Decoding reads what is there
//! from a `serde_json::Value` and fails only when the answer cannot mean anything, with a
//! [`ModelErrorKind::MalformedResponse`] that carries the raw text.

use std::collections::BTreeSet;

use keel_core::message::{AiMessage, ToolCall, Usage, new_id};
use keel_core::model::{ChatChunk, ModelError, ModelErrorKind};
use serde_json::{Map, Value};

use crate::error::{classify_error_object, is_error_object};

/// Facts every response's metadata carries.
pub(crate) struct CallFacts<'a> {
    pub(crate) provider: &'a str,
    pub(crate) model: &'a str,
    pub(crate) internal: bool,
}

fn malformed(what: impl Into<String>, raw: &Value) -> ModelError {
    ModelError::new(ModelErrorKind::MalformedResponse, what).with_raw(raw.to_string())
}

/// Text of a `content` field: a string, `null`, or a list of parts whose text is joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn non_empty_str(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Tool-call arguments as JSON text: most servers send a string, some an object.
fn arguments_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    let num = |k: &str| u.get(k).and_then(Value::as_u64);
    let input = num("prompt_tokens").or_else(|| num("input_tokens"))?;
    let output = num("completion_tokens")
        .or_else(|| num("output_tokens"))
        .unwrap_or(0);
    // OpenAI (and vLLM, LiteLLM) report cache reads in `prompt_tokens_details`, the
    // Responses shape in `input_tokens_details`, DeepSeek as `prompt_cache_hit_tokens`,
    // Anthropic's own field name survives some gateways as `cache_read_input_tokens`.
    let detail = |k: &str| {
        u.get(k)
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
    };
    let cached = detail("prompt_tokens_details")
        .or_else(|| detail("input_tokens_details"))
        .or_else(|| num("prompt_cache_hit_tokens"))
        .or_else(|| num("cache_read_input_tokens"))
        .unwrap_or(0);
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: num("total_tokens").unwrap_or(input + output),
        cached_input_tokens: cached,
        // Gateways relaying Anthropic (LiteLLM) keep its cache-write count.
        cache_creation_input_tokens: num("cache_creation_input_tokens").unwrap_or(0),
    })
}

fn base_metadata(facts: &CallFacts<'_>, v: &Value) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("provider".into(), Value::String(facts.provider.to_owned()));
    let model = non_empty_str(v.get("model")).unwrap_or(facts.model);
    meta.insert("model".into(), Value::String(model.to_owned()));
    if let Some(id) = non_empty_str(v.get("id")) {
        meta.insert("id".into(), Value::String(id.to_owned()));
    }
    if let Some(fp) = non_empty_str(v.get("system_fingerprint")) {
        meta.insert("system_fingerprint".into(), Value::String(fp.to_owned()));
    }
    if facts.internal {
        meta.insert("internal".into(), Value::Bool(true));
    }
    meta
}

/// Decodes a non-streaming answer into an AI message.
pub(crate) fn decode_completion(v: &Value, facts: &CallFacts<'_>) -> Result<AiMessage, ModelError> {
    let raw = || v.to_string();
    if is_error_object(v) {
        return Err(classify_error_object(v, &raw()));
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| {
            // Prefer index 0; servers that omit `index` list it first anyway.
            c.iter()
                .find(|c| c.get("index").and_then(Value::as_u64) == Some(0))
                .or_else(|| c.first())
        })
        .ok_or_else(|| malformed("the answer has no choices", v))?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| malformed("the first choice has no message object", v))?;

    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in calls.iter().enumerate() {
            let function = call.get("function").unwrap_or(&Value::Null);
            let name = non_empty_str(function.get("name"))
                .ok_or_else(|| malformed(format!("tool call #{i} has no function name"), v))?;
            let text = arguments_text(function.get("arguments"));
            let args = if text.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(&text).map_err(|e| {
                    ModelError::new(
                        ModelErrorKind::MalformedResponse,
                        format!("tool call #{i} ({name}) has invalid JSON arguments: {e}"),
                    )
                    .with_raw(raw())
                })?
            };
            let id = non_empty_str(call.get("id"))
                .map_or_else(|| format!("call_{}", new_id()), str::to_owned);
            tool_calls.push(ToolCall::new(id, name, args));
        }
    }

    let mut meta = base_metadata(facts, v);
    if let Some(reason) = non_empty_str(choice.get("finish_reason")) {
        meta.insert("finish_reason".into(), Value::String(reason.to_owned()));
    }
    for key in ["refusal", "reasoning_content"] {
        if let Some(text) = non_empty_str(message.get(key)) {
            meta.insert(key.into(), Value::String(text.to_owned()));
        }
    }
    let usage = usage_of(v);
    meta.insert("usage_reported".into(), Value::Bool(usage.is_some()));

    Ok(AiMessage {
        content: content_text(message.get("content")).into(),
        tool_calls,
        id: new_id(),
        usage,
        response_metadata: meta,
        ..Default::default()
    })
}

/// Turns stream events into [`ChatChunk`]s: text and tool-call fragments as they come,
/// then usage and one metadata chunk when the stream ends.
#[derive(Default)]
pub(crate) struct StreamDecoder {
    provider: String,
    model: String,
    id: Option<String>,
    server_model: Option<String>,
    system_fingerprint: Option<String>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    named: BTreeSet<usize>,
    /// Events decoded so far.
    events: usize,
}

impl StreamDecoder {
    /// True when the stream has carried no event at all.
    pub(crate) fn is_untouched(&self) -> bool {
        self.events == 0
    }

    pub(crate) fn new(provider: &str, model: &str) -> Self {
        StreamDecoder {
            provider: provider.to_owned(),
            model: model.to_owned(),
            ..Default::default()
        }
    }

    /// Decodes one event's JSON.
    pub(crate) fn push(&mut self, v: &Value) -> Result<Vec<ChatChunk>, ModelError> {
        self.events += 1;
        if is_error_object(v) {
            return Err(classify_error_object(v, &v.to_string()));
        }
        if !v.is_object() {
            return Err(malformed("a stream event is not a JSON object", v));
        }
        if let Some(id) = non_empty_str(v.get("id")) {
            self.id.get_or_insert_with(|| id.to_owned());
        }
        if let Some(m) = non_empty_str(v.get("model")) {
            self.server_model.get_or_insert_with(|| m.to_owned());
        }
        if let Some(fp) = non_empty_str(v.get("system_fingerprint")) {
            self.system_fingerprint = Some(fp.to_owned());
        }
        // Some servers repeat usage on every chunk; the last one is the total.
        if let Some(u) = usage_of(v) {
            self.usage = Some(u);
        }
        let mut out = Vec::new();
        let Some(choices) = v.get("choices").and_then(Value::as_array) else {
            return Ok(out);
        };
        for choice in choices {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(reason) = non_empty_str(choice.get("finish_reason")) {
                self.finish_reason = Some(reason.to_owned());
            }
            let Some(delta) = choice.get("delta").filter(|d| d.is_object()) else {
                continue;
            };
            let text = content_text(delta.get("content"));
            if !text.is_empty() {
                out.push(ChatChunk::Text { text });
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (pos, call) in calls.iter().enumerate() {
                    out.push(self.tool_fragment(pos, call)?);
                }
            }
        }
        Ok(out)
    }

    fn tool_fragment(&mut self, pos: usize, call: &Value) -> Result<ChatChunk, ModelError> {
        let index = match call.get("index") {
            None | Some(Value::Null) => pos,
            Some(i) => i
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| malformed("a tool-call fragment has a non-numeric index", call))?,
        };
        let function = call.get("function").unwrap_or(&Value::Null);
        // The aggregator appends names, so a server that repeats the name on every
        // fragment would otherwise produce `lookuplookup`.
        let name = non_empty_str(function.get("name"))
            .filter(|_| self.named.insert(index))
            .map(str::to_owned);
        Ok(ChatChunk::ToolCall {
            index,
            id: non_empty_str(call.get("id")).map(str::to_owned),
            name,
            args: arguments_text(function.get("arguments")),
        })
    }

    /// The closing chunks: usage when the server reported it, then the metadata.
    pub(crate) fn finish(&mut self) -> Vec<ChatChunk> {
        let this = std::mem::take(self);
        let mut out = Vec::new();
        if let Some(usage) = this.usage {
            out.push(ChatChunk::Usage { usage });
        }
        let mut meta = Map::new();
        meta.insert("provider".into(), Value::String(this.provider));
        meta.insert(
            "model".into(),
            Value::String(this.server_model.unwrap_or(this.model)),
        );
        if let Some(id) = this.id {
            meta.insert("id".into(), Value::String(id));
        }
        if let Some(fp) = this.system_fingerprint {
            meta.insert("system_fingerprint".into(), Value::String(fp));
        }
        if let Some(reason) = this.finish_reason {
            meta.insert("finish_reason".into(), Value::String(reason));
        }
        meta.insert("usage_reported".into(), Value::Bool(this.usage.is_some()));
        out.push(ChatChunk::Metadata { metadata: meta });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FACTS: CallFacts<'static> = CallFacts {
        provider: "p",
        model: "m",
        internal: false,
    };

    #[test]
    fn null_content_with_object_arguments_and_missing_ids() {
        let raw = r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"ls","arguments":{"dir":"/"}}}]},"finish_reason":""}]}"#;
        let m = decode_completion(&serde_json::from_str(raw).unwrap(), &FACTS).unwrap();
        assert_eq!(m.tool_calls[0].args, json!({"dir": "/"}));
        assert!(m.tool_calls[0].id.starts_with("call_"));
        assert!(m.content.is_empty());
        assert_eq!(m.response_metadata["usage_reported"], json!(false));
        assert!(m.response_metadata.get("finish_reason").is_none());
        assert_eq!(m.response_metadata["model"], json!("m"));
    }

    #[test]
    fn unusable_answers_are_typed_errors_with_raw_text() {
        for raw in [
            "{}",
            r#"{"choices":[]}"#,
            r#"{"choices":[{"message":"x"}]}"#,
            "[1]",
            "null",
        ] {
            let err = decode_completion(&serde_json::from_str(raw).unwrap(), &FACTS).unwrap_err();
            assert_eq!(err.kind, ModelErrorKind::MalformedResponse, "{raw}");
            assert!(err.raw.is_some());
        }
        let bad_args = r#"{"choices":[{"message":{"tool_calls":[{"id":"a","function":{"name":"ls","arguments":"{nope"}}]}}]}"#;
        let v: Value = serde_json::from_str(bad_args).unwrap();
        let err = decode_completion(&v, &FACTS).unwrap_err();
        assert_eq!(err.kind, ModelErrorKind::MalformedResponse);
        assert_eq!(err.raw, Some(v.to_string()));
    }

    #[test]
    fn repeated_names_are_sent_once() {
        let mut d = StreamDecoder::new("p", "m");
        let ev = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"ls","arguments":"{"}}]}}]});
        let first = d.push(&ev).unwrap();
        let second = d.push(&ev).unwrap();
        assert!(matches!(&first[0], ChatChunk::ToolCall { name: Some(n), .. } if n == "ls"));
        assert!(matches!(&second[0], ChatChunk::ToolCall { name: None, .. }));
    }
}
