//! `keel eval`: would the model, asked about a fact after the whole conversation, have
//! the evidence in front of it?
//!
//! A probe is one line of a JSONL file, `{"question", "needles": [...], "stale": [...]}`.
//! The transcript is replayed through the configured stack (as [`crate::prepare`] builds
//! it), then each question is asked as the next user message after the whole transcript
//! ([`crate::ReplayEngine::run_with_questions`]) and the request the model would receive
//! is checked:
//!
//! - **found**: every needle appears in the request (case-insensitively), anywhere the
//!   model reads: the system prompt, message text, tool-call arguments;
//! - **stale as current**: a stale value (an earlier value of a corrected fact) appears
//!   as a whole value, not marked as superseded (`was OLD`, `(was OLD)`), and no needle
//!   appears after its last such occurrence. The latest statement in the request wins:
//!   an old message sent verbatim and followed by its correction is not stale; a summary
//!   line that still says the old value with nothing after it is;
//! - **tokens**: the request's tokens against sending the system prompt and the last 100
//!   messages verbatim (Langflow's default window), counted the same way.
//!
//! With a model ([`ask`]), the request is also sent and the answer is checked for the
//! needles. What these figures can and cannot say is in `docs/memory-eval.md`.

use std::path::{Path, PathBuf};

use keel_core::message::Message;
use keel_core::model::{ChatModel, ChatRequest};
use serde::{Deserialize, Serialize};

use crate::engine::{BASELINE_WINDOW, SentRequest};
use crate::input::{self, Limits, LineError};
use crate::setup::{FinishError, Prepared};

/// The most probes one file may hold: each costs one request through the whole stack.
pub const MAX_PROBES: usize = 10_000;

/// One probe: a question and what the request must hold to answer it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// An optional label, echoed in the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Asked as the next user message after the whole transcript.
    pub question: String,
    /// Texts that must all appear (case-insensitively) for the evidence to be there.
    pub needles: Vec<String>,
    /// Earlier values of a corrected fact, which must not be presented as current.
    #[serde(default)]
    pub stale: Vec<String>,
}

/// A probes file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The file could not be read.
    #[error("--probes: cannot read {}: {problem}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong, in words.
        problem: String,
    },
    /// One line is not a usable probe.
    #[error("{}:{line}: {problem}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        problem: String,
    },
    /// No probe at all.
    #[error(
        "{}: no probes; write one JSON object per line: \
         {{\"question\": \"...\", \"needles\": [\"...\"], \"stale\": [\"...\"]}}",
        path.display()
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// More than [`MAX_PROBES`].
    #[error("{}: more than {max} probes; split the file", path.display())]
    TooMany {
        /// The file.
        path: PathBuf,
        /// The cap.
        max: usize,
    },
}

impl Probe {
    /// Parses and checks one line.
    pub fn parse(text: &str) -> Result<Probe, String> {
        let probe: Probe = serde_json::from_str(text).map_err(|e| {
            format!(
                "not a probe ({e}); a probe is {{\"question\": \"...\", \"needles\": [\"...\"], \
                 \"stale\": [\"...\"]}}"
            )
        })?;
        if probe.question.trim().is_empty() {
            return Err("`question` is empty; it is asked as the next user message".into());
        }
        if probe.needles.is_empty() {
            return Err("`needles` is empty; list at least one text the request must hold".into());
        }
        for (field, list) in [("needles", &probe.needles), ("stale", &probe.stale)] {
            if let Some(i) = list.iter().position(|n| n.trim().is_empty()) {
                return Err(format!(
                    "`{field}[{i}]` is empty; every entry must be a text"
                ));
            }
        }
        Ok(probe)
    }

    /// True when every needle appears in `text` (case-insensitively).
    pub fn found_in(&self, text: &str) -> bool {
        self.missing_in(text).is_empty()
    }

    /// The needles `text` does not hold (case-insensitively, a run of whitespace
    /// counting as one space: a needle `EU cluster` is in `eu\ncluster`).
    pub fn missing_in(&self, text: &str) -> Vec<String> {
        self.missing_in_folded(&[&fold(text)])
    }

    /// The needles that none of `parts` holds, each part already [`fold`]ed.
    fn missing_in_folded(&self, parts: &[&str]) -> Vec<String> {
        self.needles
            .iter()
            .filter(|n| {
                let needle = fold(n);
                !parts.iter().any(|p| p.contains(needle.as_str()))
            })
            .cloned()
            .collect()
    }

    /// The stale values `text` presents as current (see the [module docs](self)).
    pub fn stale_as_current(&self, text: &str) -> Vec<String> {
        let lower = text.to_lowercase();
        let needles: Vec<String> = self.needles.iter().map(|n| n.to_lowercase()).collect();
        self.stale
            .iter()
            .filter(|s| {
                let Some(last) = last_unmarked(&lower, &s.to_lowercase()) else {
                    return false;
                };
                // A later statement of the current value says which one holds.
                !needles.iter().all(|n| lower[last..].contains(n.as_str()))
            })
            .cloned()
            .collect()
    }
}

/// Reads a probes file (JSONL; blank lines skipped), naming the line of the first bad
/// probe.
pub fn read_probes(path: &Path, limits: Limits) -> Result<Vec<Probe>, ProbeError> {
    let read_error = |problem: String| ProbeError::Read {
        path: path.to_owned(),
        problem,
    };
    let mut reader = input::open(path, limits).map_err(|e| match e {
        input::ReadError::Io { error, .. } => read_error(input::describe_io(&error)),
        input::ReadError::Directory { .. } => {
            read_error("it is a directory; name a .jsonl file".into())
        }
        other => read_error(other.to_string()),
    })?;
    let mut probes = Vec::new();
    while let Some(next) = reader.next_line() {
        let (line, text) = match next {
            Ok((_, text)) if text.trim().is_empty() => continue,
            Ok(ok) => ok,
            Err((line, LineError::Problem(problem))) => {
                return Err(ProbeError::Line {
                    path: path.to_owned(),
                    line,
                    problem: problem.to_string(),
                });
            }
            Err((_, LineError::Io(error))) => return Err(read_error(input::describe_io(&error))),
        };
        if probes.len() == MAX_PROBES {
            return Err(ProbeError::TooMany {
                path: path.to_owned(),
                max: MAX_PROBES,
            });
        }
        probes.push(Probe::parse(text).map_err(|problem| ProbeError::Line {
            path: path.to_owned(),
            line,
            problem,
        })?);
    }
    if probes.is_empty() {
        return Err(ProbeError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(probes)
}

/// `text` lowercased, with every run of whitespace as one space: the form needles and
/// requests are compared in.
pub fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            if !space {
                out.push(' ');
            }
            space = true;
        } else {
            space = false;
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The byte offset of the last occurrence of `value` in `text` as a whole value (not
/// inside a longer word or number) that is not marked as superseded (`was value`).
fn last_unmarked(text: &str, value: &str) -> Option<usize> {
    let edge = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let starts_word = value.chars().next().is_some_and(char::is_alphanumeric);
    let ends_word = value.chars().next_back().is_some_and(char::is_alphanumeric);
    text.match_indices(value)
        .filter(|(i, _)| {
            let before = text[..*i].chars().next_back();
            let after = text[i + value.len()..].chars().next();
            let glued = (starts_word && edge(before)) || (ends_word && edge(after));
            let marked = text[..*i].ends_with("was ") || text[..*i].ends_with("(was ");
            !glued && !marked
        })
        .map(|(i, _)| i)
        .last()
}

/// Everything the model reads in a request: the system prompt, message text and
/// tool-call arguments, one message per line.
pub fn request_text(request: &SentRequest) -> String {
    messages_text(request.system.iter().chain(request.messages.iter()))
}

/// The text of `messages` as [`request_text`] writes it.
fn messages_text<'a>(messages: impl Iterator<Item = &'a Message>) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str(&m.text());
        out.push('\n');
        for c in m.tool_calls() {
            out.push_str(&c.args.to_string());
            out.push('\n');
        }
    }
    out
}

/// What the model answered to one probe's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// The answer's text (empty when the call failed).
    pub text: String,
    /// Whether the answer holds every needle.
    pub found: bool,
    /// The needles it does not hold.
    pub missing: Vec<String>,
    /// Why the call failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeResult {
    /// 1-based position in the probes file (blank lines not counted).
    pub index: usize,
    /// The probe's `id`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The question asked.
    pub question: String,
    /// Whether the request holds every needle.
    pub found: bool,
    /// The needles the request does not hold.
    pub missing: Vec<String>,
    /// Stale values the request presents as current.
    pub stale_as_current: Vec<String>,
    /// Messages sent (without the system prompt; 0 when a middleware answered).
    pub request_messages: usize,
    /// Tokens of the request as sent.
    pub request_tokens: u64,
    /// Tokens of the system prompt, the last 100 messages and the question, verbatim.
    pub baseline_tokens: u64,
    /// Whether that last-100 window (system prompt, last 99 messages, question) holds
    /// every needle: what a plain window would have found.
    pub found_in_last100: bool,
    /// Tokens of the system prompt, the whole transcript and the question, verbatim.
    pub full_history_tokens: u64,
    /// The model's answer, with `--model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

/// Sums over the probes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EvalTotals {
    /// Probes asked.
    pub probes: usize,
    /// Probes whose request holds every needle.
    pub found: usize,
    /// Probes with a stale value that is in the stale list at all.
    pub with_stale: usize,
    /// Requests presenting a stale value as current.
    pub stale_as_current: usize,
    /// Tokens sent over all probe requests.
    pub sent_tokens: u64,
    /// Tokens of the last-100 baseline over all probe requests.
    pub baseline_last100_tokens: u64,
    /// `sent_tokens / baseline_last100_tokens` (0 when the baseline is 0).
    pub sent_vs_last100: f64,
    /// Probes whose last-100 window holds every needle.
    pub found_in_last100: usize,
    /// Tokens of the full history (system prompt, whole transcript, question) over all
    /// probe requests.
    pub full_history_tokens: u64,
    /// `sent_tokens / full_history_tokens` (0 when that is 0).
    pub sent_vs_full_history: f64,
    /// Answers holding every needle, with `--model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<usize>,
    /// Model calls that failed, with `--model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_errors: Option<usize>,
}

/// What `keel eval` measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvalReport {
    /// Messages in the transcript (without the system prompt).
    pub transcript_messages: usize,
    /// One result per probe, in file order.
    pub probes: Vec<ProbeResult>,
    /// Sums.
    pub totals: EvalTotals,
}

fn share(n: usize, of: usize) -> f64 {
    if of == 0 {
        100.0
    } else {
        100.0 * n as f64 / of as f64
    }
}

impl EvalReport {
    /// The report as a table for people.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:>4}  {:<5}  {:<5}  {:>8}  {:>8}  question",
            "#", "found", "stale", "tokens", "last100"
        );
        for p in &self.probes {
            render_probe(&mut out, p);
        }
        self.render_totals(&mut out);
        out
    }

    /// The closing lines: evidence found, stale values, tokens, and answers (when a
    /// model answered).
    fn render_totals(&self, out: &mut String) {
        use std::fmt::Write as _;
        let t = &self.totals;
        let _ = writeln!(
            out,
            "\nevidence found for {}/{} probes ({:.1} %); stale value presented as current in {} of {} requests with stale values",
            t.found,
            t.probes,
            share(t.found, t.probes),
            t.stale_as_current,
            t.with_stale,
        );
        let _ = writeln!(
            out,
            "tokens sent {} against {} for the last {BASELINE_WINDOW} messages ({:.1} %) and {} for the full history ({:.1} %), over {} transcript messages",
            t.sent_tokens,
            t.baseline_last100_tokens,
            100.0 * t.sent_vs_last100,
            t.full_history_tokens,
            100.0 * t.sent_vs_full_history,
            self.transcript_messages,
        );
        let _ = writeln!(
            out,
            "the last {BASELINE_WINDOW} messages alone would hold the evidence for {}/{} probes ({:.1} %)",
            t.found_in_last100,
            t.probes,
            share(t.found_in_last100, t.probes),
        );
        if let (Some(answered), Some(errors)) = (t.answered, t.answer_errors) {
            let _ = writeln!(
                out,
                "answers holding every needle: {answered}/{} ({:.1} %); failed calls: {errors}",
                t.probes,
                share(answered, t.probes),
            );
        }
    }
}

/// One probe's row, and its `missing`, `presented as current` and answer lines.
fn render_probe(out: &mut String, p: &ProbeResult) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "{:>4}  {:<5}  {:<5}  {:>8}  {:>8}  {}",
        p.index,
        if p.found { "yes" } else { "NO" },
        if p.stale_as_current.is_empty() {
            "-"
        } else {
            "STALE"
        },
        p.request_tokens,
        p.baseline_tokens,
        p.question
    );
    if !p.missing.is_empty() {
        let _ = writeln!(out, "{:>4}  missing: {}", "", p.missing.join(", "));
    }
    if !p.stale_as_current.is_empty() {
        let _ = writeln!(
            out,
            "{:>4}  presented as current: {}",
            "",
            p.stale_as_current.join(", ")
        );
    }
    if let Some(a) = &p.answer {
        match &a.error {
            Some(e) => {
                let _ = writeln!(out, "{:>4}  answer: call failed: {e}", "");
            }
            None => {
                let _ = writeln!(
                    out,
                    "{:>4}  answer {}: {}",
                    "",
                    if a.found {
                        "holds the needles"
                    } else {
                        "MISSES"
                    },
                    a.text.lines().next().unwrap_or("")
                );
            }
        }
    }
}

/// Replays the transcript of `prepared`, asks every probe, and checks each request (and,
/// with `model`, each answer).
pub async fn evaluate(
    prepared: &Prepared,
    probes: &[Probe],
    model: Option<&dyn ChatModel>,
) -> Result<EvalReport, FinishError> {
    Ok(evaluate_with_requests(prepared, probes, model).await?.0)
}

/// [`evaluate`], also returning each probe's request (`None` where a middleware answered
/// without calling the model), in probe order.
pub async fn evaluate_with_requests(
    prepared: &Prepared,
    probes: &[Probe],
    model: Option<&dyn ChatModel>,
) -> Result<(EvalReport, Vec<Option<SentRequest>>), FinishError> {
    let questions: Vec<String> = probes.iter().map(|p| p.question.clone()).collect();
    let engine = prepared.engine();
    let (_, requests) = engine
        .run_with_questions(&prepared.transcript, &questions, &mut crate::Quiet)
        .await?;
    let counter = engine.counter();
    let transcript = &prepared.transcript;
    let messages = transcript.messages();
    let tail = &messages[messages.len().saturating_sub(BASELINE_WINDOW - 1)..];
    // What the last-100 window reads, without its question (added per probe).
    let tail_text = fold(&messages_text(transcript.system().into_iter().chain(tail)));
    let mut full: Vec<Message> = messages.to_vec();
    full.push(Message::human(String::new()));
    let mut totals = EvalTotals {
        probes: probes.len(),
        ..EvalTotals::default()
    };
    let mut results = Vec::with_capacity(probes.len());
    for (i, (probe, request)) in probes.iter().zip(&requests).enumerate() {
        let asked = Message::human(probe.question.clone());
        let mut baseline: Vec<Message> = tail.to_vec();
        baseline.push(asked);
        let baseline_tokens = counter.count_request(transcript.system(), &baseline, engine.tools());
        let question_text = fold(&probe.question);
        let found_in_last100 = probe
            .missing_in_folded(&[&tail_text, &question_text])
            .is_empty();
        if let Some(last) = full.last_mut() {
            *last = Message::human(probe.question.clone());
        }
        let full_history_tokens = counter.count_request(transcript.system(), &full, engine.tools());
        let (text, request_messages, request_tokens) = match request {
            Some(r) => (
                request_text(r),
                r.messages.len(),
                counter.count_request(r.system.as_ref(), &r.messages, &r.tools),
            ),
            None => (String::new(), 0, 0),
        };
        let missing = probe.missing_in(&text);
        let stale_as_current = probe.stale_as_current(&text);
        let answer = match (model, request) {
            (Some(model), Some(r)) => Some(ask(model, r, probe).await),
            _ => None,
        };
        totals.found += usize::from(missing.is_empty());
        totals.with_stale += usize::from(!probe.stale.is_empty());
        totals.stale_as_current += usize::from(!stale_as_current.is_empty());
        totals.sent_tokens += request_tokens;
        totals.baseline_last100_tokens += baseline_tokens;
        totals.found_in_last100 += usize::from(found_in_last100);
        totals.full_history_tokens += full_history_tokens;
        if model.is_some() {
            let answered = totals.answered.get_or_insert(0);
            *answered += usize::from(answer.as_ref().is_some_and(|a| a.found));
            let errors = totals.answer_errors.get_or_insert(0);
            *errors += usize::from(answer.as_ref().is_none_or(|a| a.error.is_some()));
        }
        results.push(ProbeResult {
            index: i + 1,
            id: probe.id.clone(),
            question: probe.question.clone(),
            found: missing.is_empty(),
            missing,
            stale_as_current,
            request_messages,
            request_tokens,
            baseline_tokens,
            found_in_last100,
            full_history_tokens,
            answer,
        });
    }
    if totals.baseline_last100_tokens > 0 {
        totals.sent_vs_last100 = totals.sent_tokens as f64 / totals.baseline_last100_tokens as f64;
    }
    if totals.full_history_tokens > 0 {
        totals.sent_vs_full_history = totals.sent_tokens as f64 / totals.full_history_tokens as f64;
    }
    let report = EvalReport {
        transcript_messages: messages.len(),
        probes: results,
        totals,
    };
    Ok((report, requests))
}

/// Sends `request` to `model` and checks the answer for the probe's needles. A failed
/// call is reported in the answer, not raised: the other probes still count.
pub async fn ask(model: &dyn ChatModel, request: &SentRequest, probe: &Probe) -> Answer {
    let chat = ChatRequest {
        system: request.system.as_ref(),
        messages: &request.messages,
        tools: &request.tools,
        tool_choice: None,
        settings: &request.settings,
        internal: false,
    };
    match model.invoke(chat).await {
        Ok(message) => {
            let text = message.text().into_owned();
            let missing = probe.missing_in(&text);
            Answer {
                found: missing.is_empty(),
                missing,
                text,
                error: None,
            }
        }
        Err(e) => Answer {
            text: String::new(),
            found: false,
            missing: probe.needles.clone(),
            error: Some(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(needles: &[&str], stale: &[&str]) -> Probe {
        Probe {
            id: None,
            question: "q".into(),
            needles: needles.iter().map(|s| (*s).to_owned()).collect(),
            stale: stale.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn the_latest_statement_in_the_request_decides_what_is_current() {
        let p = probe(&["eu-west-2"], &["eu-west-1"]);
        // The old value alone, or last: stale.
        assert_eq!(p.stale_as_current("we deploy to eu-west-1"), ["eu-west-1"]);
        assert_eq!(
            p.stale_as_current("moved to eu-west-2. later: back on eu-west-1"),
            ["eu-west-1"]
        );
        // Followed by its correction, or marked as superseded: not stale.
        assert!(
            p.stale_as_current("eu-west-1 at first; switch to eu-west-2")
                .is_empty()
        );
        assert!(
            p.stale_as_current("region: eu-west-2 (was eu-west-1)")
                .is_empty()
        );
        // A longer value that contains the stale one is another value.
        let p = probe(&["release/26.2"], &["release/26.1"]);
        assert!(p.stale_as_current("branch release/26.11").is_empty());
        assert!(p.stale_as_current("no value here").is_empty());
    }

    #[test]
    fn needles_are_case_insensitive_and_all_required() {
        let p = probe(&["PRJ-123", "EU cluster"], &[]);
        assert!(p.found_in("project prj-123 on the eu cluster"));
        assert_eq!(p.missing_in("project PRJ-123"), ["EU cluster"]);
        // A run of whitespace is one space, on either side.
        assert!(p.found_in("PRJ-123 on the EU\n   cluster"));
        assert!(probe(&["eu  \t cluster"], &[]).found_in("the eu cluster"));
        assert!(!probe(&["eu cluster"], &[]).found_in("the eucluster"));
    }

    #[test]
    fn folding_lowercases_and_collapses_whitespace() {
        assert_eq!(fold("  A\n\n B\tc  "), " a b c ");
        assert_eq!(fold("ÀB"), "àb");
        assert_eq!(fold(""), "");
    }

    #[test]
    fn bad_probes_name_the_field() {
        let e = Probe::parse(r#"{"question": "q", "needles": []}"#).unwrap_err();
        assert!(e.contains("`needles`"), "{e}");
        let e = Probe::parse(r#"{"question": " ", "needles": ["a"]}"#).unwrap_err();
        assert!(e.contains("`question`"), "{e}");
        let e = Probe::parse(r#"{"question": "q", "needles": ["a"], "stale": [""]}"#).unwrap_err();
        assert!(e.contains("`stale[0]`"), "{e}");
        let e = Probe::parse(r#"{"question": "q", "needle": ["a"]}"#).unwrap_err();
        assert!(e.contains("needle"), "{e}");
        let ok = Probe::parse(r#"{"id": "p1", "question": "q", "needles": ["a"]}"#).unwrap();
        assert!(ok.stale.is_empty());
    }
}
