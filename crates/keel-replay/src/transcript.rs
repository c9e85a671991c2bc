//! A recorded conversation, checked before anything runs.
//!
//! A replay must not start on input that a live agent could never have produced: a tool
//! result that answers no call, a call that never got its result, two messages with one
//! id. [`Transcript::new`] runs the [shared check](crate::check) up front and names the
//! line, so a failed replay never gets as far as writing to a database.

use std::path::{Path, PathBuf};

use keel_core::dangling::{Pending, cancelled_result, dangling_tool_calls, insert_at_calls};
use keel_core::message::{Message, Role};

use crate::check::{Finding, Problem, Severity, check, derived_id};
use crate::input::{Limits, ReadError, read_messages};

/// Why a transcript cannot be used: the first error found, at its line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{problem}{}", at_line(*line), more_errors(*more))]
pub struct InvalidTranscript {
    /// 1-based line of the problem (0 for the whole file).
    pub line: usize,
    /// What is wrong.
    pub problem: Problem,
    /// How many more errors the file has (all listed by `keel check-transcript`).
    pub more: usize,
}

fn at_line(line: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!("line {line}: ")
    }
}

/// `FILE:LINE: problem`, as compilers and `keel check-transcript` print it.
fn located(path: &Path, e: &InvalidTranscript) -> String {
    let line = if e.line == 0 {
        String::new()
    } else {
        format!(":{}", e.line)
    };
    format!(
        "{}{line}: {}{}",
        path.display(),
        e.problem,
        more_errors(e.more)
    )
}

fn more_errors(more: usize) -> String {
    if more == 0 {
        String::new()
    } else {
        format!(" ({more} more error(s); `keel check-transcript` lists them all)")
    }
}

/// A transcript file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Missing, unreadable, or a line that is not a message (with its line number).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Every line is a message, but together they are not a conversation an agent could
    /// have had.
    #[error("{}", located(path, invalid))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line.
        invalid: InvalidTranscript,
    },
    /// No assistant message, so there is no model call to replay.
    #[error(
        "{}: the transcript has no assistant message, so there is no model call to replay; \
         each `\"role\": \"assistant\"` line is one model call",
        path.display()
    )]
    NoModelCalls {
        /// The file.
        path: PathBuf,
    },
}

/// A conversation ready to use: an optional system prompt (the first line, when it is
/// a system message) and the history, each message with the source line it came from,
/// plus what the check found worth a warning.
#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    system: Option<Message>,
    system_line: usize,
    messages: Vec<Message>,
    lines: Vec<usize>,
    warnings: Vec<Finding>,
}

/// Decides what `replay`, `compact` and `tokens` do with the findings of the shared
/// check: refuse on the first error, go on with the warnings. This is the one place
/// where the commands that run middleware decide about unanswered tool calls: a call
/// that the conversation moved on from (an interrupted run, a normal state for a real
/// agent) becomes a warning ([`Problem::PatchedCall`]), and [`Transcript::new`] answers
/// it with a synthetic cancelled result. `keel check-transcript` still reports it as an
/// error: a provider rejects it as it stands.
fn triage(findings: Vec<Finding>) -> Result<Vec<Finding>, InvalidTranscript> {
    let findings = findings.into_iter().map(|f| match f.problem {
        Problem::UnansweredCall {
            tool_call_id,
            name,
            next_line: Some(next_line),
        } => Finding {
            severity: Severity::Warning,
            problem: Problem::PatchedCall {
                tool_call_id,
                name,
                next_line,
            },
            ..f
        },
        _ => f,
    });
    let (mut errors, warnings): (Vec<Finding>, Vec<Finding>) =
        findings.partition(|f| f.severity == Severity::Error);
    if errors.is_empty() {
        return Ok(warnings);
    }
    let more = errors.len() - 1;
    let first = errors.swap_remove(0);
    Err(InvalidTranscript {
        line: first.line,
        problem: first.problem,
        more,
    })
}

impl Transcript {
    /// Checks `(line, message)` pairs, in file order, and builds a transcript.
    ///
    /// A leading system message becomes the system prompt of every request. A message
    /// without an id gets `line-<n>` (and a warning), so ids are stable across replays
    /// of the same file.
    pub fn new(entries: Vec<(usize, Message)>) -> Result<Self, InvalidTranscript> {
        let report = check(entries.iter().map(|(line, m)| (*line, m)));
        let warnings = triage(report.findings)?;
        let mut entries = entries.into_iter().peekable();
        let mut system = None;
        let mut system_line = 0;
        if let Some((_, first)) = entries.peek()
            && first.role() == Role::System
        {
            system = entries.next().map(|(line, m)| {
                system_line = line;
                with_stable_id(m, line)
            });
        }
        let (mut lines, mut messages): (Vec<usize>, Vec<Message>) = entries
            .map(|(line, m)| (line, with_stable_id(m, line)))
            .unzip();
        // Calls the conversation moved on from get their synthetic result, on the line
        // of the message that made them (the check above warned about each one).
        // One scan finds the calls; one walk each inserts their results and lines.
        let dangling = dangling_tool_calls(&messages, Pending::Keep);
        if !dangling.is_empty() {
            let by_index = lines.clone();
            lines = insert_at_calls(lines, &dangling, |d, _| by_index[d.ai_index]);
            messages = insert_at_calls(messages, &dangling, |d, _| cancelled_result(d));
        }
        Ok(Transcript {
            system,
            system_line,
            messages,
            lines,
            warnings,
        })
    }

    /// Reads and checks a JSONL transcript file (one message per line, blank lines
    /// skipped), through the reader every `keel` command shares.
    pub fn read(path: impl AsRef<Path>, limits: Limits) -> Result<Self, LoadError> {
        let path = path.as_ref();
        let entries = read_messages(path, limits)?;
        Self::new(entries).map_err(|invalid| LoadError::Invalid {
            path: path.to_owned(),
            invalid,
        })
    }

    /// Like [`Transcript::read`], and refuses a transcript without a model call.
    pub fn read_for_replay(path: impl AsRef<Path>, limits: Limits) -> Result<Self, LoadError> {
        let path = path.as_ref();
        let transcript = Self::read(path, limits)?;
        if transcript.model_calls() == 0 {
            return Err(LoadError::NoModelCalls {
                path: path.to_owned(),
            });
        }
        Ok(transcript)
    }

    /// Builds a transcript from messages alone, numbering them as lines 1, 2, ...
    pub fn from_messages(messages: Vec<Message>) -> Result<Self, InvalidTranscript> {
        Self::new(
            messages
                .into_iter()
                .enumerate()
                .map(|(i, m)| (i + 1, m))
                .collect(),
        )
    }

    /// The system prompt, if the transcript starts with one.
    pub fn system(&self) -> Option<&Message> {
        self.system.as_ref()
    }

    /// The conversation without the system prompt.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Every message in file order, the system prompt first (ids filled in).
    pub fn into_all_messages(self) -> Vec<Message> {
        self.system.into_iter().chain(self.messages).collect()
    }

    /// The source line of `messages()[index]`.
    pub fn line(&self, index: usize) -> usize {
        self.lines.get(index).copied().unwrap_or(0)
    }

    /// The source line of the system prompt (0 without one).
    pub fn system_line(&self) -> usize {
        self.system_line
    }

    /// What the check found worth a warning (in line order).
    pub fn warnings(&self) -> &[Finding] {
        &self.warnings
    }

    /// How many model calls a replay makes: one per assistant message.
    pub fn model_calls(&self) -> usize {
        self.messages.iter().filter(|m| m.is_ai()).count()
    }
}

fn with_stable_id(message: Message, line: usize) -> Message {
    if message.id().is_empty() {
        message.with_id(derived_id(line))
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
            InvalidTranscript {
                line: 4,
                problem: Problem::OrphanResult {
                    tool_call_id: "c9".into()
                },
                more: 0,
            }
        );
        assert!(err.to_string().starts_with("line 4:"), "{err}");
    }

    #[test]
    fn an_interrupted_call_is_patched_with_a_warning_and_duplicates_are_errors() {
        let t = Transcript::from_messages(vec![
            Message::human("hi").with_id("1"),
            Message::ai("")
                .with_tool_calls(vec![call("c1")])
                .with_id("2"),
            Message::human("hello?").with_id("3"),
            Message::ai("sorry").with_id("4"),
        ])
        .unwrap();
        assert!(
            matches!(t.warnings()[0].problem, Problem::PatchedCall { .. })
                && t.warnings()[0].line == 2,
            "{:?}",
            t.warnings()
        );
        assert!(t.warnings()[0].problem.to_string().contains("cancelled"));
        let ids: Vec<&str> = t.messages.iter().map(Message::id).collect();
        assert_eq!(ids, ["1", "2", "cancelled-c1", "3", "4"]);
        assert_eq!(t.lines, [1, 2, 2, 3, 4]);
        keel_core::pairs::check_pairs(&t.messages).unwrap();

        let err = Transcript::from_messages(vec![
            Message::human("hi").with_id("1"),
            Message::ai("x").with_id("1"),
        ])
        .unwrap_err();
        assert_eq!(
            err.problem,
            Problem::DuplicateId {
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
        let err = Transcript::read(&path, Limits::default()).unwrap_err();
        assert!(
            err.to_string().ends_with(
                "t.jsonl:3: orphan tool result: no assistant message issued tool call \"c9\""
            ),
            "{err}"
        );

        std::fs::write(&path, "{\"role\":\"user\",\"content\":\"hi\"}\n{oops\n").unwrap();
        let err = Transcript::read(&path, Limits::default()).unwrap_err();
        assert!(
            matches!(err, LoadError::Read(ReadError::Line { line: 2, .. })),
            "{err}"
        );

        let err =
            Transcript::read(dir.path().join("missing.jsonl"), Limits::default()).unwrap_err();
        assert!(
            err.to_string().contains("missing.jsonl: no such file"),
            "{err}"
        );
    }

    #[test]
    fn nothing_to_replay_is_an_error() {
        assert_eq!(
            Transcript::from_messages(vec![]).unwrap_err().problem,
            Problem::Empty
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(
            &path,
            "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"1\"}\n",
        )
        .unwrap();
        assert!(matches!(
            Transcript::read_for_replay(&path, Limits::default()),
            Err(LoadError::NoModelCalls { .. })
        ));
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
        assert_eq!(t.warnings().len(), 1);
    }
}
