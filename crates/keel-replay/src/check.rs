//! One check of a transcript's structure, shared by every `keel` subcommand.
//!
//! `check-transcript` prints every [`Finding`]; `replay`, `compact` and `tokens` refuse
//! on the first error and print the warnings, with the same words. A provider rejects a
//! request whose tool results and tool calls do not pair up (a result must follow the
//! assistant message that issued its call, and every call needs its result before the
//! conversation moves on), so those are errors; a message without an id is only a
//! warning, because keel derives a stable one (`line-N`).

use std::collections::HashMap;

use keel_core::message::{Message, Role};
use keel_core::pairs::{PairEvent, PairScanner};

use crate::input::LineProblem;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The transcript cannot be used as it is.
    Error,
    /// Usable, but worth knowing.
    Warning,
}

/// What is wrong at one line. The text never repeats the line: callers prefix
/// `FILE:LINE: `.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The file holds no message at all.
    #[error("the transcript is empty: expected one JSON message per line")]
    Empty,
    /// The line could not be read as a message.
    #[error(transparent)]
    Line(#[from] LineProblem),
    /// A message without an id.
    #[error("message has no id; keel calls it {derived:?}")]
    MissingId {
        /// The id keel uses instead.
        derived: String,
    },
    /// Two messages with one id.
    #[error("id {id:?} is already used on line {first_line}; ids must be unique")]
    DuplicateId {
        /// The id.
        id: String,
        /// Where it was first used.
        first_line: usize,
    },
    /// Two tool calls with one id.
    #[error("tool call id {id:?} is already used on line {first_line}; call ids must be unique")]
    DuplicateToolCallId {
        /// The call id.
        id: String,
        /// Where it was first issued.
        first_line: usize,
    },
    /// A tool result whose call was never issued.
    #[error("orphan tool result: no assistant message issued tool call {tool_call_id:?}")]
    OrphanResult {
        /// The call id it claims to answer.
        tool_call_id: String,
    },
    /// A tool result that comes after other messages followed its call.
    #[error(
        "orphan tool result: call {tool_call_id:?} was issued on line {issued_line}, but \
         other messages came between; a result must follow its call"
    )]
    LateResult {
        /// The call id.
        tool_call_id: String,
        /// Where the call was issued.
        issued_line: usize,
    },
    /// A second result for one call.
    #[error("second result for tool call {tool_call_id:?} (first on line {first_line})")]
    DuplicateResult {
        /// The call id.
        tool_call_id: String,
        /// The line of the first result.
        first_line: usize,
    },
    /// A tool call left without a result.
    #[error(
        "tool call {tool_call_id:?} ({name}) has no result{}",
        match next_line {
            Some(next) => format!(
                " before the next message on line {next}; providers reject the request"
            ),
            None => " yet (pending at the end of the transcript)".to_owned(),
        }
    )]
    UnansweredCall {
        /// The call id.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// The line of the message that came instead of the result; `None` at the end.
        next_line: Option<usize>,
    },
    /// A tool call left without a result by an interrupted run, which the commands that
    /// run middleware answer with a synthetic "cancelled" result (as an agent with
    /// keel-core's `PatchToolCallsMiddleware` does) instead of refusing the transcript.
    #[error(
        "tool call {tool_call_id:?} ({name}) has no result before the next message on line {next_line} (an interrupted run): it is answered with a synthetic result saying it was cancelled"
    )]
    PatchedCall {
        /// The call id.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// The line of the message that came instead of the result.
        next_line: usize,
    },
}

/// One problem, tied to a line (1-based; 0 for the whole file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The line.
    pub line: usize,
    /// How bad it is.
    pub severity: Severity,
    /// What is wrong.
    pub problem: Problem,
}

/// What a check found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Messages per role (system, user, assistant, tool).
    pub counts: [usize; 4],
    /// Problems, in line order.
    pub findings: Vec<Finding>,
}

impl Report {
    /// How many findings are errors.
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }

    /// The first error, if any.
    pub fn first_error(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.severity == Severity::Error)
    }
}

/// Checks messages one at a time, in file order. Memory grows with the number of ids,
/// never with the size of the messages.
pub struct Checker {
    report: Report,
    ids: HashMap<String, usize>,
    pairs: PairScanner,
    messages: usize,
}

impl Default for Checker {
    fn default() -> Self {
        Checker {
            report: Report::default(),
            ids: HashMap::new(),
            pairs: PairScanner::tracking_issued(),
            messages: 0,
        }
    }
}

impl Checker {
    /// A checker that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn push_finding(&mut self, line: usize, severity: Severity, problem: Problem) {
        self.report.findings.push(Finding {
            line,
            severity,
            problem,
        });
    }

    /// A line that is not a message.
    pub fn bad_line(&mut self, line: usize, problem: LineProblem) {
        self.messages += 1;
        self.push_finding(line, Severity::Error, Problem::Line(problem));
    }

    /// The message on `line`.
    pub fn message(&mut self, line: usize, message: &Message) {
        self.messages += 1;
        self.report.counts[match message.role() {
            Role::System => 0,
            Role::User => 1,
            Role::Assistant => 2,
            Role::Tool => 3,
        }] += 1;
        let id = if message.id().is_empty() {
            let derived = derived_id(line);
            self.push_finding(
                line,
                Severity::Warning,
                Problem::MissingId {
                    derived: derived.clone(),
                },
            );
            derived
        } else {
            message.id().to_owned()
        };
        if let Some(&first_line) = self.ids.get(&id) {
            self.push_finding(
                line,
                Severity::Error,
                Problem::DuplicateId { id, first_line },
            );
        } else {
            self.ids.insert(id, line);
        }

        let mut found = Vec::new();
        self.pairs.push(line, message, |e| found.push(e));
        for event in found {
            self.pair_finding(event);
        }
    }

    /// The words and severity of a pair finding (keel-core's [`PairScanner`], the
    /// check every part of Keel applies).
    fn pair_finding(&mut self, event: PairEvent) {
        let (line, severity, problem) = match event {
            PairEvent::OrphanResult {
                index,
                tool_call_id,
                issued_at: Some(issued_line),
            } => (
                index,
                Severity::Error,
                Problem::LateResult {
                    tool_call_id,
                    issued_line,
                },
            ),
            PairEvent::OrphanResult {
                index,
                tool_call_id,
                issued_at: None,
            } => (
                index,
                Severity::Error,
                Problem::OrphanResult { tool_call_id },
            ),
            PairEvent::DuplicateResult {
                index,
                tool_call_id,
                first_at,
            } => (
                index,
                Severity::Error,
                Problem::DuplicateResult {
                    tool_call_id,
                    first_line: first_at,
                },
            ),
            PairEvent::UnansweredCall {
                ai_index,
                tool_call_id,
                name,
                next,
            } => (
                ai_index,
                unanswered_severity(next),
                Problem::UnansweredCall {
                    tool_call_id,
                    name,
                    next_line: next,
                },
            ),
            PairEvent::ReusedCallId {
                index,
                tool_call_id,
                first_at,
            } => (
                index,
                Severity::Error,
                Problem::DuplicateToolCallId {
                    id: tool_call_id,
                    first_line: first_at,
                },
            ),
        };
        self.push_finding(line, severity, problem);
    }

    /// Ends the check.
    pub fn finish(mut self) -> Report {
        let mut found = Vec::new();
        std::mem::take(&mut self.pairs).finish(|e| found.push(e));
        for event in found {
            self.pair_finding(event);
        }
        if self.messages == 0 {
            self.push_finding(0, Severity::Error, Problem::Empty);
        }
        self.report.findings.sort_by_key(|f| f.line);
        self.report
    }
}

/// How bad an unanswered tool call is: an error when the conversation moved on without
/// its result (providers reject such a request), a warning at the end of the file (the
/// pending call of a run). The one place that decides it, for every subcommand.
pub fn unanswered_severity(next_line: Option<usize>) -> Severity {
    match next_line {
        Some(_) => Severity::Error,
        None => Severity::Warning,
    }
}

/// The id keel gives a message that has none: stable across runs on the same file.
pub fn derived_id(line: usize) -> String {
    format!("line-{line}")
}

/// Checks `(line, message)` pairs.
pub fn check<'a>(entries: impl IntoIterator<Item = (usize, &'a Message)>) -> Report {
    let mut checker = Checker::new();
    for (line, message) in entries {
        checker.message(line, message);
    }
    checker.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::ToolCall;
    use serde_json::json;

    fn errors(report: &Report) -> Vec<(usize, String)> {
        report
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| (f.line, f.problem.to_string()))
            .collect()
    }

    #[test]
    fn orphans_duplicates_and_missing_results_are_errors() {
        let calls = Message::ai("")
            .with_tool_calls(vec![
                ToolCall::new("c1", "ls", json!({})),
                ToolCall::new("c2", "cat", json!({})),
            ])
            .with_id("a1");
        let msgs = [
            Message::tool("ghost", "x").with_id("t0"),
            calls,
            Message::tool("c1", "x").with_id("t1"),
            Message::tool("c1", "x").with_id("t1"),
            Message::human("next").with_id("u2"),
            Message::tool("c2", "late").with_id("t3"),
        ];
        let report = check(msgs.iter().enumerate().map(|(i, m)| (i + 1, m)));
        let e = errors(&report);
        let lines: Vec<usize> = e.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [1, 2, 4, 4, 6], "{e:#?}");
        assert_eq!(
            e[1].1,
            "tool call \"c2\" (cat) has no result before the next message on line 5; providers reject the request"
        );
        assert!(
            e[4].1
                .contains("issued on line 2, but other messages came between")
        );
    }

    #[test]
    fn empty_missing_ids_and_pending_calls() {
        let report = check(std::iter::empty());
        assert_eq!(report.first_error().unwrap().problem, Problem::Empty);
        let mut m = Message::human("hi");
        m.set_id("");
        let pending = Message::ai("")
            .with_tool_calls(vec![ToolCall::new("c1", "ls", json!({}))])
            .with_id("a");
        let report = check([(3, &m), (4, &pending)]);
        assert_eq!(report.errors(), 0);
        assert_eq!(
            report.findings[0].problem.to_string(),
            "message has no id; keel calls it \"line-3\""
        );
        assert!(
            report.findings[1]
                .problem
                .to_string()
                .ends_with("(pending at the end of the transcript)")
        );
    }
}
