//! Building the Messages API request body from a [`ChatRequest`], with the prompt-cache
//! breakpoints.
//!
//! Keel's messages are in the OpenAI chat shape; the Messages API wants a top-level
//! `system`, alternating `user` / `assistant` turns of content blocks, tool calls as
//! `tool_use` blocks of the assistant turn and their results as `tool_result` blocks of
//! the next user turn (<https://docs.anthropic.com/en/api/messages>). So:
//!
//! - the system message becomes `system` text blocks; a system message inside the
//!   conversation (rare) becomes a user text block where it stands;
//! - consecutive tool results, and a user message after them, merge into one user turn
//!   (results first, as the API requires);
//! - an AI message's content parts are sent back as they came (thinking and
//!   redacted-thinking blocks unchanged, with their signatures), then its tool calls as
//!   `tool_use` blocks;
//! - OpenAI-style `image_url` parts become `image` blocks (base64 for `data:` URLs);
//!   other parts (documents, search results, ...) are sent verbatim;
//! - a `response_format` JSON schema in the settings' `extra` (how Keel's summary and
//!   session-memory fold calls ask for JSON) becomes a forced tool call whose
//!   `input_schema` is the schema; the answer's tool input comes back as the text.
//!
//! Every content is sent as a list of blocks, never a bare string, so a message's bytes
//! do not change when a breakpoint moves on or off it.
//!
//! # Cache breakpoints
//!
//! At most four `cache_control` markers, in the order of the prompt (tools, system,
//! messages) — see [`place_breakpoints`]:
//!
//! 1. the last tool definition (the tools never change within a thread);
//! 2. the last system block;
//! 3. the summary message (the user message named `summary` that compaction puts first):
//!    everything up to it is the same on every call until the next fold;
//! 4. the last stable message: the last one not marked `dynamic_context` (reminders
//!    that move each turn), so the next call, which appends to the thread, reads the
//!    whole conversation so far from the cache.
//!
//! Markers a client put on its own content parts are removed first: the API takes at
//! most four, and a breakpoint left on an old message would be wasted.

use keel_core::message::{
    Content, ContentPart, DYNAMIC_CONTEXT, ImagePart, Message, MessageBody, TextPart, ToolStatus,
};
use keel_core::model::{ChatRequest, ModelError, ModelErrorKind, ToolChoice};
use keel_core::pairs::check_pairs_strict;
use serde_json::{Map, Value, json};

use crate::config::{AnthropicConfig, CacheTtl};

/// The name of the user message compaction writes the summary into (Keel's
/// `keel_summary::SUMMARY_NAME`).
pub const SUMMARY_NAME: &str = "summary";

/// The most `cache_control` breakpoints one request may carry.
pub const MAX_BREAKPOINTS: usize = 4;

/// Block types that cannot carry `cache_control` themselves.
const UNMARKABLE: &[&str] = &["thinking", "redacted_thinking"];

/// A request body, and what reading its answer needs.
#[derive(Clone, Debug, PartialEq)]
pub struct BuiltRequest {
    /// The JSON body.
    pub body: Value,
    /// The forced tool standing for a `response_format` schema: its input is the answer.
    pub structured_tool: Option<String>,
}

/// Where a breakpoint went, for tests and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breakpoint {
    /// The last tool definition.
    Tools,
    /// The last system block.
    System,
    /// The summary message (its position in `ChatRequest::messages`).
    Summary(usize),
    /// The last stable message (its position in `ChatRequest::messages`).
    LastStable(usize),
}

fn invalid(message: impl Into<String>) -> ModelError {
    ModelError::new(ModelErrorKind::InvalidRequest, message)
}

/// The JSON body for one Messages API call.
///
/// `extra` settings are written first, so the fields Keel sets itself win over a
/// clashing `extra` key; `extra` can add `thinking`, `output_config`, `metadata`,
/// `service_tier` and whatever else the API takes. `ModelSettings::temperature` and
/// `top_p` are not sent (the API's request type has no sampling parameters). A request whose tool calls and
/// results are not paired is refused here with a typed error rather than sent.
pub fn build_body(
    config: &AnthropicConfig,
    request: &ChatRequest<'_>,
    stream: bool,
) -> Result<BuiltRequest, ModelError> {
    check_pairs_strict(request.messages).map_err(|v| {
        invalid(format!(
            "the conversation's tool calls and results are not paired, which the Messages API rejects: {v}"
        ))
    })?;
    let settings = request.settings;
    let mut body: Map<String, Value> = settings.extra.clone();
    let response_format = body.remove("response_format");
    body.insert("model".into(), json!(config.model));
    body.insert(
        "max_tokens".into(),
        json!(
            settings
                .max_tokens
                .unwrap_or_else(|| config.default_max_tokens())
        ),
    );

    let mut system: Vec<Value> = match request.system {
        Some(m) => content_blocks(m.content())?,
        None => Vec::new(),
    };
    let (mut messages, last_blocks) = conversation(request.messages)?;

    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "input_schema": input_schema(&t.parameters),
            })
        })
        .collect();
    let mut tool_choice = request
        .tool_choice
        .filter(|_| !tools.is_empty())
        .map(|c| match c {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Named(name) => json!({"type": "tool", "name": name}),
        });
    let structured = match response_format {
        Some(format) => structured_schema(&format)?,
        None => None,
    };
    let structured_tool = match structured {
        Some((name, schema)) => {
            tools.push(json!({
                "name": name,
                "description": "Write the answer: call this tool once, with the whole answer as its input.",
                "input_schema": schema,
            }));
            tool_choice = Some(json!({"type": "tool", "name": name}));
            Some(name)
        }
        None => None,
    };

    if let Some(ttl) = config.cache_ttl {
        let marker = cache_control(ttl);
        for bp in place_breakpoints(request) {
            match bp {
                Breakpoint::Tools => {
                    if let Some(Value::Object(t)) = tools.last_mut() {
                        t.insert("cache_control".into(), marker.clone());
                    }
                }
                Breakpoint::System => mark_last(&mut system, &marker),
                Breakpoint::Summary(i) | Breakpoint::LastStable(i) => {
                    if let Some(&Some((m, b))) = last_blocks.get(i)
                        && let Some(Value::Object(block)) = messages
                            .get_mut(m)
                            .and_then(|msg| msg.get_mut("content"))
                            .and_then(|c| c.get_mut(b))
                    {
                        block.insert("cache_control".into(), marker.clone());
                    }
                }
            }
        }
    }

    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = tool_choice {
            body.insert("tool_choice".into(), choice);
        }
    } else {
        body.remove("tool_choice");
    }
    // `temperature` and `top_p` are not sent: the Messages API's request type has no
    // sampling parameters any more (the official SDK's `MessageCreateParams` lists
    // none), and a server refuses keys it does not know. A server that still takes
    // them gets them through `extra`.
    if !settings.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(settings.stop));
    }
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    } else {
        body.remove("stream");
    }
    Ok(BuiltRequest {
        body: Value::Object(body),
        structured_tool,
    })
}

/// The breakpoints a request gets, in prompt order (see the [module docs](self)).
///
/// ```
/// use keel_anthropic::request::{Breakpoint, place_breakpoints};
/// use keel_core::message::Message;
/// use keel_core::model::{ChatRequest, ModelSettings};
///
/// let system = Message::system("You are a support agent.");
/// let messages = vec![
///     Message::human("Summary of the conversation so far: ...").with_name("summary"),
///     Message::human("What is the cluster?"),
///     Message::ai("EU."),
///     Message::human("Thanks"),
/// ];
/// let settings = ModelSettings::default();
/// let mut request = ChatRequest::new(&messages, &settings);
/// request.system = Some(&system);
/// assert_eq!(
///     place_breakpoints(&request),
///     vec![Breakpoint::System, Breakpoint::Summary(0), Breakpoint::LastStable(3)]
/// );
/// ```
pub fn place_breakpoints(request: &ChatRequest<'_>) -> Vec<Breakpoint> {
    let mut out = Vec::with_capacity(MAX_BREAKPOINTS);
    if !request.tools.is_empty() {
        out.push(Breakpoint::Tools);
    }
    if request
        .system
        .is_some_and(|s| !content_is_blank(s.content()))
    {
        out.push(Breakpoint::System);
    }
    let markable = |m: &Message| has_markable_block(m);
    let summary = request
        .messages
        .iter()
        .rposition(|m| m.is_human() && m.name() == Some(SUMMARY_NAME) && markable(m));
    if let Some(i) = summary {
        out.push(Breakpoint::Summary(i));
    }
    let stable = request
        .messages
        .iter()
        .rposition(|m| !m.flag(DYNAMIC_CONTEXT) && markable(m));
    if let Some(i) = stable
        && Some(i) != summary
    {
        out.push(Breakpoint::LastStable(i));
    }
    out.truncate(MAX_BREAKPOINTS);
    out
}

fn cache_control(ttl: CacheTtl) -> Value {
    match ttl {
        // The API's default lifetime: the marker most proxies and older gateways know.
        CacheTtl::FiveMinutes => json!({"type": "ephemeral"}),
        CacheTtl::OneHour => json!({"type": "ephemeral", "ttl": "1h"}),
    }
}

fn mark_last(blocks: &mut [Value], marker: &Value) {
    if let Some(Value::Object(block)) = blocks.iter_mut().rev().find(|b| is_markable(b)) {
        block.insert("cache_control".into(), marker.clone());
    }
}

fn is_markable(block: &Value) -> bool {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    !UNMARKABLE.contains(&kind)
}

fn content_is_blank(content: &Content) -> bool {
    match content {
        Content::Text(s) => s.is_empty(),
        Content::Parts(parts) => parts.is_empty(),
    }
}

/// True when the message turns into at least one block that may carry a marker.
fn has_markable_block(m: &Message) -> bool {
    match m.body() {
        MessageBody::Ai(ai) => {
            !ai.tool_calls.is_empty()
                || content_blocks(&ai.content).is_ok_and(|b| b.iter().any(is_markable))
        }
        MessageBody::Tool(_) => true,
        _ => !content_is_blank(m.content()),
    }
}

/// `(role, blocks)` turns, merged by role, and for each Keel message the position
/// (turn, block) of its last block that may carry a breakpoint.
#[allow(clippy::type_complexity)]
fn conversation(
    messages: &[Message],
) -> Result<(Vec<Value>, Vec<Option<(usize, usize)>>), ModelError> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut last_blocks = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let (role, blocks) = match m.body() {
            MessageBody::System(s) => ("user", content_blocks(&s.content)?),
            MessageBody::Human(h) => ("user", content_blocks(&h.content)?),
            MessageBody::Tool(t) => {
                let mut block = Map::new();
                block.insert("type".into(), json!("tool_result"));
                block.insert("tool_use_id".into(), json!(t.tool_call_id));
                let content = content_blocks(&t.content)?;
                if !content.is_empty() {
                    block.insert("content".into(), Value::Array(content));
                }
                if t.status == ToolStatus::Error {
                    block.insert("is_error".into(), Value::Bool(true));
                }
                ("user", vec![Value::Object(block)])
            }
            MessageBody::Ai(ai) => {
                let mut blocks = content_blocks(&ai.content)?;
                for call in &ai.tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": match &call.args {
                            Value::Object(_) => call.args.clone(),
                            Value::Null => json!({}),
                            other => return Err(invalid(format!(
                                "message #{i}: tool call {:?} ({}) has arguments {other} that are not a JSON object, which the Messages API requires",
                                call.id, call.name
                            ))),
                        },
                    }));
                }
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            // An empty turn is rejected by the API and says nothing.
            last_blocks.push(None);
            continue;
        }
        let merge = turns.last().is_some_and(|(r, _)| *r == role);
        if !merge {
            turns.push((role, Vec::new()));
        }
        let turn_index = turns.len() - 1;
        let Some((_, turn)) = turns.last_mut() else {
            last_blocks.push(None);
            continue;
        };
        let offset = turn.len();
        let last = blocks
            .iter()
            .rposition(is_markable)
            .map(|b| (turn_index, offset + b));
        turn.extend(blocks);
        last_blocks.push(last);
    }
    // The API wants a user turn's tool results before its other blocks: a turn merged
    // from results and a user message keeps that order already; keep it when a system
    // message sat between two results too. The sort is stable, so the positions of
    // breakpoint blocks only move when the order had to change.
    for (t, (role, blocks)) in turns.iter_mut().enumerate() {
        if *role == "user" {
            let before: Vec<bool> = blocks.iter().map(is_tool_result).collect();
            if before.windows(2).any(|w| !w[0] && w[1]) {
                let mut order: Vec<usize> = (0..blocks.len()).collect();
                order.sort_by_key(|&b| !before[b]);
                let old = std::mem::take(blocks);
                let mut moved = vec![0; old.len()];
                for (new, &o) in order.iter().enumerate() {
                    moved[o] = new;
                }
                *blocks = order.iter().map(|&o| old[o].clone()).collect();
                for pos in last_blocks.iter_mut().flatten() {
                    if pos.0 == t {
                        pos.1 = moved[pos.1];
                    }
                }
            }
        }
    }
    let turns = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    Ok((turns, last_blocks))
}

fn is_tool_result(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("tool_result")
}

/// Content as Messages API blocks (empty text dropped: the API rejects it).
pub(crate) fn content_blocks(content: &Content) -> Result<Vec<Value>, ModelError> {
    match content {
        Content::Text(s) if s.is_empty() => Ok(Vec::new()),
        Content::Text(s) => Ok(vec![json!({"type": "text", "text": s})]),
        Content::Parts(parts) => {
            let mut out = Vec::with_capacity(parts.len());
            for part in parts {
                match part {
                    ContentPart::Text(TextPart { text, extra, .. }) => {
                        if text.is_empty() {
                            continue;
                        }
                        let mut block = extra.clone();
                        block.remove("cache_control");
                        block.insert("type".into(), json!("text"));
                        block.insert("text".into(), json!(text));
                        out.push(Value::Object(block));
                    }
                    ContentPart::Image(ImagePart { image_url }) => {
                        out.push(image_block(image_url)?)
                    }
                    ContentPart::Other(Value::Object(block)) => {
                        let mut block = block.clone();
                        block.remove("cache_control");
                        out.push(Value::Object(block));
                    }
                    ContentPart::Other(other) => {
                        return Err(invalid(format!(
                            "a content part {other} is not an object; the Messages API takes content blocks"
                        )));
                    }
                }
            }
            Ok(out)
        }
    }
}

/// An OpenAI `image_url` part as an `image` block.
fn image_block(image_url: &Value) -> Result<Value, ModelError> {
    let url = image_url
        .get("url")
        .or(Some(image_url))
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("an image_url part has no url: {image_url}")))?;
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest
            .split_once(',')
            .ok_or_else(|| invalid("an image data: URL has no ',' before its data"))?;
        let media_type = meta.strip_suffix(";base64").ok_or_else(|| {
            invalid(format!(
                "an image data: URL must be base64 (data:image/png;base64,...), got data:{meta},..."
            ))
        })?;
        Ok(
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}),
        )
    } else {
        Ok(json!({"type": "image", "source": {"type": "url", "url": url}}))
    }
}

/// A tool's parameters as an `input_schema`, which must be an object schema.
fn input_schema(parameters: &Value) -> Value {
    match parameters {
        Value::Object(o) if o.contains_key("type") => parameters.clone(),
        Value::Object(o) => {
            let mut o = o.clone();
            o.insert("type".into(), json!("object"));
            Value::Object(o)
        }
        _ => json!({"type": "object"}),
    }
}

/// The tool name and input schema standing for an OpenAI `response_format` (`None` for
/// `{"type": "text"}`, the default).
fn structured_schema(format: &Value) -> Result<Option<(String, Value)>, ModelError> {
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let spec = format.get("json_schema").unwrap_or(&Value::Null);
            let name = spec
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or("answer")
                .to_owned();
            let schema = spec
                .get("schema")
                .map_or_else(|| json!({"type": "object"}), input_schema);
            Ok(Some((name, schema)))
        }
        Some("json_object") => Ok(Some(("answer".to_owned(), json!({"type": "object"})))),
        Some("text") => Ok(None),
        _ => Err(invalid(format!(
            "response_format {format} is not understood; use {{\"type\": \"json_schema\", \"json_schema\": {{\"name\", \"schema\"}}}} or {{\"type\": \"json_object\"}}"
        ))),
    }
}
