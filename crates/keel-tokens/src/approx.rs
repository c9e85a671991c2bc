//! LangChain's approximate token counter, with exact parity, plus a script-aware option.
//!
//! [`ApproximateCounter::langchain`] gives the same number as LangChain's
//! `count_tokens_approximately` (langchain-core 1.x) for the same messages: per message
//! `ceil(chars / chars_per_token) + 3`, where `chars` is the length in code points of
//! the text content (text blocks of list content; string blocks by length; other
//! blocks by the length of their Python `repr`), plus `repr(tool_calls)` when the
//! content is a string, plus the tool call id of a tool message, the OpenAI role name
//! and the name; every `image`/`image_url` block adds a flat 85 tokens. Anthropic chat
//! models use 3.3 characters per token ([`ApproximateCounter::anthropic`]).
//!
//! The optional usage scaling LangChain applies for triggers lives in
//! [`crate::scaling`], because it works with any counter.
//!
//! [`ApproximateCounter::script_aware`] changes only how text characters are weighed:
//! CJK, kana, Hangul and emoji count about one token or more each instead of a quarter,
//! which is what real tokenizers do (chars/4 under-counts CJK 2-3x).

use keel_core::message::{Content, ContentPart, Message, MessageBody};
use keel_core::tokens::TokenCounter;
use keel_core::tool::ToolSpec;
use serde_json::Value;

use crate::pyrepr;
use crate::script;

/// LangChain's default characters per token.
pub const DEFAULT_CHARS_PER_TOKEN: f64 = 4.0;
/// LangChain's characters per token for Anthropic chat models.
pub const ANTHROPIC_CHARS_PER_TOKEN: f64 = 3.3;
/// LangChain's extra tokens per message (role and message delimiters).
pub const DEFAULT_EXTRA_TOKENS_PER_MESSAGE: u64 = 3;
/// LangChain's flat cost of one image block.
pub const DEFAULT_TOKENS_PER_IMAGE: u64 = 85;

/// A configuration value out of range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ApproxConfigError {
    /// `chars_per_token` must be a finite number greater than zero.
    #[error("chars_per_token = {value}: must be a finite number > 0")]
    CharsPerToken {
        /// The rejected value.
        value: f64,
    },
}

/// How text characters are turned into tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CharWeighting {
    /// Every code point weighs the same: `ceil(chars / chars_per_token)` (LangChain).
    Uniform,
    /// Code points weigh by script: Latin at `1 / chars_per_token`, CJK and emoji at
    /// about one token or more each. See [`crate::script`].
    ScriptAware,
}

/// The approximate counter. Cheap to construct, no tokenizer to load.
#[derive(Clone, Debug)]
pub struct ApproximateCounter {
    name: &'static str,
    chars_per_token: f64,
    extra_tokens_per_message: u64,
    tokens_per_image: u64,
    count_name: bool,
    weighting: CharWeighting,
}

impl Default for ApproximateCounter {
    fn default() -> Self {
        Self::langchain()
    }
}

impl ApproximateCounter {
    /// LangChain's defaults: 4.0 characters per token, 3 per message, 85 per image.
    pub fn langchain() -> Self {
        ApproximateCounter {
            name: "approximate",
            chars_per_token: DEFAULT_CHARS_PER_TOKEN,
            extra_tokens_per_message: DEFAULT_EXTRA_TOKENS_PER_MESSAGE,
            tokens_per_image: DEFAULT_TOKENS_PER_IMAGE,
            count_name: true,
            weighting: CharWeighting::Uniform,
        }
    }

    /// LangChain's counter for Anthropic chat models (3.3 characters per token).
    pub fn anthropic() -> Self {
        ApproximateCounter {
            name: "approximate-anthropic",
            chars_per_token: ANTHROPIC_CHARS_PER_TOKEN,
            ..Self::langchain()
        }
    }

    /// The counter LangChain's summarization middleware picks for a provider:
    /// Anthropic's ratio for `anthropic`, the default otherwise.
    pub fn for_provider(provider: &str) -> Self {
        if provider.eq_ignore_ascii_case("anthropic") {
            Self::anthropic()
        } else {
            Self::langchain()
        }
    }

    /// The same counter with the script-aware character weighting (see [`CharWeighting`]).
    /// Its name gets a `-script` suffix so reports never confuse it with the parity counter.
    pub fn script_aware(mut self) -> Self {
        self.weighting = CharWeighting::ScriptAware;
        self.name = match self.name {
            "approximate-anthropic" => "approximate-anthropic-script",
            _ => "approximate-script",
        };
        self
    }

    /// The same counter with another characters-per-token ratio.
    pub fn with_chars_per_token(mut self, chars_per_token: f64) -> Result<Self, ApproxConfigError> {
        if !chars_per_token.is_finite() || chars_per_token <= 0.0 {
            return Err(ApproxConfigError::CharsPerToken {
                value: chars_per_token,
            });
        }
        self.chars_per_token = chars_per_token;
        Ok(self)
    }

    /// The same counter with another per-message overhead.
    pub fn with_extra_tokens_per_message(mut self, extra: u64) -> Self {
        self.extra_tokens_per_message = extra;
        self
    }

    /// The same counter with another flat per-image cost.
    pub fn with_tokens_per_image(mut self, tokens: u64) -> Self {
        self.tokens_per_image = tokens;
        self
    }

    /// Whether message names count (LangChain's `count_name`, default true).
    pub fn with_count_name(mut self, count_name: bool) -> Self {
        self.count_name = count_name;
        self
    }

    /// Characters per token.
    pub fn chars_per_token(&self) -> f64 {
        self.chars_per_token
    }

    /// The character weighting in use.
    pub fn weighting(&self) -> CharWeighting {
        self.weighting
    }

    /// Tokens for a run of text measured so far, rounded up like LangChain (per message).
    fn tokens_of(&self, chars: &CharTally) -> u64 {
        let units = match self.weighting {
            CharWeighting::Uniform => chars.total as f64 / self.chars_per_token,
            CharWeighting::ScriptAware => chars.weighted_tokens(self.chars_per_token),
        };
        units.ceil() as u64
    }

    fn tally(&self) -> CharTally {
        CharTally {
            script_aware: self.weighting == CharWeighting::ScriptAware,
            ..CharTally::default()
        }
    }
}

/// Characters of one message, kept per script class only when script-aware.
#[derive(Default)]
struct CharTally {
    script_aware: bool,
    total: usize,
    classes: script::ClassCounts,
}

impl CharTally {
    fn add(&mut self, s: &str) {
        if self.script_aware {
            self.classes.add(s);
        } else {
            // Python's len(): code points.
            self.total += s.chars().count();
        }
    }

    /// Adds a Python text form (a repr or `json.dumps`) without building it. `measure`
    /// returns the text's length and reports each non-ASCII character the text copies
    /// as is; every other character is ASCII, hence Latin when weighing by script.
    fn add_py_text(&mut self, measure: impl FnOnce(&mut dyn FnMut(char)) -> usize) {
        if self.script_aware {
            let classes = &mut self.classes;
            let mut non_ascii = 0usize;
            let len = measure(&mut |c| {
                non_ascii += 1;
                classes.add(c.encode_utf8(&mut [0; 4]));
            });
            classes.latin += len.saturating_sub(non_ascii);
        } else {
            self.total += measure(&mut |_| {});
        }
    }

    fn weighted_tokens(&self, chars_per_token: f64) -> f64 {
        self.classes.tokens(chars_per_token)
    }
}

/// Python's `block.get("type", "")` compared with a literal.
fn block_type(block: &serde_json::Map<String, Value>) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

impl TokenCounter for ApproximateCounter {
    fn name(&self) -> &str {
        self.name
    }

    fn count_message(&self, message: &Message) -> u64 {
        let mut chars = self.tally();
        let mut images = 0u64;
        match message.content() {
            Content::Text(s) => chars.add(s),
            Content::Parts(parts) => {
                for part in parts {
                    match part {
                        ContentPart::Text(t) => chars.add(&t.text),
                        ContentPart::Image(_) => images += 1,
                        ContentPart::Other(Value::String(s)) => chars.add(s),
                        ContentPart::Other(Value::Object(block)) => match block_type(block) {
                            Some("image" | "image_url") => images += 1,
                            Some("text") => {
                                if let Some(Value::String(text)) = block.get("text") {
                                    chars.add(text);
                                }
                            }
                            _ => chars
                                .add_py_text(|visit| pyrepr::map_repr_len_visiting(block, visit)),
                        },
                        ContentPart::Other(other) => {
                            chars.add_py_text(|visit| pyrepr::repr_len_visiting(other, visit))
                        }
                    }
                }
            }
        }
        match message.body() {
            // List content (Anthropic format) already carries its tool_use blocks.
            MessageBody::Ai(ai)
                if matches!(ai.content, Content::Text(_)) && !ai.tool_calls.is_empty() =>
            {
                chars.add_py_text(|visit| tool_calls_repr_len_visiting(&ai.tool_calls, visit));
            }
            MessageBody::Tool(t) => chars.add(&t.tool_call_id),
            _ => {}
        }
        chars.add(message.role().as_str());
        if self.count_name
            && let Some(name) = message.name()
        {
            chars.add(name);
        }
        self.tokens_of(&chars) + images * self.tokens_per_image + self.extra_tokens_per_message
    }

    fn count_text(&self, text: &str) -> u64 {
        let mut chars = self.tally();
        chars.add(text);
        self.tokens_of(&chars)
    }

    /// LangChain's tools term: `ceil(sum(len(json.dumps({name, description,
    /// parameters}))) / chars_per_token)`, once for all tools.
    fn count_tools(&self, tools: &[ToolSpec]) -> u64 {
        if tools.is_empty() {
            return 0;
        }
        let mut chars = self.tally();
        for tool in tools {
            // json.dumps output is ASCII: nothing to report to a script-aware tally.
            chars.add_py_text(|_| tool_dumps_len(tool));
        }
        self.tokens_of(&chars)
    }
}

// The fixed text of `repr(message.tool_calls)`, shared by the writer and the length.
const CALL_NAME: &str = "{'name': ";
const CALL_ARGS: &str = ", 'args': ";
const CALL_ID: &str = ", 'id': ";
const CALL_END: &str = ", 'type': 'tool_call'}";
const LIST_SEP: &str = ", ";

/// `repr(message.tool_calls)`: a list of LangChain `ToolCall` dicts with keys `name`,
/// `args`, `id`, `type` (`'tool_call'`).
pub fn write_tool_calls_repr(calls: &[keel_core::message::ToolCall], out: &mut String) {
    out.push('[');
    for (i, call) in calls.iter().enumerate() {
        if i > 0 {
            out.push_str(LIST_SEP);
        }
        out.push_str(CALL_NAME);
        pyrepr::write_str_repr(&call.name, out);
        out.push_str(CALL_ARGS);
        pyrepr::write_repr(&call.args, out);
        out.push_str(CALL_ID);
        pyrepr::write_str_repr(&call.id, out);
        out.push_str(CALL_END);
    }
    out.push(']');
}

/// `len(repr(message.tool_calls))` in code points, without building the text: always
/// equal to the length of what [`write_tool_calls_repr`] writes.
pub fn tool_calls_repr_len(calls: &[keel_core::message::ToolCall]) -> usize {
    tool_calls_repr_len_visiting(calls, &mut |_| {})
}

/// [`tool_calls_repr_len`], also calling `on_non_ascii` with every non-ASCII code point
/// the repr copies unescaped (see [`pyrepr::repr_len_visiting`]).
pub fn tool_calls_repr_len_visiting<F: FnMut(char) + ?Sized>(
    calls: &[keel_core::message::ToolCall],
    on_non_ascii: &mut F,
) -> usize {
    let fixed = CALL_NAME.len() + CALL_ARGS.len() + CALL_ID.len() + CALL_END.len();
    let mut len = 2 + calls.len().saturating_sub(1) * LIST_SEP.len() + calls.len() * fixed;
    for call in calls {
        len += pyrepr::str_repr_len_visiting(&call.name, on_non_ascii);
        len += pyrepr::repr_len_visiting(&call.args, on_non_ascii);
        len += pyrepr::str_repr_len_visiting(&call.id, on_non_ascii);
    }
    len
}

/// `len(json.dumps({"name": ..., "description": ..., "parameters": ...}))`.
fn tool_dumps_len(tool: &ToolSpec) -> usize {
    const FIXED: [&str; 4] = [
        "{\"name\": ",
        ", \"description\": ",
        ", \"parameters\": ",
        "}",
    ];
    FIXED.iter().map(|s| s.len()).sum::<usize>()
        + pyrepr::json_str_dumps_len(&tool.name)
        + pyrepr::json_str_dumps_len(&tool.description)
        + pyrepr::json_dumps_len(&tool.parameters)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::ToolCall;
    use serde_json::json;

    #[test]
    fn string_message_matches_formula() {
        let c = ApproximateCounter::langchain();
        // "hello world" (11) + "user" (4) = 15 -> ceil(15/4) = 4, + 3.
        assert_eq!(c.count_message(&Message::human("hello world")), 7);
        // Anthropic: ceil(15/3.3) = 5, + 3.
        assert_eq!(
            ApproximateCounter::anthropic().count_message(&Message::human("hello world")),
            8
        );
    }

    #[test]
    fn tool_calls_count_only_with_string_content() {
        let call = ToolCall::new("c1", "ls", json!({"dir": "/"}));
        let mut repr = String::new();
        write_tool_calls_repr(std::slice::from_ref(&call), &mut repr);
        assert_eq!(
            repr,
            "[{'name': 'ls', 'args': {'dir': '/'}, 'id': 'c1', 'type': 'tool_call'}]"
        );
        let c = ApproximateCounter::langchain();
        let m = Message::ai("").with_tool_calls(vec![call]);
        let expected = (repr.chars().count() + "assistant".len()).div_ceil(4) as u64 + 3;
        assert_eq!(c.count_message(&m), expected);
    }

    #[test]
    fn tool_calls_and_tools_are_measured_like_their_text() {
        let calls = vec![
            ToolCall::new("c1", "ls", json!({"dir": "/", "all": true})),
            ToolCall::new("c'2", "grep", json!({"q": "中文 \"x\"", "n": [1, -2.5e-7]})),
        ];
        let mut repr = String::new();
        write_tool_calls_repr(&calls, &mut repr);
        assert_eq!(tool_calls_repr_len(&calls), repr.chars().count());
        assert_eq!(tool_calls_repr_len(&[]), 2);

        let tool = ToolSpec {
            name: "grep".into(),
            description: "Search files for a pattern: \"é\" \u{1f600}".into(),
            parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        };
        // serde_json sorts keys, Python keeps them in order: same length either way.
        let dumped = pyrepr::py_json_dumps(&json!({
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }));
        assert_eq!(tool_dumps_len(&tool), dumped.chars().count());
    }

    /// The script-aware tally of a measured text equals the tally of the text itself.
    #[test]
    fn script_aware_tally_sees_the_non_ascii_of_the_repr() {
        let calls = vec![ToolCall::new(
            "c1",
            "翻訳",
            json!({"text": "こんにちは 😀 мир \u{200b}", "k": "plain"}),
        )];
        let mut repr = String::new();
        write_tool_calls_repr(&calls, &mut repr);
        let mut direct = script::ClassCounts::default();
        direct.add(&repr);
        let mut tally = CharTally {
            script_aware: true,
            ..CharTally::default()
        };
        tally.add_py_text(|visit| tool_calls_repr_len_visiting(&calls, visit));
        assert_eq!(tally.classes, direct);
    }

    #[test]
    fn rejects_bad_ratio() {
        assert!(
            ApproximateCounter::langchain()
                .with_chars_per_token(0.0)
                .is_err()
        );
        assert!(
            ApproximateCounter::langchain()
                .with_chars_per_token(f64::NAN)
                .is_err()
        );
    }
}
