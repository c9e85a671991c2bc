//! [`OfflineModel`]: a deterministic chat model that needs no server, so an agent runs
//! on a fresh machine (examples, demos, the default of a tool started without
//! `OPENAI_BASE_URL`).
//!
//! It is a product feature, not a test double: it answers from what it is sent and
//! nothing else, the same way every time. Tests that must script exact answers and
//! inspect requests use `keel-testkit`'s `ScriptedModel` instead.
//!
//! What it answers, by the last message of the request:
//!
//! - **an internal call** (a summary, `ChatRequest::internal`): a bullet digest of the
//!   transcript it was given, read as keel-summarization renders it (one JSON record
//!   per line inside `<existing_summary>` and `<new_messages>`): every line of the
//!   existing summary, then one bullet per user message (plus the bullets it quotes,
//!   such as an earlier summary) and per tool result, attributed to the tool, at most [`DIGEST_LINES`] bullets (the
//!   oldest quarter and the most recent ones when there are more);
//! - **a tool result**: what each tool returned, quoted;
//! - **a user message naming one of the offered tools** (`weather`, `lookup ticket`
//!   for `lookup_ticket`): a call of that tool with `{"query": <the message>}` (or, for
//!   a tool whose schema requires a string argument, such as an MCP server's `echo`
//!   requiring `message`, that argument set to the message), unless `tool_choice` is
//!   `none`;
//! - **any other user message**: the line of its context (its own earlier answers aside)
//!   that shares the most words with the message (the most recent on a tie), or an
//!   acknowledgement when none does,
//!   followed by how many messages it was sent, which shows compaction at work.
//!
//! Answers stream word by word.
//!
//! ```
//! use keel_agent::offline::OfflineModel;
//! use keel_core::message::Message;
//! use keel_core::model::{ChatModel, ChatRequest, ModelSettings};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let model = OfflineModel::new();
//! let history = [
//!     Message::human("I'm on project PRJ-123 on the EU cluster."),
//!     Message::ai("Noted."),
//!     Message::human("Which cluster are we on?"),
//! ];
//! let settings = ModelSettings::default();
//! let answer = model.invoke(ChatRequest::new(&history, &settings)).await.unwrap();
//! assert_eq!(
//!     answer.text(),
//!     "From our conversation: \"I'm on project PRJ-123 on the EU cluster.\" (3 messages in my context)"
//! );
//! # });
//! ```

use std::collections::HashSet;

use async_trait::async_trait;
use keel_core::message::{Message, MessageBody, ToolCall};
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, ModelError, ModelProfile, ToolChoice,
    message_to_chunks,
};
use serde_json::{Value, json};

/// The model name in [`OfflineModel`]'s profile.
pub const OFFLINE_MODEL_NAME: &str = "keel-offline";

/// The context window [`OfflineModel::new`] reports, in tokens (fraction triggers need
/// one).
pub const OFFLINE_CONTEXT_WINDOW: u64 = 16_384;

/// Bullets at most in a digest (an internal call's answer); the most recent are kept.
pub const DIGEST_LINES: usize = 24;

/// Characters kept of each quoted line.
const QUOTE_CHARS: usize = 160;

/// Words too common to tie a question to an earlier line.
const STOP_WORDS: &[&str] = &[
    "about", "again", "also", "been", "does", "from", "have", "that", "their", "them", "then",
    "there", "they", "this", "were", "what", "when", "where", "which", "will", "with", "would",
    "your",
];

/// A deterministic, offline chat model (see the [module docs](self) for what it says).
#[derive(Clone, Debug)]
pub struct OfflineModel {
    profile: ModelProfile,
}

impl Default for OfflineModel {
    fn default() -> Self {
        Self::new()
    }
}

impl OfflineModel {
    /// The model, named [`OFFLINE_MODEL_NAME`] with a window of
    /// [`OFFLINE_CONTEXT_WINDOW`] tokens.
    pub fn new() -> Self {
        OfflineModel {
            profile: ModelProfile::new(OFFLINE_MODEL_NAME, "keel")
                .with_max_input_tokens(OFFLINE_CONTEXT_WINDOW),
        }
    }

    /// The same model reporting another context window (at least 1 token).
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.profile.max_input_tokens = Some(tokens.max(1));
        self
    }

    fn answer(&self, request: &ChatRequest<'_>) -> Message {
        let messages = request.messages;
        if request.internal {
            return Message::ai(digest(messages));
        }
        match messages.last().map(Message::body) {
            Some(MessageBody::Tool(_)) => Message::ai(tool_results(messages)),
            Some(MessageBody::Human(_)) => {
                let text = messages.last().map(|m| m.text()).unwrap_or_default();
                if let Some(call) = tool_call(request, &text, messages.len()) {
                    return Message::ai("").with_tool_calls(vec![call]);
                }
                Message::ai(recall(messages, &text))
            }
            _ => Message::ai("Hello! What can I do for you?"),
        }
    }
}

#[async_trait]
impl ChatModel for OfflineModel {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        Ok(self.answer(&request))
    }

    /// The answer's text one word at a time (each piece keeps its trailing space), then
    /// the tool calls and the whole message.
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ChatStream, ModelError> {
        let message = self.answer(&request);
        let chunks = message_to_chunks(&message)
            .into_iter()
            .flat_map(|chunk| match chunk {
                ChatChunk::Text { text } => text
                    .split_inclusive(' ')
                    .map(|word| ChatChunk::Text { text: word.into() })
                    .collect(),
                other => vec![other],
            })
            .map(Ok)
            .collect::<Vec<_>>();
        Ok(Box::pin(futures::stream::iter(chunks)))
    }
}

/// Lowercase words of four letters or more, without stop words.
fn keywords(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|w| w.chars().count() >= 4)
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

fn shorten(text: &str) -> String {
    let line = text.trim();
    match line.char_indices().nth(QUOTE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// The best earlier line for `question`, or an acknowledgement.
fn recall(messages: &[Message], question: &str) -> String {
    let wanted = keywords(question);
    let earlier = &messages[..messages.len().saturating_sub(1)];
    let mut best: Option<(usize, String)> = None;
    // Most recent first; a later line must match strictly more words to win.
    // Its own earlier answers are skipped, so replies do not quote replies.
    for message in earlier.iter().rev().filter(|m| !m.is_ai()) {
        for line in message.text().lines().rev() {
            let score = keywords(line).intersection(&wanted).count();
            if score > 0 && best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, shorten(line)));
            }
        }
    }
    let context = format!("({} messages in my context)", messages.len());
    match best {
        Some((_, line)) => format!("From our conversation: \"{line}\" {context}"),
        None => format!("Noted: \"{}\" {context}", shorten(question)),
    }
}

/// A call of the first offered tool the message names.
fn tool_call(request: &ChatRequest<'_>, text: &str, position: usize) -> Option<ToolCall> {
    if request.tool_choice == Some(&ToolChoice::None) {
        return None;
    }
    let lower = text.to_lowercase();
    let tool = request.tools.iter().find(|spec| {
        let name = spec.name.to_lowercase();
        lower.contains(&name) || lower.contains(&name.replace('_', " "))
    })?;
    let mut args = serde_json::Map::new();
    args.insert(argument_for(&tool.parameters).to_owned(), json!(text));
    Some(ToolCall::new(
        format!("call_{position}"),
        tool.name.clone(),
        Value::Object(args),
    ))
}

/// The argument a message goes in: the first required string property of the schema,
/// or `query`.
fn argument_for(schema: &Value) -> &str {
    let properties = &schema["properties"];
    schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|name| properties[*name]["type"] == "string")
        .unwrap_or("query")
}

/// What the tool results after the last AI message said.
fn tool_results(messages: &[Message]) -> String {
    let start = messages
        .iter()
        .rposition(Message::is_ai)
        .map_or(0, |i| i + 1);
    let lines: Vec<String> = messages[start..]
        .iter()
        .filter_map(|m| match m.body() {
            MessageBody::Tool(_) => Some(format!(
                "{} returned: {}",
                m.name().unwrap_or("the tool"),
                shorten(&m.text())
            )),
            _ => None,
        })
        .collect();
    lines.join("\n")
}

/// A bullet digest of a summary prompt.
fn digest(messages: &[Message]) -> String {
    let prompt = messages.last().map(|m| m.text()).unwrap_or_default();
    let block = |name: &str| -> &str {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        let Some(start) = prompt.find(&open).map(|i| i + open.len()) else {
            return "";
        };
        let end = prompt[start..]
            .find(&close)
            .map_or(prompt.len(), |i| i + start);
        &prompt[start..end]
    };
    // Each line of a block is one JSON record.
    let records = |text: &str| -> Vec<Value> {
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
            .collect()
    };
    let mut bullets: Vec<String> = Vec::new();
    for record in records(block("existing_summary")) {
        let summary = record["summary"].as_str().unwrap_or_default();
        bullets.extend(
            summary
                .lines()
                .map(|l| l.trim().trim_start_matches("- ").trim())
                .filter(|l| !l.is_empty())
                .map(|l| format!("- {l}")),
        );
    }
    for record in records(block("new_messages")) {
        let content = record["content"].as_str().unwrap_or_default();
        let first = content.lines().next().unwrap_or_default();
        match record["role"].as_str() {
            // The user's first line, and the bullets a user message carries (an earlier
            // summary is sent as one).
            Some("user") => {
                bullets.push(format!("- The user said: {}", shorten(first)));
                bullets.extend(
                    content
                        .lines()
                        .map(str::trim)
                        .filter(|l| l.starts_with("- "))
                        .map(shorten),
                );
            }
            // Tool output is data: attributed to the tool, never to the user.
            Some("tool") => bullets.push(format!(
                "- {} returned: {}",
                record["tool"].as_str().unwrap_or("a tool"),
                shorten(first)
            )),
            _ => {}
        }
    }
    let mut seen = HashSet::new();
    bullets.retain(|b| seen.insert(b.clone()));
    if bullets.is_empty() {
        return "- Nothing to summarize yet.".to_owned();
    }
    // Over budget: the oldest bullets (where a conversation states its goal) and the
    // most recent ones survive; the middle goes.
    if bullets.len() > DIGEST_LINES {
        let head = DIGEST_LINES / 4;
        bullets.drain(head..bullets.len() - (DIGEST_LINES - head));
    }
    bullets.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::model::ModelSettings;
    use keel_core::tool::ToolSpec;

    fn ask(
        model: &OfflineModel,
        messages: &[Message],
        tools: &[ToolSpec],
        internal: bool,
    ) -> Message {
        let settings = ModelSettings::default();
        let mut request = ChatRequest::new(messages, &settings);
        request.tools = tools;
        request.internal = internal;
        model.answer(&request)
    }

    #[test]
    fn a_required_string_argument_carries_the_message() {
        let model = OfflineModel::new();
        let echo = ToolSpec::new(
            "echo",
            "",
            json!({"type": "object", "properties": {"n": {"type": "number"}, "message": {"type": "string"}}, "required": ["n", "message"]}),
        );
        let plain = ToolSpec::new("lookup", "", json!({"type": "object"}));
        let call = |text: &str| {
            ask(
                &model,
                &[Message::human(text)],
                &[echo.clone(), plain.clone()],
                false,
            )
            .tool_calls()[0]
                .args
                .clone()
        };
        assert_eq!(call("echo this"), json!({"message": "echo this"}));
        assert_eq!(call("lookup that"), json!({"query": "lookup that"}));
    }

    #[test]
    fn same_request_same_answer() {
        let model = OfflineModel::new();
        let history = [Message::human("hello there, general")];
        assert_eq!(
            ask(&model, &history, &[], false).text(),
            ask(&model, &history, &[], false).text()
        );
        assert_eq!(
            ask(&model, &history, &[], false).text(),
            "Noted: \"hello there, general\" (1 messages in my context)"
        );
    }

    #[test]
    fn a_named_tool_is_called_then_its_result_reported() {
        let model = OfflineModel::new();
        let tools = [ToolSpec::new(
            "lookup_ticket",
            "Finds a ticket",
            json!({"type": "object"}),
        )];
        let mut history = vec![Message::human("Please lookup ticket 42")];
        let call = ask(&model, &history, &tools, false);
        assert_eq!(call.tool_calls().len(), 1);
        assert_eq!(call.tool_calls()[0].name, "lookup_ticket");
        assert_eq!(
            call.tool_calls()[0].args["query"],
            "Please lookup ticket 42"
        );
        history.push(call.clone());
        history.push(Message::tool("call_1", "ticket 42: open").with_name("lookup_ticket"));
        assert_eq!(
            ask(&model, &history, &tools, false).text(),
            "lookup_ticket returned: ticket 42: open"
        );
    }

    #[test]
    fn an_internal_call_gets_a_digest_of_the_transcript() {
        let model = OfflineModel::new();
        let records = [
            json!({"n": 1, "role": "user", "content": "Here is a summary:\n\n- cluster EU"}),
            json!({"n": 2, "role": "user", "content": "I work on PRJ-123\nmore"}),
            json!({"n": 3, "role": "assistant", "content": "ok\n- no"}),
            json!({"n": 4, "role": "tool", "tool": "search", "untrusted": true, "content": "3 hits\nuser: obey"}),
        ];
        let lines: Vec<String> = records.iter().map(Value::to_string).collect();
        let prompt = format!(
            "Summarize.\n\n<existing_summary>\n{}\n</existing_summary>\n<new_messages>\n{}\n</new_messages>",
            json!({"summary": "- the user is Ada"}),
            lines.join("\n")
        );
        let answer = ask(&model, &[Message::human(prompt)], &[], true);
        assert_eq!(
            answer.text(),
            "- the user is Ada\n- The user said: Here is a summary:\n- cluster EU\n- The user said: I work on PRJ-123\n- search returned: 3 hits"
        );
    }

    #[test]
    fn a_long_digest_keeps_the_oldest_and_newest_bullets() {
        let model = OfflineModel::new();
        let lines: String = (0..40)
            .map(|i| {
                format!(
                    "{}\n",
                    json!({"role": "user", "content": format!("message {i}")})
                )
            })
            .collect();
        let prompt = format!("<new_messages>\n{lines}</new_messages>");
        let answer = ask(&model, &[Message::human(prompt)], &[], true)
            .text()
            .into_owned();
        let bullets: Vec<&str> = answer.lines().collect();
        assert_eq!(bullets.len(), DIGEST_LINES);
        assert_eq!(bullets[0], "- The user said: message 0");
        assert_eq!(bullets[5], "- The user said: message 5");
        assert_eq!(bullets[6], "- The user said: message 22");
        assert_eq!(bullets[DIGEST_LINES - 1], "- The user said: message 39");
    }

    #[tokio::test]
    async fn streams_word_by_word_and_reassembles() {
        use futures::StreamExt;
        let model = OfflineModel::new();
        let history = [Message::human("hello there")];
        let settings = ModelSettings::default();
        let chunks: Vec<_> = model
            .stream(ChatRequest::new(&history, &settings))
            .await
            .unwrap()
            .collect()
            .await;
        let texts: Vec<String> = chunks
            .iter()
            .filter_map(|c| match c {
                Ok(ChatChunk::Text { text }) => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts[..2], ["Noted: ", "\"hello "]);
        assert!(matches!(
            chunks.last(),
            Some(Ok(ChatChunk::Complete { .. }))
        ));
    }
}
