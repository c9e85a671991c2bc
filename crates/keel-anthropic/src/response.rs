//! Decoding Messages API answers and stream events into Keel messages and chunks.
//!
//! An answer is a list of content blocks (<https://docs.anthropic.com/en/api/messages>):
//! `text` becomes the message's text, `tool_use` its tool calls, and every other block
//! (`thinking`, `redacted_thinking`, server tool blocks) is kept verbatim in the
//! content list, in its place, so the next request sends it back unchanged (the API
//! checks thinking signatures). A message with only text keeps plain-string content.

use keel_core::message::{
    AiMessage, Content, ContentPart, Message, TextPart, ToolCall, Usage, new_id,
};
use keel_core::model::{ChatChunk, ModelError, ModelErrorKind};
use serde_json::{Map, Value, json};

use crate::error::{classify_error_object, is_error_object};

/// Facts every response's metadata carries.
pub(crate) struct CallFacts<'a> {
    pub(crate) provider: &'a str,
    pub(crate) model: &'a str,
    pub(crate) internal: bool,
    /// The forced tool standing for a `response_format`: its input is the answer text.
    pub(crate) structured_tool: Option<&'a str>,
}

fn malformed(what: impl Into<String>, raw: &Value) -> ModelError {
    ModelError::new(ModelErrorKind::MalformedResponse, what).with_raw(raw.to_string())
}

/// Keel's `finish_reason` for a `stop_reason` (the raw one is kept as `stop_reason`).
pub(crate) fn finish_reason(stop_reason: &str) -> &str {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        other => other,
    }
}

/// Keel's usage from the API's: `input_tokens` there excludes the cached and the
/// cache-written tokens, Keel's counts the whole prompt.
pub(crate) fn usage_from(u: &Value) -> Option<Usage> {
    let num = |k: &str| u.get(k).and_then(Value::as_u64);
    let uncached = num("input_tokens")?;
    let written = num("cache_creation_input_tokens").unwrap_or(0);
    let read = num("cache_read_input_tokens").unwrap_or(0);
    let output = num("output_tokens").unwrap_or(0);
    let input = uncached + written + read;
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        cached_input_tokens: read,
        cache_creation_input_tokens: written,
    })
}

/// The message the blocks of one answer make.
fn message_from_blocks(
    blocks: Vec<Value>,
    facts: &CallFacts<'_>,
    mut meta: Map<String, Value>,
    usage: Option<Usage>,
    raw: &Value,
) -> Result<AiMessage, ModelError> {
    let mut parts: Vec<ContentPart> = Vec::new();
    let mut tool_calls = Vec::new();
    let mut plain = true;
    for (i, block) in blocks.into_iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let Value::Object(mut o) = block else {
                    continue;
                };
                let text = match o.remove("text") {
                    Some(Value::String(s)) => s,
                    _ => {
                        return Err(malformed(
                            format!("content block #{i} is text without a text"),
                            raw,
                        ));
                    }
                };
                o.remove("type");
                plain &= o.is_empty();
                let mut part = TextPart::new(text);
                part.extra = o;
                parts.push(ContentPart::Text(part));
            }
            Some("tool_use") => {
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| malformed(format!("tool_use block #{i} has no name"), raw))?;
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                if Some(name) == facts.structured_tool {
                    // The forced tool of a `response_format`: its input is the answer.
                    parts.push(ContentPart::Text(TextPart::new(input.to_string())));
                    continue;
                }
                let id = block
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map_or_else(|| format!("toolu_{}", new_id()), str::to_owned);
                tool_calls.push(ToolCall::new(id, name, input));
            }
            Some(_) => {
                plain = false;
                parts.push(ContentPart::Other(block));
            }
            None => return Err(malformed(format!("content block #{i} has no type"), raw)),
        }
    }
    let content = if plain {
        Content::Text(
            parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect(),
        )
    } else {
        Content::Parts(parts)
    };
    meta.insert("usage_reported".into(), Value::Bool(usage.is_some()));
    if facts.internal {
        meta.insert("internal".into(), Value::Bool(true));
    }
    Ok(AiMessage {
        content,
        tool_calls,
        id: new_id(),
        usage,
        response_metadata: meta,
        ..Default::default()
    })
}

fn put_str(meta: &mut Map<String, Value>, key: &str, v: Option<&Value>) {
    if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
        meta.insert(key.into(), json!(s));
    }
}

fn base_metadata(facts: &CallFacts<'_>, message: &Value) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("provider".into(), json!(facts.provider));
    let model = message
        .get("model")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(facts.model);
    meta.insert("model".into(), json!(model));
    put_str(&mut meta, "id", message.get("id"));
    meta
}

fn stop_metadata(
    meta: &mut Map<String, Value>,
    stop_reason: Option<&Value>,
    stop_sequence: Option<&Value>,
) {
    if let Some(reason) = stop_reason
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        meta.insert("stop_reason".into(), json!(reason));
        meta.insert("finish_reason".into(), json!(finish_reason(reason)));
    }
    put_str(meta, "stop_sequence", stop_sequence);
}

/// Decodes a non-streaming answer into an AI message.
pub(crate) fn decode_message(v: &Value, facts: &CallFacts<'_>) -> Result<AiMessage, ModelError> {
    if is_error_object(v) {
        return Err(classify_error_object(v, &v.to_string()));
    }
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("the answer has no content list", v))?
        .clone();
    let mut meta = base_metadata(facts, v);
    stop_metadata(&mut meta, v.get("stop_reason"), v.get("stop_sequence"));
    let usage = v.get("usage").and_then(usage_from);
    message_from_blocks(blocks, facts, meta, usage, v)
}

/// A content block being streamed.
struct OpenBlock {
    /// The block as `content_block_start` gave it, completed by the deltas.
    block: Value,
    /// Tool input JSON text, for `tool_use` blocks.
    json: String,
    /// The tool-call chunk index, for `tool_use` blocks other than the structured one.
    call_index: Option<usize>,
}

/// Turns stream events into [`ChatChunk`]s: text and tool-call fragments as they come,
/// then usage, metadata and the complete message (which carries the thinking blocks and
/// signatures the fragments cannot) at `message_stop`.
pub(crate) struct StreamDecoder {
    provider: String,
    model: String,
    structured_tool: Option<String>,
    message: Value,
    usage: Map<String, Value>,
    blocks: Vec<Option<OpenBlock>>,
    done_blocks: Vec<(usize, Value)>,
    calls: usize,
    stop_reason: Option<Value>,
    stop_sequence: Option<Value>,
    events: usize,
    stopped: bool,
}

impl StreamDecoder {
    pub(crate) fn new(provider: &str, model: &str, structured_tool: Option<String>) -> Self {
        StreamDecoder {
            provider: provider.to_owned(),
            model: model.to_owned(),
            structured_tool,
            message: Value::Null,
            usage: Map::new(),
            blocks: Vec::new(),
            done_blocks: Vec::new(),
            calls: 0,
            stop_reason: None,
            stop_sequence: None,
            events: 0,
            stopped: false,
        }
    }

    /// True when the stream has carried no event at all.
    pub(crate) fn is_untouched(&self) -> bool {
        self.events == 0
    }

    /// True once `message_stop` arrived.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Decodes one event (its SSE name and data).
    pub(crate) fn push(&mut self, event: &str, data: &str) -> Result<Vec<ChatChunk>, ModelError> {
        self.events += 1;
        let v: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) if event == "error" => {
                // A proxy's error frame in plain text.
                return Err(classify_error_object(
                    &json!({"error": {"message": data.trim()}}),
                    data,
                )
                .with_raw(format!("{e}: {data}")));
            }
            Err(e) => {
                return Err(ModelError::new(
                    ModelErrorKind::MalformedResponse,
                    format!("stream event {event:?} is not valid JSON: {e}"),
                )
                .with_raw(data));
            }
        };
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event)
            .to_owned();
        if kind == "error" || event == "error" || is_error_object(&v) {
            return Err(classify_error_object(&v, data));
        }
        let mut out = Vec::new();
        match kind.as_str() {
            "message_start" => {
                let message = v.get("message").cloned().unwrap_or(Value::Null);
                if let Some(Value::Object(u)) = message.get("usage") {
                    self.usage.extend(u.clone());
                }
                self.message = message;
            }
            "content_block_start" => {
                let index = self.index(&v)?;
                let block = v
                    .get("content_block")
                    .filter(|b| b.is_object())
                    .cloned()
                    .ok_or_else(|| malformed("content_block_start without a content_block", &v))?;
                let mut open = OpenBlock {
                    block,
                    json: String::new(),
                    call_index: None,
                };
                match open.block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(text) = open
                            .block
                            .get("text")
                            .and_then(Value::as_str)
                            .filter(|t| !t.is_empty())
                        {
                            out.push(ChatChunk::Text {
                                text: text.to_owned(),
                            });
                        }
                    }
                    Some("tool_use") => {
                        let name = open
                            .block
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        if self.structured_tool.as_deref() != Some(name) {
                            let call = self.calls;
                            self.calls += 1;
                            open.call_index = Some(call);
                            out.push(ChatChunk::ToolCall {
                                index: call,
                                id: open
                                    .block
                                    .get("id")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned),
                                name: Some(name.to_owned()),
                                args: String::new(),
                            });
                        }
                    }
                    _ => {}
                }
                if self.blocks.len() <= index {
                    self.blocks.resize_with(index + 1, || None);
                }
                self.blocks[index] = Some(open);
            }
            "content_block_delta" => {
                let index = self.index(&v)?;
                let delta = v.get("delta").cloned().unwrap_or(Value::Null);
                let structured = self.structured_tool.is_some();
                let open = self
                    .blocks
                    .get_mut(index)
                    .and_then(Option::as_mut)
                    .ok_or_else(|| {
                        malformed(
                            format!("a delta for content block {index}, which was not started"),
                            &v,
                        )
                    })?;
                let str_of = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default();
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = str_of("text");
                        append(&mut open.block, "text", text);
                        if !text.is_empty() {
                            out.push(ChatChunk::Text {
                                text: text.to_owned(),
                            });
                        }
                    }
                    Some("input_json_delta") => {
                        let part = str_of("partial_json");
                        open.json.push_str(part);
                        match open.call_index {
                            Some(index) => out.push(ChatChunk::ToolCall {
                                index,
                                id: None,
                                name: None,
                                args: part.to_owned(),
                            }),
                            // The structured answer streams as its JSON text.
                            None if structured && !part.is_empty() => {
                                out.push(ChatChunk::Text {
                                    text: part.to_owned(),
                                });
                            }
                            None => {}
                        }
                    }
                    Some("thinking_delta") => {
                        append(&mut open.block, "thinking", str_of("thinking"))
                    }
                    Some("signature_delta") => {
                        append(&mut open.block, "signature", str_of("signature"))
                    }
                    Some("citations_delta") => {
                        if let (Some(c), Value::Object(b)) =
                            (delta.get("citation"), &mut open.block)
                        {
                            let list = b.entry("citations").or_insert_with(|| json!([]));
                            if let Value::Array(items) = list {
                                items.push(c.clone());
                            } else {
                                *list = json!([c]);
                            }
                        }
                    }
                    // Delta types added after this was written are ignored, as the API's
                    // versioning policy asks (<https://docs.anthropic.com/en/api/versioning>).
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = self.index(&v)?;
                let open = self
                    .blocks
                    .get_mut(index)
                    .and_then(Option::take)
                    .ok_or_else(|| {
                        malformed(
                            format!("content block {index} stopped before it started"),
                            &v,
                        )
                    })?;
                let mut block = open.block;
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    let input = if open.json.trim().is_empty() {
                        block
                            .get("input")
                            .cloned()
                            .filter(|i| i.is_object())
                            .unwrap_or_else(|| json!({}))
                    } else {
                        serde_json::from_str(&open.json).map_err(|e| {
                            let name = block
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or_default();
                            ModelError::new(
                                ModelErrorKind::MalformedResponse,
                                format!("tool call {name:?} has invalid JSON arguments: {e}"),
                            )
                            .with_raw(open.json.clone())
                        })?
                    };
                    block["input"] = input;
                }
                self.done_blocks.push((index, block));
            }
            "message_delta" => {
                if let Some(d) = v.get("delta") {
                    if let Some(r) = d.get("stop_reason").filter(|r| !r.is_null()) {
                        self.stop_reason = Some(r.clone());
                    }
                    if let Some(s) = d.get("stop_sequence").filter(|s| !s.is_null()) {
                        self.stop_sequence = Some(s.clone());
                    }
                }
                // Counts here are cumulative: they replace message_start's.
                if let Some(Value::Object(u)) = v.get("usage") {
                    for (k, n) in u {
                        if !n.is_null() {
                            self.usage.insert(k.clone(), n.clone());
                        }
                    }
                }
            }
            "message_stop" => {
                self.stopped = true;
                out.extend(self.finish()?);
            }
            // `ping`, and event types added later.
            _ => {}
        }
        Ok(out)
    }

    fn index(&self, v: &Value) -> Result<usize, ModelError> {
        v.get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i < 4096)
            .ok_or_else(|| malformed("a content block event without a valid index", v))
    }

    /// Usage, metadata and the complete message.
    fn finish(&mut self) -> Result<Vec<ChatChunk>, ModelError> {
        let facts = CallFacts {
            provider: &self.provider,
            model: &self.model,
            internal: false,
            structured_tool: self.structured_tool.as_deref(),
        };
        let mut meta = base_metadata(&facts, &self.message);
        stop_metadata(
            &mut meta,
            self.stop_reason.as_ref(),
            self.stop_sequence.as_ref(),
        );
        let usage = usage_from(&Value::Object(self.usage.clone()));
        let mut done = std::mem::take(&mut self.done_blocks);
        done.sort_by_key(|(i, _)| *i);
        let blocks = done.into_iter().map(|(_, b)| b).collect();
        let message = message_from_blocks(blocks, &facts, meta.clone(), usage, &self.message)?;
        let mut out = Vec::new();
        if let Some(usage) = usage {
            out.push(ChatChunk::Usage { usage });
        }
        out.push(ChatChunk::Metadata {
            metadata: message.response_metadata.clone(),
        });
        out.push(ChatChunk::Complete {
            message: Box::new(Message::from(message)),
        });
        Ok(out)
    }
}

fn append(block: &mut Value, key: &str, text: &str) {
    if let Value::Object(b) = block {
        match b.get_mut(key) {
            Some(Value::String(s)) => s.push_str(text),
            _ => {
                b.insert(key.into(), json!(text));
            }
        }
    }
}
