//! Chat messages in the OpenAI chat shape, plus a stable `id`.
//!
//! A [`Message`] is one of four kinds ([`MessageBody`]): system, human (`"role": "user"`),
//! AI (`"role": "assistant"`) and tool. Each kind's struct has public fields; the
//! [`Message`] wrapper adds a lazily computed content [`fingerprint`](Message::fingerprint)
//! that token-counting caches key on. Reading is free; mutation goes through
//! [`Message::body_mut`], which invalidates the fingerprint, so a cache can never serve
//! a stale count for an edited message.
//!
//! Serialized, a message is one JSON object in the OpenAI chat shape:
//!
//! ```
//! use keel_core::message::{Message, ToolCall};
//! use serde_json::json;
//!
//! let call = ToolCall::new("call_1", "read_file", json!({"path": "/mnt/skills/a/SKILL.md"}));
//! let ai = Message::ai("").with_tool_calls(vec![call]).with_id("m2");
//! let line = serde_json::to_string(&ai).unwrap();
//! let back: Message = serde_json::from_str(&line).unwrap();
//! assert_eq!(ai, back);
//! assert_eq!(back.tool_calls()[0].name, "read_file");
//! ```

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::OnceLock;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Free-form metadata attached to a message (markers such as `hide_from_ui`).
pub type Metadata = Map<String, Value>;

/// Metadata key marking a message that user interfaces must not show.
pub const HIDE_FROM_UI: &str = "hide_from_ui";
/// Metadata key marking a dynamic-context reminder that compaction must keep.
pub const DYNAMIC_CONTEXT: &str = "dynamic_context";

/// A fresh, time-ordered message id (UUID v7).
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The role of a message, as named in the OpenAI chat protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions from the application.
    System,
    /// A human turn.
    User,
    /// A model turn.
    Assistant,
    /// A tool result.
    Tool,
}

impl Role {
    /// The protocol name: `system`, `user`, `assistant` or `tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One part of a multi-part content list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ContentPart {
    /// `{"type": "text", "text": "..."}`
    Text(TextPart),
    /// `{"type": "image_url", "image_url": {"url": "..."}}`
    Image(ImagePart),
    /// Any other part (audio, files, provider-specific blocks), kept verbatim.
    Other(Value),
}

/// The `"type": "text"` of a [`TextPart`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
enum TextTag {
    #[default]
    #[serde(rename = "text")]
    Text,
}

/// A text part of a content list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TextPart {
    #[serde(rename = "type")]
    kind: TextTag,
    /// The text.
    pub text: String,
    /// Any other keys of the part, kept verbatim and sent back as received (for
    /// example `cache_control`, which marks a prompt-cache breakpoint).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TextPart {
    /// A text part with no other keys.
    pub fn new(text: impl Into<String>) -> Self {
        TextPart {
            kind: TextTag::Text,
            text: text.into(),
            extra: Map::new(),
        }
    }
}

/// An image part of a content list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "image_url")]
pub struct ImagePart {
    /// `{"url": "...", "detail": "..."}` as sent by the client.
    pub image_url: Value,
}

/// Message content: a plain string or a list of parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// A list of typed parts.
    Parts(Vec<ContentPart>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(String::new())
    }
}

impl Content {
    /// The concatenated text of this content (text parts only, joined without separator).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Content::Text(s) => std::borrow::Cow::Borrowed(s),
            Content::Parts(parts) => {
                let mut out = String::new();
                for p in parts {
                    if let ContentPart::Text(t) = p {
                        out.push_str(&t.text);
                    }
                }
                std::borrow::Cow::Owned(out)
            }
        }
    }

    /// True when there is no text and no part.
    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(s) => s.is_empty(),
            Content::Parts(p) => p.is_empty(),
        }
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_owned())
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

/// A tool call requested by the model. Arguments are JSON; on the wire they are the
/// JSON text in `function.arguments`, as in the OpenAI protocol.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// Provider-assigned call id, echoed by the tool result's `tool_call_id`.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed.
    pub args: Value,
}

impl ToolCall {
    /// A tool call with the given id, name and arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            args,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct WireFunction {
    name: String,
    arguments: String,
}

#[derive(Serialize, Deserialize)]
struct WireToolCall {
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireFunction,
}

fn function_type() -> String {
    "function".to_owned()
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let arguments = serde_json::to_string(&self.args).map_err(serde::ser::Error::custom)?;
        WireToolCall {
            id: self.id.clone(),
            kind: function_type(),
            function: WireFunction {
                name: self.name.clone(),
                arguments,
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = WireToolCall::deserialize(d)?;
        let args = if wire.function.arguments.trim().is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_str(&wire.function.arguments).map_err(|e| {
                D::Error::custom(format!(
                    "tool call {:?}: function.arguments is not valid JSON: {e}",
                    wire.id
                ))
            })?
        };
        Ok(ToolCall {
            id: wire.id,
            name: wire.function.name,
            args,
        })
    }
}

/// Token usage reported by a provider for one model call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Total as reported (usually input + output).
    pub total_tokens: u64,
    /// Prompt tokens the provider read from its prompt cache (part of `input_tokens`;
    /// `0` when it reported none, or reports no cache use at all).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Prompt tokens the provider wrote to its prompt cache on this call (part of
    /// `input_tokens`; Anthropic's `cache_creation_input_tokens`, billed above the base
    /// input price). `0` when it reported none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_creation_input_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Whether a tool ran successfully.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    /// The tool returned a result.
    #[default]
    Success,
    /// The tool failed, was unknown, or was rejected; `content` says why.
    Error,
}

impl ToolStatus {
    fn is_success(&self) -> bool {
        *self == ToolStatus::Success
    }
}

/// Instructions from the application.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemMessage {
    /// The instructions.
    pub content: Content,
    /// Stable id.
    #[serde(default)]
    pub id: String,
    /// Optional author name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Markers and annotations.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Metadata,
}

/// A human turn (`"role": "user"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HumanMessage {
    /// What the user said.
    pub content: Content,
    /// Stable id.
    #[serde(default)]
    pub id: String,
    /// Optional author name (`summary` for a summary message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Markers and annotations.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Metadata,
}

/// A model turn (`"role": "assistant"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AiMessage {
    /// Text or parts; `null` on the wire when the model only called tools.
    #[serde(default, deserialize_with = "content_or_null")]
    pub content: Content,
    /// Tool calls requested by the model, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Stable id.
    #[serde(default)]
    pub id: String,
    /// Optional name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Token usage of the call that produced this message, when the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Provider facts: `provider`, `model`, `finish_reason`, ...
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub response_metadata: Metadata,
    /// Markers and annotations.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Metadata,
}

fn content_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Content, D::Error> {
    Ok(Option::<Content>::deserialize(d)?.unwrap_or_default())
}

/// A tool result (`"role": "tool"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolMessage {
    /// The result (or the error text when `status` is `error`).
    pub content: Content,
    /// The id of the AI tool call this answers.
    pub tool_call_id: String,
    /// Stable id.
    #[serde(default)]
    pub id: String,
    /// The tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `error` when the tool failed; omitted on success.
    #[serde(default, skip_serializing_if = "ToolStatus::is_success")]
    pub status: ToolStatus,
    /// Markers and annotations.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Metadata,
}

/// The four kinds of message, tagged by `role` on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role")]
pub enum MessageBody {
    /// `"role": "system"`
    #[serde(rename = "system")]
    System(SystemMessage),
    /// `"role": "user"`
    #[serde(rename = "user")]
    Human(HumanMessage),
    /// `"role": "assistant"`
    #[serde(rename = "assistant")]
    Ai(AiMessage),
    /// `"role": "tool"`
    #[serde(rename = "tool")]
    Tool(ToolMessage),
}

/// The lazily computed [`Digest`]. Cloning keeps it (the clone has the same content);
/// [`Message::body_mut`] clears it. Equality ignores it.
#[derive(Clone, Debug, Default)]
struct Fingerprint(OnceLock<Digest>);

/// Facts about a message computed in one read of it, cached with it (see
/// [`Message::digest`]).
///
/// Besides the [`fingerprint`](Message::fingerprint), it carries two small hashes
/// that let code scanning a long thread (pair indexes, skill-read detection) skip the
/// tool-call strings of most messages: on a cold thread each of those strings is a
/// cache miss, and the digest is computed while they are in cache anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digest {
    /// See [`Message::fingerprint`].
    pub fingerprint: u64,
    /// For an AI message, the wrapping sum of [`call_id_hash`] over its tool calls; for
    /// a tool message, the [`call_id_hash`] of the call it answers; 0 otherwise. A run of
    /// results whose sum equals its AI message's (and as many as it has calls) answers
    /// exactly those calls, up to a 64-bit hash collision.
    pub call_ids: u64,
    /// For an AI message, the union of [`tool_name_bits`] over its calls' tool names (a
    /// 64-bit Bloom filter); 0 otherwise. If `call_names & tool_name_bits(n)` is not
    /// `tool_name_bits(n)`, no call of the message uses tool `n`.
    pub call_names: u64,
}

/// The hash of a tool-call id used by [`Digest::call_ids`].
pub fn call_id_hash(id: &str) -> u64 {
    FINGERPRINT_HASH.hash_one((0x69u8, id))
}

/// The two bits a tool name sets in [`Digest::call_names`].
pub fn tool_name_bits(name: &str) -> u64 {
    let x = FINGERPRINT_HASH.hash_one((0x6eu8, name));
    (1u64 << (x & 63)) | (1u64 << ((x >> 6) & 63))
}

/// One chat message. See the [module docs](self).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Message {
    body: MessageBody,
    #[serde(skip)]
    fp: Fingerprint,
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.body == other.body
    }
}

impl From<MessageBody> for Message {
    fn from(body: MessageBody) -> Self {
        Message {
            body,
            fp: Fingerprint::default(),
        }
    }
}

macro_rules! from_kind {
    ($t:ty, $v:ident) => {
        impl From<$t> for Message {
            fn from(m: $t) -> Self {
                MessageBody::$v(m).into()
            }
        }
    };
}
from_kind!(SystemMessage, System);
from_kind!(HumanMessage, Human);
from_kind!(AiMessage, Ai);
from_kind!(ToolMessage, Tool);

impl Message {
    /// A system message with a fresh id.
    pub fn system(content: impl Into<Content>) -> Self {
        SystemMessage {
            content: content.into(),
            id: new_id(),
            ..Default::default()
        }
        .into()
    }

    /// A human message with a fresh id.
    pub fn human(content: impl Into<Content>) -> Self {
        HumanMessage {
            content: content.into(),
            id: new_id(),
            ..Default::default()
        }
        .into()
    }

    /// An AI message with a fresh id.
    pub fn ai(content: impl Into<Content>) -> Self {
        AiMessage {
            content: content.into(),
            id: new_id(),
            ..Default::default()
        }
        .into()
    }

    /// A successful tool result with a fresh id.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<Content>) -> Self {
        ToolMessage {
            content: content.into(),
            tool_call_id: tool_call_id.into(),
            id: new_id(),
            ..Default::default()
        }
        .into()
    }

    /// A failed tool result (`status: error`) with a fresh id.
    pub fn tool_error(tool_call_id: impl Into<String>, error: impl Into<Content>) -> Self {
        ToolMessage {
            content: error.into(),
            tool_call_id: tool_call_id.into(),
            id: new_id(),
            status: ToolStatus::Error,
            ..Default::default()
        }
        .into()
    }

    /// The kind-specific body.
    pub fn body(&self) -> &MessageBody {
        &self.body
    }

    /// Mutable access to the body. Clears the cached fingerprint.
    pub fn body_mut(&mut self) -> &mut MessageBody {
        self.fp = Fingerprint::default();
        &mut self.body
    }

    /// Unwraps the body.
    pub fn into_body(self) -> MessageBody {
        self.body
    }

    /// The protocol role.
    pub fn role(&self) -> Role {
        match &self.body {
            MessageBody::System(_) => Role::System,
            MessageBody::Human(_) => Role::User,
            MessageBody::Ai(_) => Role::Assistant,
            MessageBody::Tool(_) => Role::Tool,
        }
    }

    /// The stable id (empty until assigned; the agent assigns one when a message enters state).
    pub fn id(&self) -> &str {
        match &self.body {
            MessageBody::System(m) => &m.id,
            MessageBody::Human(m) => &m.id,
            MessageBody::Ai(m) => &m.id,
            MessageBody::Tool(m) => &m.id,
        }
    }

    /// The optional name.
    pub fn name(&self) -> Option<&str> {
        match &self.body {
            MessageBody::System(m) => m.name.as_deref(),
            MessageBody::Human(m) => m.name.as_deref(),
            MessageBody::Ai(m) => m.name.as_deref(),
            MessageBody::Tool(m) => m.name.as_deref(),
        }
    }

    /// The content.
    pub fn content(&self) -> &Content {
        match &self.body {
            MessageBody::System(m) => &m.content,
            MessageBody::Human(m) => &m.content,
            MessageBody::Ai(m) => &m.content,
            MessageBody::Tool(m) => &m.content,
        }
    }

    /// The concatenated text content.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        self.content().text()
    }

    /// The metadata map.
    pub fn metadata(&self) -> &Metadata {
        match &self.body {
            MessageBody::System(m) => &m.metadata,
            MessageBody::Human(m) => &m.metadata,
            MessageBody::Ai(m) => &m.metadata,
            MessageBody::Tool(m) => &m.metadata,
        }
    }

    fn parts_mut(&mut self) -> (&mut String, &mut Option<String>, &mut Metadata) {
        match self.body_mut() {
            MessageBody::System(m) => (&mut m.id, &mut m.name, &mut m.metadata),
            MessageBody::Human(m) => (&mut m.id, &mut m.name, &mut m.metadata),
            MessageBody::Ai(m) => (&mut m.id, &mut m.name, &mut m.metadata),
            MessageBody::Tool(m) => (&mut m.id, &mut m.name, &mut m.metadata),
        }
    }

    /// Sets the id.
    pub fn set_id(&mut self, id: impl Into<String>) {
        *self.parts_mut().0 = id.into();
    }

    /// Returns the message with the given id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.set_id(id);
        self
    }

    /// Returns the message with the given name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        *self.parts_mut().1 = Some(name.into());
        self
    }

    /// Returns the message with one metadata entry set.
    pub fn with_metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.parts_mut().2.insert(key.into(), value);
        self
    }

    /// Returns the message with these tool calls (AI messages only; others are unchanged).
    pub fn with_tool_calls(mut self, calls: Vec<ToolCall>) -> Self {
        if let MessageBody::Ai(m) = self.body_mut() {
            m.tool_calls = calls;
        }
        self
    }

    /// True when the metadata flag `key` is `true`.
    pub fn flag(&self, key: &str) -> bool {
        self.metadata().get(key).and_then(Value::as_bool) == Some(true)
    }

    /// The tool calls of an AI message (empty for other kinds).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match &self.body {
            MessageBody::Ai(m) => &m.tool_calls,
            _ => &[],
        }
    }

    /// The call id a tool message answers.
    pub fn tool_call_id(&self) -> Option<&str> {
        match &self.body {
            MessageBody::Tool(m) => Some(&m.tool_call_id),
            _ => None,
        }
    }

    /// The AI body, if this is an AI message.
    pub fn as_ai(&self) -> Option<&AiMessage> {
        match &self.body {
            MessageBody::Ai(m) => Some(m),
            _ => None,
        }
    }

    /// The tool body, if this is a tool message.
    pub fn as_tool(&self) -> Option<&ToolMessage> {
        match &self.body {
            MessageBody::Tool(m) => Some(m),
            _ => None,
        }
    }

    /// True for a human message.
    pub fn is_human(&self) -> bool {
        matches!(self.body, MessageBody::Human(_))
    }

    /// True for an AI message.
    pub fn is_ai(&self) -> bool {
        matches!(self.body, MessageBody::Ai(_))
    }

    /// True for a tool message.
    pub fn is_tool(&self) -> bool {
        matches!(self.body, MessageBody::Tool(_))
    }

    /// A 64-bit hash of everything that is serialized (id included), computed once and
    /// cached until the next [`body_mut`](Self::body_mut). Token-count caches key on
    /// `(id, fingerprint)` so that an edited message is recounted.
    ///
    /// The hash is foldhash's quality variant with a fixed seed: several times faster
    /// than SipHash on long text, and the same in every process of one build, so a
    /// summary stored by a sibling process is recognised. Another build may hash
    /// differently; a stored entry then simply misses. It is not a cryptographic digest.
    pub fn fingerprint(&self) -> u64 {
        self.digest().fingerprint
    }

    /// The fingerprint when it was already computed (and not invalidated since), without
    /// computing it: lets a cache tell a message it may have seen from one just built
    /// or read from storage.
    pub fn cached_fingerprint(&self) -> Option<u64> {
        self.fp.0.get().map(|d| d.fingerprint)
    }

    /// The fingerprint and the tool-call hashes of this message, computed together once
    /// and cached until the next [`body_mut`](Self::body_mut). See [`Digest`].
    pub fn digest(&self) -> Digest {
        *self.fp.0.get_or_init(|| {
            let mut h = FINGERPRINT_HASH.build_hasher();
            hash_body(&self.body, &mut h);
            let (call_ids, call_names) = match &self.body {
                MessageBody::Ai(ai) => {
                    ai.tool_calls.iter().fold((0u64, 0u64), |(ids, names), c| {
                        (
                            ids.wrapping_add(call_id_hash(&c.id)),
                            names | tool_name_bits(&c.name),
                        )
                    })
                }
                MessageBody::Tool(t) => (call_id_hash(&t.tool_call_id), 0),
                _ => (0, 0),
            };
            Digest {
                fingerprint: h.finish(),
                call_ids,
                call_names,
            }
        })
    }
}

/// The fingerprint's hash function (see [`Message::fingerprint`]).
const FINGERPRINT_HASH: foldhash::quality::FixedState =
    foldhash::quality::FixedState::with_seed(0x6b65_656c_6670_7231);

/// Hashes a JSON number by value without formatting it: integers by their integer
/// value, everything else by the bits of its `f64`.
fn hash_number(n: &serde_json::Number, h: &mut impl Hasher) {
    if let Some(i) = n.as_i64() {
        (0u8, i).hash(h);
    } else if let Some(u) = n.as_u64() {
        (1u8, u).hash(h);
    } else {
        (2u8, n.as_f64().unwrap_or(f64::NAN).to_bits()).hash(h);
    }
}

fn hash_value(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => {
            2u8.hash(h);
            hash_number(n, h);
        }
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(a) => {
            (4u8, a.len()).hash(h);
            a.iter().for_each(|x| hash_value(x, h));
        }
        Value::Object(o) => {
            (5u8, o.len()).hash(h);
            for (k, x) in o {
                k.hash(h);
                hash_value(x, h);
            }
        }
    }
}

fn hash_content(c: &Content, h: &mut impl Hasher) {
    match c {
        Content::Text(s) => (0u8, s).hash(h),
        Content::Parts(parts) => {
            (1u8, parts.len()).hash(h);
            for p in parts {
                match p {
                    ContentPart::Text(t) => {
                        (0u8, &t.text, t.extra.len()).hash(h);
                        for (k, v) in &t.extra {
                            k.hash(h);
                            hash_value(v, h);
                        }
                    }
                    ContentPart::Image(i) => {
                        1u8.hash(h);
                        hash_value(&i.image_url, h);
                    }
                    ContentPart::Other(v) => {
                        2u8.hash(h);
                        hash_value(v, h);
                    }
                }
            }
        }
    }
}

fn hash_common(id: &str, name: &Option<String>, meta: &Metadata, h: &mut impl Hasher) {
    id.hash(h);
    name.hash(h);
    meta.len().hash(h);
    for (k, v) in meta {
        k.hash(h);
        hash_value(v, h);
    }
}

fn hash_body(b: &MessageBody, h: &mut impl Hasher) {
    match b {
        MessageBody::System(m) => {
            0u8.hash(h);
            hash_content(&m.content, h);
            hash_common(&m.id, &m.name, &m.metadata, h);
        }
        MessageBody::Human(m) => {
            1u8.hash(h);
            hash_content(&m.content, h);
            hash_common(&m.id, &m.name, &m.metadata, h);
        }
        MessageBody::Ai(m) => {
            2u8.hash(h);
            hash_content(&m.content, h);
            hash_common(&m.id, &m.name, &m.metadata, h);
            m.tool_calls.len().hash(h);
            for c in &m.tool_calls {
                (&c.id, &c.name).hash(h);
                hash_value(&c.args, h);
            }
            m.usage
                .map(|u| (u.input_tokens, u.output_tokens, u.total_tokens))
                .hash(h);
            (m.response_metadata.len()).hash(h);
            for (k, v) in &m.response_metadata {
                k.hash(h);
                hash_value(v, h);
            }
        }
        MessageBody::Tool(m) => {
            3u8.hash(h);
            hash_content(&m.content, h);
            hash_common(&m.id, &m.name, &m.metadata, h);
            (&m.tool_call_id, m.status == ToolStatus::Error).hash(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_parts_keep_their_other_keys() {
        let line = r#"{"role":"user","content":[{"type":"text","text":"long system context","cache_control":{"type":"ephemeral"}}],"id":"u1"}"#;
        let m: Message = serde_json::from_str(line).unwrap();
        let Content::Parts(parts) = m.content() else {
            panic!("list content expected")
        };
        let ContentPart::Text(t) = &parts[0] else {
            panic!("a text part expected")
        };
        assert_eq!(t.text, "long system context");
        assert_eq!(t.extra["cache_control"], json!({"type": "ephemeral"}));
        let back: Value = serde_json::to_value(&m).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(line).unwrap());
        // The marker is content: moving it changes the fingerprint.
        let plain: Message = serde_json::from_str(
            r#"{"role":"user","content":[{"type":"text","text":"long system context"}],"id":"u1"}"#,
        )
        .unwrap();
        assert_ne!(m.fingerprint(), plain.fingerprint());
    }

    #[test]
    fn openai_shape_round_trips() {
        let line = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"dir\":\"/\"}"}}],"id":"a1"}"#;
        let m: Message = serde_json::from_str(line).unwrap();
        assert_eq!(m.role(), Role::Assistant);
        assert_eq!(m.tool_calls()[0].args, json!({"dir": "/"}));
        let again: Message = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(m, again);
    }

    #[test]
    fn digest_links_calls_and_results() {
        let ai = Message::ai("").with_tool_calls(vec![
            ToolCall::new("c1", "read_file", json!({"path": "/a"})),
            ToolCall::new("c2", "grep", json!({"q": "x"})),
        ]);
        let r1 = Message::tool("c2", "x found");
        let r2 = Message::tool("c1", "contents");
        let d = ai.digest();
        assert_eq!(d.fingerprint, ai.fingerprint());
        assert_eq!(
            d.call_ids,
            r1.digest().call_ids.wrapping_add(r2.digest().call_ids)
        );
        assert_ne!(d.call_ids, r1.digest().call_ids.wrapping_mul(2));
        for name in ["read_file", "grep"] {
            let bits = tool_name_bits(name);
            assert_eq!(d.call_names & bits, bits, "{name}");
        }
        assert_eq!(Message::human("hi").digest().call_ids, 0);
        let mut edited = ai.clone();
        if let MessageBody::Ai(m) = edited.body_mut() {
            m.tool_calls[0].id = "c3".into();
        }
        assert_ne!(edited.digest().call_ids, d.call_ids);
    }

    #[test]
    fn fingerprint_changes_on_edit_only() {
        let mut m = Message::human("hello").with_id("h1");
        let a = m.fingerprint();
        assert_eq!(a, m.clone().fingerprint());
        if let MessageBody::Human(h) = m.body_mut() {
            h.content = "hello!".into();
        }
        assert_ne!(a, m.fingerprint());
    }

    #[test]
    fn bad_arguments_name_the_call() {
        let line = r#"{"role":"assistant","content":"","tool_calls":[{"id":"c9","type":"function","function":{"name":"ls","arguments":"{oops"}}]}"#;
        let err = serde_json::from_str::<Message>(line)
            .unwrap_err()
            .to_string();
        assert!(err.contains("c9"), "{err}");
    }
}
