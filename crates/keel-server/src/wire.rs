//! Keel's messages and state in the shapes LangGraph's clients read and write: messages
//! as LangChain serializes them (`{"type": "human" | "ai" | "tool" | "system", "content",
//! "id", "tool_calls": [{"name", "args", "id", "type": "tool_call"}], ...}`) and thread
//! values as `{"messages": [...], <state values>}`.
//!
//! Input messages are accepted in both the LangChain shape (`type`) and the OpenAI chat
//! shape (`role`), which is what `langgraph-sdk` users and `agent-chat-ui` send.

use keel_core::message::{Content, Message, MessageBody, ToolCall, ToolStatus, Usage};
use keel_core::state::{AgentState, INTERRUPT_KEY, MessageOp, StateUpdate};
use serde_json::{Map, Value, json};

/// A message as LangChain serializes it (`BaseMessage.model_dump()` keys).
pub fn message_to_lc(message: &Message) -> Value {
    let content = serde_json::to_value(message.content()).unwrap_or(Value::Null);
    let name = message
        .name()
        .map_or(Value::Null, |n| Value::String(n.into()));
    match message.body() {
        MessageBody::System(_) => json!({
            "type": "system", "content": content, "id": message.id(), "name": name,
            "additional_kwargs": {}, "response_metadata": {},
        }),
        MessageBody::Human(_) => json!({
            "type": "human", "content": content, "id": message.id(), "name": name,
            "additional_kwargs": {}, "response_metadata": {}, "example": false,
        }),
        MessageBody::Ai(ai) => {
            let usage = ai.usage.as_ref().map_or(Value::Null, usage_to_lc);
            json!({
                "type": "ai", "content": content, "id": message.id(), "name": name,
                "tool_calls": ai.tool_calls.iter().map(tool_call_to_lc).collect::<Vec<_>>(),
                "invalid_tool_calls": [],
                "usage_metadata": usage,
                "additional_kwargs": {},
                "response_metadata": ai.response_metadata,
                "example": false,
            })
        }
        MessageBody::Tool(tool) => json!({
            "type": "tool", "content": content, "id": message.id(), "name": name,
            "tool_call_id": tool.tool_call_id,
            "status": if tool.status == ToolStatus::Error { "error" } else { "success" },
            "additional_kwargs": {}, "response_metadata": {},
        }),
    }
}

/// LangChain's `usage_metadata` for a usage: the prompt tokens read from the provider's
/// prompt cache go in `input_token_details.cache_read` and those written to it in
/// `input_token_details.cache_creation` (LangChain's `InputTokenDetails` keys), when
/// there are any.
pub fn usage_to_lc(u: &Usage) -> Value {
    let mut v = json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
    });
    let mut details = serde_json::Map::new();
    if u.cached_input_tokens > 0 {
        details.insert("cache_read".into(), json!(u.cached_input_tokens));
    }
    if u.cache_creation_input_tokens > 0 {
        details.insert(
            "cache_creation".into(),
            json!(u.cache_creation_input_tokens),
        );
    }
    if !details.is_empty() {
        v["input_token_details"] = Value::Object(details);
    }
    v
}

/// A tool call in LangChain's shape.
pub fn tool_call_to_lc(call: &ToolCall) -> Value {
    json!({"name": call.name, "args": call.args, "id": call.id, "type": "tool_call"})
}

/// What human in the loop keeps in a thread's values to apply a resume (the decisions
/// recorded, the calls already reviewed): server-side, as LangChain keeps no such
/// channels, so clients never see them.
const REVIEW_BOOKKEEPING: [&str; 2] = [
    keel_middleware::human_in_the_loop::DECISIONS_KEY,
    keel_middleware::human_in_the_loop::REVIEWED_KEY,
];

/// A thread's values: `{"messages": [...]}` plus every named state value but
/// human in the loop's bookkeeping.
pub fn state_to_values(state: &AgentState) -> Value {
    let mut values = named_values(state);
    values.insert(
        "messages".into(),
        Value::Array(state.messages.iter().map(message_to_lc).collect()),
    );
    Value::Object(values)
}

/// The state's named values as [`state_to_values`] shows them (without `messages`).
fn named_values(state: &AgentState) -> Map<String, Value> {
    let mut values = Map::new();
    for (k, v) in &state.values {
        if REVIEW_BOOKKEEPING.contains(&k.as_str()) {
            continue;
        }
        if k == INTERRUPT_KEY {
            // LangGraph's shape: the list of pending interrupts, absent when none.
            if let Some(list) = interrupts_to_lg(v) {
                values.insert(k.clone(), list);
            }
        } else if k != "messages" {
            values.insert(k.clone(), v.clone());
        }
    }
    values
}

/// Serialized messages kept by [`values_text`], process-wide: a `values` event carries
/// the whole thread, and every message but the newest was serialized by the previous
/// event already.
const MESSAGE_TEXT_ENTRIES: usize = 65_536;
/// The most bytes the serialized-message cache holds (least recently used go first).
const MESSAGE_TEXT_BYTES: usize = 64 << 20;

/// fingerprint -> (message id, the message serialized as by [`message_to_lc`]).
struct MessageTexts {
    entries: lru::LruCache<u64, (Box<str>, std::sync::Arc<str>)>,
    bytes: usize,
}

static MESSAGE_TEXTS: std::sync::LazyLock<parking_lot::Mutex<MessageTexts>> =
    std::sync::LazyLock::new(|| {
        parking_lot::Mutex::new(MessageTexts {
            entries: lru::LruCache::new(
                std::num::NonZeroUsize::new(MESSAGE_TEXT_ENTRIES)
                    .unwrap_or(std::num::NonZeroUsize::MIN),
            ),
            bytes: 0,
        })
    });

impl MessageTexts {
    /// The cached text of `message`: the same id and
    /// [`fingerprint`](Message::fingerprint), which covers everything serialized.
    fn get(&mut self, message: &Message) -> Option<std::sync::Arc<str>> {
        self.entries
            .get(&message.fingerprint())
            .filter(|(id, _)| **id == *message.id())
            .map(|(_, text)| text.clone())
    }

    /// Keeps `text` for `message`, dropping the least recently used texts beyond the
    /// byte bound (a text over a sixteenth of it is not kept).
    fn put(&mut self, message: &Message, text: std::sync::Arc<str>) {
        let size = text.len() + message.id().len();
        if size > MESSAGE_TEXT_BYTES / 16 {
            return;
        }
        let mut evicted = self
            .entries
            .push(message.fingerprint(), (message.id().into(), text))
            .map(|(_, entry)| entry);
        self.bytes += size;
        loop {
            if let Some((id, text)) = evicted {
                self.bytes = self.bytes.saturating_sub(text.len() + id.len());
            }
            if self.bytes <= MESSAGE_TEXT_BYTES {
                break;
            }
            evicted = self.entries.pop_lru().map(|(_, entry)| entry);
            if evicted.is_none() {
                break;
            }
        }
    }
}

/// Each message serialized as [`message_to_lc`] shapes it: from the process-wide cache
/// for the messages serialized before (one lock for all of them, so concurrent runs do
/// not queue on it per message), the others serialized outside the lock and kept.
fn message_texts(messages: &[Message]) -> Vec<std::sync::Arc<str>> {
    let cached: Vec<Option<std::sync::Arc<str>>> = {
        let mut cache = MESSAGE_TEXTS.lock();
        messages.iter().map(|m| cache.get(m)).collect()
    };
    let mut fresh = Vec::new();
    let texts = messages
        .iter()
        .zip(cached)
        .map(|(m, cached)| {
            cached.unwrap_or_else(|| {
                let text: std::sync::Arc<str> = serde_json::to_string(&message_to_lc(m))
                    .unwrap_or_else(|_| "null".into())
                    .into();
                fresh.push((m, text.clone()));
                text
            })
        })
        .collect();
    if !fresh.is_empty() {
        let mut cache = MESSAGE_TEXTS.lock();
        for (m, text) in fresh {
            cache.put(m, text);
        }
    }
    texts
}

/// [`state_to_values`] serialized, byte for byte what `serde_json::to_string` makes of
/// it (serde_json's map sorts its keys, so `messages` goes after the keys that sort
/// before it), with each message's text taken from a process-wide cache: a `values`
/// event's cost is copying the thread's bytes, not serializing every message again on
/// every step of every run.
pub fn values_text(state: &AgentState) -> String {
    let named = named_values(state);
    let texts = message_texts(&state.messages);
    let messages_at = named.keys().take_while(|k| k.as_str() < "messages").count();
    let mut out = String::with_capacity(texts.iter().map(|t| t.len() + 1).sum::<usize>() + 64);
    out.push('{');
    for (i, (k, v)) in named.iter().enumerate() {
        if i == messages_at {
            push_messages(&mut out, &texts);
        }
        out.push_str(&serde_json::to_string(k).unwrap_or_else(|_| "\"\"".into()));
        out.push(':');
        out.push_str(&serde_json::to_string(v).unwrap_or_else(|_| "null".into()));
        out.push(',');
    }
    if messages_at == named.len() {
        push_messages(&mut out, &texts);
    }
    out.pop(); // the last field's comma
    out.push('}');
    out
}

/// `"messages":[...],` from the messages' texts.
fn push_messages(out: &mut String, texts: &[std::sync::Arc<str>]) {
    out.push_str("\"messages\":[");
    for (i, t) in texts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(t);
    }
    out.push_str("],");
}

/// The id of the task waiting on the interrupt `interrupt_id` (a thread's `tasks[].id`,
/// the key of its `interrupts`): a UUID of its own, as LangGraph's task ids are distinct
/// from interrupt ids, derived from the interrupt's so every read gives the same one.
pub fn interrupt_task_id(interrupt_id: &str) -> String {
    const TASKS: uuid::Uuid = uuid::Uuid::from_u128(0x6b65_656c_7461_736b_9000_0000_0000_0001);
    uuid::Uuid::new_v5(&TASKS, interrupt_id.as_bytes()).to_string()
}

/// A pending interrupt as LangGraph's clients read it (`__interrupt__` in values and
/// updates, `interrupts` in thread state): `[{"value": {...}, "id": "..."}]`, where the
/// value is what the middleware asked (for `HumanInTheLoopMiddleware`, LangChain's
/// `{"action_requests": [...], "review_configs": [...]}`) and the id is stable for that
/// pause. `None` for a null value (nothing pending).
pub fn interrupts_to_lg(stored: &Value) -> Option<Value> {
    if stored.is_null() {
        return None;
    }
    let mut value = stored.clone();
    // Keel's bookkeeping (which calls and message the pause is about) stays server-side.
    let mut key = String::new();
    if let Value::Object(fields) = &mut value {
        for bookkeeping in ["tool_call_ids", "message_id"] {
            if let Some(v) = fields.remove(bookkeeping) {
                key.push_str(&v.to_string());
            }
        }
    }
    if key.is_empty() {
        key = stored.to_string();
    }
    let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, key.as_bytes()).simple();
    Some(json!([{ "value": value, "id": id.to_string() }]))
}

/// A node's update in the `updates` mode's shape: messages it upserted, a LangChain
/// `RemoveMessage` (`{"type": "remove", "id"}`) per removal (`__remove_all__` clears
/// the list, as LangGraph's `REMOVE_ALL_MESSAGES`), then the values it set.
pub fn update_to_lc(update: &StateUpdate) -> Value {
    let mut out = Map::new();
    if !update.messages.is_empty() {
        let ops = update
            .messages
            .iter()
            .map(|op| match op {
                MessageOp::Upsert { message } => message_to_lc(message),
                MessageOp::Remove { id } => remove_message(id),
                MessageOp::RemoveAll => remove_message("__remove_all__"),
            })
            .collect();
        out.insert("messages".into(), Value::Array(ops));
    }
    for (k, v) in &update.values {
        if k == INTERRUPT_KEY {
            // Sent on its own as LangGraph's `{"__interrupt__": [...]}` update.
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    Value::Object(out)
}

fn remove_message(id: &str) -> Value {
    json!({"type": "remove", "id": id, "content": "", "additional_kwargs": {}, "response_metadata": {}})
}

/// Reads the `messages` of a run's `input`: a list of messages, one message, or a
/// plain string (a user message). `path` names the field in error messages.
pub fn messages_from_input(value: &Value, path: &str) -> Result<Vec<Message>, String> {
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| message_from_lc(item, &format!("{path}[{i}]")))
            .collect(),
        Value::String(text) => Ok(vec![Message::human(text.as_str())]),
        Value::Object(_) => Ok(vec![message_from_lc(value, path)?]),
        other => Err(format!(
            "{path} must be a list of messages, a message or a string, not {}",
            kind(other)
        )),
    }
}

/// One input message, in LangChain's shape (`type`) or OpenAI's (`role`).
pub fn message_from_lc(value: &Value, path: &str) -> Result<Message, String> {
    let Value::Object(obj) = value else {
        return Err(format!("{path} must be an object, not {}", kind(value)));
    };
    let role = obj
        .get("type")
        .or_else(|| obj.get("role"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            format!("{path} needs a \"type\" (human, ai, tool, system) or a \"role\"")
        })?;
    let content: Content = match obj.get("content") {
        None | Some(Value::Null) => Content::default(),
        Some(c @ (Value::String(_) | Value::Array(_))) => serde_json::from_value(c.clone())
            .map_err(|e| format!("{path}.content is not valid message content: {e}"))?,
        Some(other) => {
            return Err(format!(
                "{path}.content must be a string or a list of parts, not {}",
                kind(other)
            ));
        }
    };
    let mut message = match role {
        "human" | "user" | "HumanMessage" | "HumanMessageChunk" => Message::human(content),
        "system" | "SystemMessage" => Message::system(content),
        "ai" | "assistant" | "AIMessage" | "AIMessageChunk" => {
            let calls = match obj.get("tool_calls") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(calls)) => calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| tool_call_from_lc(c, &format!("{path}.tool_calls[{i}]")))
                    .collect::<Result<_, _>>()?,
                Some(other) => {
                    return Err(format!(
                        "{path}.tool_calls must be a list, not {}",
                        kind(other)
                    ));
                }
            };
            Message::ai(content).with_tool_calls(calls)
        }
        "tool" | "ToolMessage" => {
            let id = obj
                .get("tool_call_id")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{path}: a tool message needs a \"tool_call_id\" string"))?;
            if obj.get("status").and_then(Value::as_str) == Some("error") {
                Message::tool_error(id, content)
            } else {
                Message::tool(id, content)
            }
        }
        other => {
            return Err(format!(
                "{path}.type {other:?} is not a message type: use human, ai, tool or system"
            ));
        }
    };
    match obj.get("id") {
        Some(Value::String(id)) if !id.is_empty() => message.set_id(id.as_str()),
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(other) => return Err(format!("{path}.id must be a string, not {}", kind(other))),
    }
    if let Some(name) = obj.get("name").and_then(Value::as_str) {
        message = message.with_name(name);
    }
    Ok(message)
}

/// A tool call in LangChain's shape (`name`, `args`, `id`) or OpenAI's (`function`).
fn tool_call_from_lc(value: &Value, path: &str) -> Result<ToolCall, String> {
    if value.get("function").is_some() {
        return serde_json::from_value(value.clone()).map_err(|e| format!("{path}: {e}"));
    }
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{path} needs a \"name\" string"))?;
    let id = value.get("id").and_then(Value::as_str).unwrap_or_default();
    let args = value.get("args").cloned().unwrap_or_else(|| json!({}));
    Ok(ToolCall::new(id, name, args))
}

/// `a string`, `a number`, ... for error messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `values_text` is what serializing `state_to_values` gives, byte for byte, with
    /// keys before and after `messages`, interrupts, an edited message (same id, other
    /// text) and a message seen before.
    #[test]
    fn values_text_is_the_serialized_values() {
        let mut state = AgentState {
            messages: vec![
                Message::human("hi \"there\"\n").with_id("h1"),
                Message::ai("hello").with_id("a1"),
            ]
            .into(),
            ..AgentState::default()
        };
        let check = |state: &AgentState| {
            assert_eq!(
                values_text(state),
                serde_json::to_string(&state_to_values(state)).unwrap()
            );
        };
        check(&state);
        state.values.insert("a_first".into(), json!({"x": [1, 2]}));
        state
            .values
            .insert("todos".into(), json!(["write", "test"]));
        state.values.insert("messages_extra".into(), json!(null));
        state.values.insert("m".into(), json!("é \u{1F600}"));
        check(&state);
        // The same id with other content is serialized anew.
        std::sync::Arc::make_mut(&mut state.messages)[1] = Message::ai("hello again").with_id("a1");
        check(&state);
        assert!(values_text(&state).contains("hello again"));
        state.messages = Vec::new().into();
        check(&state);
        check(&AgentState::default());
    }

    #[test]
    fn cached_prompt_tokens_are_langchain_s_cache_read() {
        let mut u = Usage {
            input_tokens: 2006,
            output_tokens: 300,
            total_tokens: 2306,
            cached_input_tokens: 1920,
            cache_creation_input_tokens: 0,
        };
        assert_eq!(
            usage_to_lc(&u),
            json!({"input_tokens": 2006, "output_tokens": 300, "total_tokens": 2306,
                   "input_token_details": {"cache_read": 1920}})
        );
        u.cache_creation_input_tokens = 64;
        assert_eq!(
            usage_to_lc(&u)["input_token_details"],
            json!({"cache_read": 1920, "cache_creation": 64})
        );
        u.cached_input_tokens = 0;
        assert_eq!(
            usage_to_lc(&u)["input_token_details"],
            json!({"cache_creation": 64})
        );
        u.cache_creation_input_tokens = 0;
        assert!(usage_to_lc(&u).get("input_token_details").is_none());
    }

    #[test]
    fn round_trips_every_kind() {
        let call = ToolCall::new("c1", "lookup", json!({"q": "x"}));
        let messages = [
            Message::human("hi").with_id("h"),
            Message::ai("calling")
                .with_tool_calls(vec![call])
                .with_id("a"),
            Message::tool("c1", "result").with_id("t"),
            Message::system("be brief").with_id("s"),
        ];
        for m in &messages {
            let lc = message_to_lc(m);
            let back = message_from_lc(&lc, "m").unwrap();
            assert_eq!(&back, m, "{lc}");
        }
        assert_eq!(
            message_to_lc(&messages[1])["tool_calls"][0]["args"]["q"],
            "x"
        );
    }

    #[test]
    fn accepts_openai_roles_and_strings() {
        let msgs =
            messages_from_input(&json!([{"role": "user", "content": "yo"}]), "input").unwrap();
        assert!(msgs[0].is_human());
        assert_eq!(
            messages_from_input(&json!("hello"), "m").unwrap()[0].text(),
            "hello"
        );
        let err = messages_from_input(
            &json!([{"type": "robot", "content": "x"}]),
            "input.messages",
        )
        .unwrap_err();
        assert!(err.contains("input.messages[0].type"), "{err}");
        let err = messages_from_input(&json!(3), "input.messages").unwrap_err();
        assert!(err.contains("a number"), "{err}");
    }
}
