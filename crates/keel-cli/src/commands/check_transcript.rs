//! `keel check-transcript FILE`: is this JSONL transcript one a provider would accept?
//!
//! Errors: a line that is not a message (bad JSON, unknown role, tool arguments that are
//! not JSON), a message without an id, an id used twice, a tool result that answers no
//! call of the AI message right before it (an orphan), a result given twice, and a tool
//! call left without a result when the conversation moves on. A tool call still
//! unanswered at the end of the file is only a warning: it is the pending call of a run.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use keel_core::message::{Message, Role};
use keel_core::transcript::TranscriptError;

use super::{CommandResult, print};

/// Arguments of `keel check-transcript`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The transcript: one JSON message per line (OpenAI chat shape plus `id`). Blank
    /// lines are skipped.
    pub file: PathBuf,
    /// Print only problems, not the summary line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The transcript is invalid.
    Error,
    /// Valid, but worth knowing.
    Warning,
}

/// One problem, tied to a line (1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The line it was found on.
    pub line: usize,
    /// How bad it is.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
}

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Messages parsed, per role (system, user, assistant, tool).
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

    fn error(&mut self, line: usize, message: String) {
        self.findings.push(Finding {
            line,
            severity: Severity::Error,
            message,
        });
    }

    fn warning(&mut self, line: usize, message: String) {
        self.findings.push(Finding {
            line,
            severity: Severity::Warning,
            message,
        });
    }
}

/// The tool calls of the latest AI message, waiting for their results.
struct OpenCalls {
    line: usize,
    /// call id → (tool name, line of its result once answered)
    calls: Vec<(String, String, Option<usize>)>,
}

impl OpenCalls {
    fn close(self, report: &mut Report, next_line: Option<usize>) {
        for (id, name, answered) in self.calls {
            if answered.is_some() {
                continue;
            }
            match next_line {
                Some(next) => report.error(
                    self.line,
                    format!(
                        "tool call {id:?} ({name}) has no result before the next message on line {next}; providers reject the request"
                    ),
                ),
                None => report.warning(
                    self.line,
                    format!("tool call {id:?} ({name}) has no result yet (pending at end of transcript)"),
                ),
            }
        }
    }
}

/// Checks a transcript's text. Lines are numbered and blank lines skipped as in
/// [`keel_core::transcript::parse_jsonl`], but a bad line does not stop the check: every
/// problem in the file is reported.
pub fn check(text: &str) -> Report {
    let mut report = Report::default();
    let mut ids: HashMap<String, usize> = HashMap::new();
    // Every tool call id ever issued, with its line: tells an orphan from a late result.
    let mut issued: HashMap<String, usize> = HashMap::new();
    let mut open: Option<OpenCalls> = None;

    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let message: Message = match serde_json::from_str(raw) {
            Ok(m) => m,
            Err(e) => {
                report.error(line, format!("not a valid message: {e}"));
                continue;
            }
        };
        report.counts[match message.role() {
            Role::System => 0,
            Role::User => 1,
            Role::Assistant => 2,
            Role::Tool => 3,
        }] += 1;

        if message.id().is_empty() {
            report.error(line, "message has no id".to_owned());
        } else if let Some(first) = ids.insert(message.id().to_owned(), line) {
            report.error(
                line,
                format!("id {:?} is already used on line {first}", message.id()),
            );
        }

        if let Some(call_id) = message.tool_call_id() {
            let answered = open
                .as_mut()
                .and_then(|o| o.calls.iter_mut().find(|(id, _, _)| id == call_id));
            match answered {
                Some((_, _, Some(first))) => report.error(
                    line,
                    format!("second result for tool call {call_id:?} (first on line {first})"),
                ),
                Some((_, _, slot)) => *slot = Some(line),
                None => match issued.get(call_id) {
                    Some(at) => report.error(
                        line,
                        format!(
                            "orphan tool result: call {call_id:?} was issued on line {at}, but other messages came between"
                        ),
                    ),
                    None => report.error(
                        line,
                        format!("orphan tool result: no AI message issued tool call {call_id:?}"),
                    ),
                },
            }
            continue;
        }

        if let Some(previous) = open.take() {
            previous.close(&mut report, Some(line));
        }
        let calls = message.tool_calls();
        if !calls.is_empty() {
            for call in calls {
                if let Some(at) = issued.insert(call.id.clone(), line) {
                    report.error(
                        line,
                        format!("tool call id {:?} is already used on line {at}", call.id),
                    );
                }
            }
            open = Some(OpenCalls {
                line,
                calls: calls
                    .iter()
                    .map(|c| (c.id.clone(), c.name.clone(), None))
                    .collect(),
            });
        }
    }
    if let Some(previous) = open.take() {
        previous.close(&mut report, None);
    }
    report.findings.sort_by_key(|f| f.line);
    report
}

/// Runs the command: prints `FILE:LINE: error: ...` per finding and a summary; exit code
/// 1 when there is any error.
pub fn run(args: Args) -> CommandResult {
    let text = std::fs::read_to_string(&args.file).map_err(|source| TranscriptError::Io {
        path: args.file.clone(),
        source,
    })?;
    let report = check(&text);
    let path = args.file.display();
    let mut out = String::new();
    for f in &report.findings {
        let kind = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let _ = writeln!(out, "{path}:{}: {kind}: {}", f.line, f.message);
    }
    let errors = report.errors();
    if !args.quiet {
        let [s, u, a, t] = report.counts;
        let total: usize = report.counts.iter().sum();
        let verdict = if errors == 0 {
            "ok".to_owned()
        } else {
            format!("{errors} error(s)")
        };
        let _ = writeln!(
            out,
            "{path}: {total} messages ({s} system, {u} user, {a} assistant, {t} tool): {verdict}"
        );
    }
    print(&out)?;
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const AI_CALLS: &str = r#"{"role":"assistant","content":null,"id":"a1","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"cat","arguments":"{\"p\":1}"}}]}"#;

    fn errors(report: &Report) -> Vec<(usize, &str)> {
        report
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| (f.line, f.message.as_str()))
            .collect()
    }

    #[test]
    fn a_clean_transcript_has_no_findings() {
        let text = [
            r#"{"role":"user","content":"hi","id":"u1"}"#,
            AI_CALLS,
            r#"{"role":"tool","content":"x","tool_call_id":"c1","id":"t1"}"#,
            r#"{"role":"tool","content":"y","tool_call_id":"c2","id":"t2","status":"error"}"#,
            "",
            r#"{"role":"assistant","content":"done","id":"a2"}"#,
        ]
        .join("\n");
        let report = check(&text);
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        assert_eq!(report.counts, [0, 1, 2, 2]);
    }

    #[test]
    fn bad_json_is_reported_with_its_line_and_checking_goes_on() {
        let text = "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"u1\"}\n{not json\n{\"role\":\"robot\",\"content\":\"\",\"id\":\"r\"}\n";
        let report = check(text);
        let e = errors(&report);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].0, 2);
        assert!(e[0].1.starts_with("not a valid message"));
        assert_eq!(e[1].0, 3);
        assert_eq!(report.counts[1], 1);
    }

    #[test]
    fn orphans_duplicates_and_missing_results_are_errors() {
        let text = [
            r#"{"role":"tool","content":"x","tool_call_id":"ghost","id":"t0"}"#,
            AI_CALLS,
            r#"{"role":"tool","content":"x","tool_call_id":"c1","id":"t1"}"#,
            r#"{"role":"tool","content":"x","tool_call_id":"c1","id":"t1"}"#,
            r#"{"role":"user","content":"next","id":"u2"}"#,
            r#"{"role":"tool","content":"late","tool_call_id":"c2","id":"t3"}"#,
            r#"{"role":"user","content":"no id"}"#,
        ]
        .join("\n");
        let report = check(&text);
        let e = errors(&report);
        let lines: Vec<usize> = e.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [1, 2, 4, 4, 6, 7], "{e:#?}");
        assert!(e[0].1.contains("no AI message issued tool call \"ghost\""));
        assert!(
            e[1].1
                .contains("\"c2\" (cat) has no result before the next message on line 5")
        );
        assert!(
            e.iter()
                .any(|(l, m)| *l == 4 && m.contains("already used on line 3"))
        );
        assert!(
            e.iter()
                .any(|(l, m)| *l == 4 && m.contains("second result"))
        );
        assert!(
            e[4].1
                .contains("issued on line 2, but other messages came between")
        );
        assert_eq!(e[5].1, "message has no id");
    }

    #[test]
    fn a_pending_call_at_the_end_is_a_warning() {
        let report = check(AI_CALLS);
        assert_eq!(report.errors(), 0);
        assert_eq!(report.findings.len(), 2);
        assert!(
            report
                .findings
                .iter()
                .all(|f| f.severity == Severity::Warning)
        );
    }
}
