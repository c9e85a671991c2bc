//! A recorded conversation, checked before anything runs.
//!
//! A replay must not start on input that a live agent could never have produced: a tool
//! result that answers no call, a call that never got its result, two messages with one
//! id. [`Transcript::new`] finds these up front and names the line, so a failed replay
//! never gets as far as writing to a database.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use keel_core::message::{Message, Role};
use keel_core::transcript::{TranscriptError, read_jsonl};
use keel_summarization::pairs::{PairViolation, check_pairs};

/// Why a transcript cannot be replayed. Line numbers are 1-based lines of the source file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTranscript {
    /// No message at all.
    #[error("the transcript is empty: expected one JSON message per line")]
    Empty,
    /// No assistant message, so there is no model call to replay.
    #[error(
        "the transcript has no assistant message, so there is no model call to replay; each \
         `\"role\": \"assistant\"` line is one model call"
    )]
    NoModelCalls,
    /// Two messages share an id.
    #[error(
        "line {line}: message id {id:?} is already used on line {first_line}; ids must be unique"
    )]
    DuplicateId {
        /// The line of the second message.
        line: usize,
        /// The id.
        id: String,
        /// The line of the first message with that id.
        first_line: usize,
    },
    /// A tool result that answers no tool call of the assistant message before it.
    #[error(
        "line {line}: tool result for call {tool_call_id:?} matches no tool call of the \
         assistant message before it"
    )]
    UnmatchedToolResult {
        /// The line of the tool message.
        line: usize,
        /// The call id it claims to answer.
        tool_call_id: String,
    },
    /// A tool call whose result never follows.
    #[error("line {line}: tool call {tool_call_id:?} has no tool result after it")]
    MissingToolResult {
        /// The line of the assistant message.
        line: usize,
        /// The unanswered call id.
        tool_call_id: String,
    },
    /// A second result for the same call.
    #[error("line {line}: tool call {tool_call_id:?} is answered a second time")]
    DuplicateToolResult {
        /// The line of the second result.
        line: usize,
        /// The call id.
        tool_call_id: String,
    },
}

/// A transcript file that could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Missing, unreadable, or a line that is not a message (with its line number).
    #[error(transparent)]
    Read(#[from] TranscriptError),
    /// Every line is a message, but together they are not a conversation an agent could
    /// have had.
    #[error("{}: {source}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line.
        source: InvalidTranscript,
    },
}

/// A conversation ready to replay: an optional system prompt (the first line, when it is
/// a system message) and the history, each message with the source line it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    system: Option<Message>,
    messages: Vec<Message>,
    lines: Vec<usize>,
}

impl Transcript {
    /// Checks `(line, message)` pairs, in file order, and builds a transcript.
    ///
    /// A leading system message becomes the system prompt of every request. A message
    /// without an id gets `line-<n>`, so ids are stable across replays of the same file.
    pub fn new(
        entries: impl IntoIterator<Item = (usize, Message)>,
    ) -> Result<Self, InvalidTranscript> {
        let mut entries = entries.into_iter().peekable();
        let mut system = None;
        if let Some((_, first)) = entries.peek()
            && first.role() == Role::System
        {
            system = entries.next().map(|(line, m)| with_stable_id(m, line));
        }
        let mut messages = Vec::new();
        let mut lines = Vec::new();
        for (line, message) in entries {
            messages.push(with_stable_id(message, line));
            lines.push(line);
        }
        if messages.is_empty() && system.is_none() {
            return Err(InvalidTranscript::Empty);
        }
        if !messages.iter().any(Message::is_ai) {
            return Err(InvalidTranscript::NoModelCalls);
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        if let Some(s) = &system {
            seen.insert(s.id(), 1);
        }
        for (m, &line) in messages.iter().zip(&lines) {
            if let Some(&first_line) = seen.get(m.id()) {
                return Err(InvalidTranscript::DuplicateId {
                    line,
                    id: m.id().to_owned(),
                    first_line,
                });
            }
            seen.insert(m.id(), line);
        }
        check_pairs(&messages).map_err(|v| match v {
            PairViolation::OrphanResult {
                index,
                tool_call_id,
            } => InvalidTranscript::UnmatchedToolResult {
                line: lines[index],
                tool_call_id,
            },
            PairViolation::MissingResult {
                index,
                tool_call_id,
            } => InvalidTranscript::MissingToolResult {
                line: lines[index],
                tool_call_id,
            },
            PairViolation::DuplicateResult {
                index,
                tool_call_id,
            } => InvalidTranscript::DuplicateToolResult {
                line: lines[index],
                tool_call_id,
            },
        })?;
        Ok(Transcript {
            system,
            messages,
            lines,
        })
    }

    /// Reads and checks a JSONL transcript file (one message per line, blank lines
    /// skipped), through the reader every `keel` command shares.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref();
        let messages = read_jsonl(path)?;
        // The shared reader skips blank lines; find each message's real line so errors
        // point at it. If the file changed in between, fall back to positions.
        let lines: Vec<usize> = std::fs::read_to_string(path)
            .map(|text| {
                text.lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim().is_empty())
                    .map(|(i, _)| i + 1)
                    .collect()
            })
            .unwrap_or_default();
        let numbered: Vec<(usize, Message)> = if lines.len() == messages.len() {
            lines.into_iter().zip(messages).collect()
        } else {
            messages
                .into_iter()
                .enumerate()
                .map(|(i, m)| (i + 1, m))
                .collect()
        };
        Self::new(numbered).map_err(|source| LoadError::Invalid {
            path: path.to_owned(),
            source,
        })
    }

    /// Builds a transcript from messages alone, numbering them as lines 1, 2, ...
    pub fn from_messages(messages: Vec<Message>) -> Result<Self, InvalidTranscript> {
        Self::new(messages.into_iter().enumerate().map(|(i, m)| (i + 1, m)))
    }

    /// The system prompt, if the transcript starts with one.
    pub fn system(&self) -> Option<&Message> {
        self.system.as_ref()
    }

    /// The conversation without the system prompt.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The source line of `messages()[index]`.
    pub fn line(&self, index: usize) -> usize {
        self.lines.get(index).copied().unwrap_or(0)
    }

    /// How many model calls a replay makes: one per assistant message.
    pub fn model_calls(&self) -> usize {
        self.messages.iter().filter(|m| m.is_ai()).count()
    }
}

fn with_stable_id(message: Message, line: usize) -> Message {
    if message.id().is_empty() {
        message.with_id(format!("line-{line}"))
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::ToolCall;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "ls", json!({}))
    }

    #[test]
    fn a_leading_system_message_becomes_the_prompt() {
        let t = Transcript::from_messages(vec![
            Message::system("be brief").with_id("s"),
            Message::human("hi").with_id("h"),
            Message::ai("hello").with_id("a"),
        ])
        .unwrap();
        assert_eq!(t.system().unwrap().text(), "be brief");
        assert_eq!(t.messages().len(), 2);
        assert_eq!(t.line(0), 2);
        assert_eq!(t.model_calls(), 1);
    }

    #[test]
    fn missing_ids_are_derived_from_the_line() {
        let mut h = Message::human("hi");
        h.set_id("");
        let t = Transcript::from_messages(vec![h, Message::ai("x").with_id("a")]).unwrap();
        assert_eq!(t.messages()[0].id(), "line-1");
    }

    #[test]
    fn an_unmatched_tool_result_names_its_line() {
        let err = Transcript::from_messages(vec![
            Message::human("hi").with_id("1"),
            Message::ai("")
                .with_tool_calls(vec![call("c1")])
                .with_id("2"),
            Message::tool("c1", "ok").with_id("3"),
            Message::tool("c9", "stray").with_id("4"),
            Message::ai("done").with_id("5"),
        ])
        .unwrap_err();
        assert_eq!(
            err,
            InvalidTranscript::UnmatchedToolResult {
                line: 4,
                tool_call_id: "c9".into()
            }
        );
        assert!(err.to_string().starts_with("line 4:"), "{err}");
    }

    #[test]
    fn an_unanswered_call_and_duplicates_are_errors() {
        let err = Transcript::from_messages(vec![
            Message::human("hi").with_id("1"),
            Message::ai("")
                .with_tool_calls(vec![call("c1")])
                .with_id("2"),
            Message::human("hello?").with_id("3"),
            Message::ai("sorry").with_id("4"),
        ])
        .unwrap_err();
        assert!(
            matches!(err, InvalidTranscript::MissingToolResult { line: 2, .. }),
            "{err}"
        );

        let err = Transcript::from_messages(vec![
            Message::human("hi").with_id("1"),
            Message::ai("x").with_id("1"),
        ])
        .unwrap_err();
        assert_eq!(
            err,
            InvalidTranscript::DuplicateId {
                line: 2,
                id: "1".into(),
                first_line: 1
            }
        );
    }

    #[test]
    fn reading_a_file_names_the_real_line_of_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(
            &path,
            "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"1\"}\n\n\
             {\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":\"c9\",\"id\":\"2\"}\n\
             {\"role\":\"assistant\",\"content\":\"ok\",\"id\":\"3\"}\n",
        )
        .unwrap();
        let err = Transcript::read(&path).unwrap_err();
        assert!(err.to_string().ends_with("t.jsonl: line 3: tool result for call \"c9\" matches no tool call of the assistant message before it"), "{err}");

        std::fs::write(&path, "{\"role\":\"user\",\"content\":\"hi\"}\n{oops\n").unwrap();
        let err = Transcript::read(&path).unwrap_err();
        assert!(
            matches!(err, LoadError::Read(TranscriptError::Line { line: 2, .. })),
            "{err}"
        );

        let err = Transcript::read(dir.path().join("missing.jsonl")).unwrap_err();
        assert!(err.to_string().contains("missing.jsonl"), "{err}");
    }

    #[test]
    fn nothing_to_replay_is_an_error() {
        assert_eq!(
            Transcript::from_messages(vec![]),
            Err(InvalidTranscript::Empty)
        );
        assert_eq!(
            Transcript::from_messages(vec![Message::human("hi").with_id("1")]),
            Err(InvalidTranscript::NoModelCalls)
        );
    }

    #[test]
    fn pending_calls_of_the_last_message_are_allowed() {
        let t = Transcript::from_messages(vec![
            Message::human("hi").with_id("1"),
            Message::ai("")
                .with_tool_calls(vec![call("c1")])
                .with_id("2"),
        ])
        .unwrap();
        assert_eq!(t.model_calls(), 1);
    }
}
