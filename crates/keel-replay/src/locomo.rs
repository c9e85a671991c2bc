//! LoCoMo conversations as `keel eval` input (`keel eval --format locomo FILE.json ...`).
//!
//! LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
//! Agents", ACL 2024, arXiv:2402.17753) holds long conversations between two people over
//! many sessions, each with questions about what was said, their answers and the turns
//! that hold the evidence. [`Conversation::from_json`] turns one conversation file into a
//! transcript and probes, and [`evaluate`] runs them through the existing eval engine
//! ([`crate::eval::evaluate_with_requests`]) and adds the benchmark's figures.
//!
//! **Transcript.** A system message names the two people. Then come the turns, session
//! by session, sessions ordered by their number (`session_2` before `session_10`),
//! missing and empty sessions skipped:
//!
//! - `speaker_a`'s turns are user messages and `speaker_b`'s are assistant messages;
//! - each text starts with the speaker's name (`Name: ...`), and the first turn of a
//!   session with the session's date text (`[date] Name: ...`);
//! - a shared photo is appended to the text as its caption
//!   (`[shares a photo: <blip_caption>]`);
//! - each message keeps the turn's `dia_id` as its id, the speaker's name as its `name`,
//!   and the session's date text as metadata `"timestamp"`;
//! - trailing `speaker_a` turns (an unanswered goodbye) are dropped: a question asked
//!   after them would be a second user message in a row.
//!
//! **Probes.** A question of category 1-4 whose answer (a string, or a number written as
//! text) appears in the `text` of at least one of its evidence turns, case-insensitively
//! with each run of whitespace counted as one space. Evidence entries holding several
//! ids (`"D8:6; D9:17"`) are split; ids that name no turn of the transcript are dropped.
//! The probe's needle is the answer; the category and the answer are kept for the report.
//!
//! Nothing here depends on a particular file's names, wording or date format: the date
//! is whatever text the file gives, and the speakers are whatever names it gives.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use keel_core::message::Message;
use keel_core::model::ChatModel;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::Probe;
use crate::engine::{BASELINE_WINDOW, SentRequest};
use crate::eval::{ProbeResult, evaluate_with_requests, fold};
use crate::setup::{FinishError, ReplayOptions, SetupError, prepare_transcript};
use crate::transcript::{InvalidTranscript, Transcript};

/// The question categories that can be probed, with their names in the paper.
/// Category 5 (adversarial) asks about something the conversation does not say.
pub const CATEGORIES: [(u8, &str); 4] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
];

/// Answers longer than this many characters are also reported apart: a short answer
/// (`No`, `7`) can be found by accident in some other turn.
pub const SHORT_ANSWER_CHARS: usize = 4;

/// The metadata key holding each message's session date text.
pub const TIMESTAMP_KEY: &str = "timestamp";

/// The name Keel gives its summary messages, which a speaker cannot take.
const RESERVED_NAME: &str = "summary";

/// A file that is not a usable LoCoMo conversation: the file and what is wrong, naming
/// the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct LocomoError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, naming the field (`session_3[4].speaker`, `qa[12].answer`).
    pub problem: String,
}

/// One probe made from a question, with what the report needs besides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LocomoProbe {
    /// The probe: `id` is `qa<N>` (the question's 1-based place in `qa`), the needle is
    /// the answer.
    pub probe: Probe,
    /// 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop.
    pub category: u8,
    /// The answer, as text.
    pub answer: String,
    /// The evidence turns, normalised (ids of turns in the transcript only).
    pub evidence: Vec<String>,
}

/// One LoCoMo conversation converted: the transcript's messages and the probes.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversation {
    /// The file it came from.
    pub path: PathBuf,
    /// The user's name.
    pub speaker_a: String,
    /// The assistant's name.
    pub speaker_b: String,
    /// Sessions with turns.
    pub sessions: usize,
    /// Turns in those sessions, before trailing `speaker_a` turns are dropped.
    pub turns: usize,
    /// The transcript: the system message, then one message per kept turn.
    pub messages: Vec<Message>,
    /// Questions of category 1-4 in the file.
    pub questions: usize,
    /// The probes, in the order of `qa`.
    pub probes: Vec<LocomoProbe>,
    /// Evidence entries that name no turn of the transcript (malformed, or a turn that
    /// does not exist), dropped.
    pub dropped_evidence: usize,
}

/// The field `key` of `object` as a non-empty string.
fn text_field<'a>(object: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a str, String> {
    match object.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        Some(Value::String(_)) => Err(format!("`{at}{key}` is empty")),
        Some(other) => Err(format!("`{at}{key}` is {}, not a string", kind_of(other))),
        None => Err(format!("`{at}{key}` is missing")),
    }
}

/// A JSON value's kind, in words.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `N` of a `session_N` key (digits only; `session_3_date_time` is not a session).
fn session_number(key: &str) -> Option<u64> {
    let digits = key.strip_prefix("session_")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `D<session>:<turn>` with the numbers written without leading zeros, or `None` when
/// `id` is not of that shape (`D:11:26`, a bare `D`).
fn canonical_dia_id(id: &str) -> Option<String> {
    let (session, turn) = id.trim().strip_prefix('D')?.split_once(':')?;
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    Some(format!("D{}:{}", number(session)?, number(turn)?))
}

/// One turn as read from a session.
struct Turn<'a> {
    id: &'a str,
    speaker: &'a str,
    text: &'a str,
    caption: Option<&'a str>,
}

fn read_turn<'a>(value: &'a Value, at: &str) -> Result<Turn<'a>, String> {
    let Value::Object(turn) = value else {
        return Err(format!(
            "`{at}` is {}, not a turn (an object with `speaker`, `dia_id` and `text`)",
            kind_of(value)
        ));
    };
    let prefix = format!("{at}.");
    let speaker = text_field(turn, "speaker", &prefix)?;
    let id = text_field(turn, "dia_id", &prefix)?;
    let text = match turn.get("text") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(format!("`{at}.text` is {}, not a string", kind_of(other))),
        None => return Err(format!("`{at}.text` is missing")),
    };
    let caption = match turn.get("blip_caption") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(other) => {
            return Err(format!(
                "`{at}.blip_caption` is {}, not a string",
                kind_of(other)
            ));
        }
    };
    Ok(Turn {
        id,
        speaker,
        text,
        caption,
    })
}

/// The answer of a category 1-4 question as text.
fn answer_text(question: &Map<String, Value>, at: &str) -> Result<String, String> {
    match question.get("answer") {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        Some(Value::String(_)) => Err(format!("`{at}.answer` is empty")),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(other) => Err(format!(
            "`{at}.answer` is {}, not a string or a number",
            kind_of(other)
        )),
        None => Err(format!(
            "`{at}.answer` is missing; a question of category 1-4 needs its answer"
        )),
    }
}

/// The evidence ids of a question, split and normalised, keeping those that name a turn
/// of the transcript; the second value counts the entries dropped.
fn evidence_ids(
    question: &Map<String, Value>,
    at: &str,
    turns: &HashMap<String, &str>,
) -> Result<(Vec<String>, usize), String> {
    let list = match question.get("evidence") {
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(format!(
                "`{at}.evidence` is {}, not a list of turn ids",
                kind_of(other)
            ));
        }
        None => return Err(format!("`{at}.evidence` is missing")),
    };
    let mut ids = Vec::new();
    let mut dropped = 0;
    for (i, entry) in list.iter().enumerate() {
        let Value::String(entry) = entry else {
            return Err(format!(
                "`{at}.evidence[{i}]` is {}, not a turn id",
                kind_of(entry)
            ));
        };
        for part in entry.split([';', ',']).map(str::trim) {
            if part.is_empty() {
                continue;
            }
            let id = if turns.contains_key(part) {
                Some(part.to_owned())
            } else {
                canonical_dia_id(part).filter(|id| turns.contains_key(id))
            };
            match id {
                Some(id) if !ids.contains(&id) => ids.push(id),
                Some(_) => {}
                None => dropped += 1,
            }
        }
    }
    Ok((ids, dropped))
}

/// The system message naming the two people.
fn system_message(a: &str, b: &str) -> Message {
    Message::system(format!(
        "This is a long conversation between {a} and {b}, held over several sessions \
         days or weeks apart. Each message starts with the name of who said it, and the \
         first message of a session starts with its date and time. Answer questions \
         about what {a} and {b} said."
    ))
    .with_id("system")
}

impl Conversation {
    /// Reads and converts one LoCoMo conversation file, refusing one larger than
    /// `max_bytes`.
    pub fn read(path: &Path, max_bytes: usize) -> Result<Conversation, LocomoError> {
        let error = |problem: String| LocomoError {
            path: path.to_owned(),
            problem,
        };
        let text = crate::input::read_text(path, max_bytes).map_err(|e| {
            // read_text names the file already.
            let shown = path.display().to_string();
            error(
                e.strip_prefix(&format!("{shown}: "))
                    .or_else(|| e.strip_prefix(&format!("cannot read {shown}: ")))
                    .map_or(e.clone(), |rest| format!("cannot read it: {rest}")),
            )
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|e| {
            error(format!(
                "not JSON ({e}); a LoCoMo conversation is one JSON object"
            ))
        })?;
        Conversation::from_json(&value, path)
    }

    /// Converts one conversation. `path` names the file in errors. The fields may be at
    /// the top level (as in the per-conversation files of the release) or under
    /// `conversation`, with `qa` beside it (as in `locomo10.json`'s entries).
    pub fn from_json(value: &Value, path: &Path) -> Result<Conversation, LocomoError> {
        Conversation::convert(value, path).map_err(|problem| LocomoError {
            path: path.to_owned(),
            problem,
        })
    }

    fn convert(value: &Value, path: &Path) -> Result<Conversation, String> {
        let shape = "a LoCoMo conversation is one JSON object with `speaker_a`, \
                     `speaker_b`, `session_1`, `session_1_date_time`, ... and `qa`";
        let Value::Object(root) = value else {
            return Err(format!(
                "not a LoCoMo conversation: the file holds {}; {shape}",
                kind_of(value)
            ));
        };
        let conversation = match root.get("conversation") {
            Some(Value::Object(inner)) => inner,
            _ => root,
        };
        if !conversation.contains_key("speaker_a") && !conversation.contains_key("qa") {
            return Err(format!(
                "not a LoCoMo conversation: no `speaker_a` and no `qa`; {shape}"
            ));
        }
        let a = text_field(conversation, "speaker_a", "")?;
        let b = text_field(conversation, "speaker_b", "")?;
        if a == b {
            return Err(format!(
                "`speaker_a` and `speaker_b` are both {a:?}; the two speakers need two names"
            ));
        }
        for (key, name) in [("speaker_a", a), ("speaker_b", b)] {
            if name.eq_ignore_ascii_case(RESERVED_NAME) {
                return Err(format!(
                    "`{key}` is {name:?}, the name Keel gives its summary messages; rename \
                     the speaker"
                ));
            }
        }

        // Sessions by number; missing (null) and empty ones skipped.
        let mut sessions: BTreeMap<u64, (&str, &Vec<Value>)> = BTreeMap::new();
        for (key, value) in conversation {
            let Some(n) = session_number(key) else {
                continue;
            };
            match value {
                Value::Null => {}
                Value::Array(turns) if turns.is_empty() => {}
                Value::Array(turns) => {
                    sessions.insert(n, (key.as_str(), turns));
                }
                other => {
                    return Err(format!(
                        "`{key}` is {}, not a list of turns",
                        kind_of(other)
                    ));
                }
            }
        }
        if sessions.is_empty() {
            return Err(format!(
                "no session with turns: no `session_N` key holds a non-empty list; {shape}"
            ));
        }

        let mut messages = vec![system_message(a, b)];
        // dia_id -> the turn's own text (what answers are looked for in).
        let mut texts: HashMap<String, &str> = HashMap::new();
        let mut turns = 0;
        for (key, session) in sessions.values() {
            let date = text_field(conversation, &format!("{key}_date_time"), "")
                .map_err(|e| format!("{e}; each session with turns needs its date"))?
                .trim();
            for (i, value) in session.iter().enumerate() {
                let at = format!("{key}[{i}]");
                let turn = read_turn(value, &at)?;
                let speaker = if turn.speaker == a {
                    a
                } else if turn.speaker == b {
                    b
                } else {
                    return Err(format!(
                        "`{at}.speaker` is {:?}, neither `speaker_a` ({a:?}) nor `speaker_b` \
                         ({b:?})",
                        turn.speaker
                    ));
                };
                if texts.insert(turn.id.to_owned(), turn.text).is_some() {
                    return Err(format!(
                        "`{at}.dia_id` {:?} is used by an earlier turn too; each turn needs \
                         its own id",
                        turn.id
                    ));
                }
                let mut content = String::new();
                if i == 0 {
                    content.push_str(&format!("[{date}] "));
                }
                content.push_str(&format!("{speaker}: {}", turn.text.trim_end()));
                if let Some(caption) = turn.caption {
                    content.push_str(&format!(" [shares a photo: {}]", caption.trim()));
                }
                let message = if speaker == a {
                    Message::human(content)
                } else {
                    Message::ai(content)
                };
                messages.push(
                    message
                        .with_id(turn.id)
                        .with_name(speaker)
                        .with_metadata(TIMESTAMP_KEY, Value::String(date.to_owned())),
                );
                turns += 1;
            }
        }
        // An unanswered goodbye: no question depends on it, and keeping it would make
        // every question a second user message in a row.
        while messages.last().is_some_and(Message::is_human) {
            if let Some(dropped) = messages.pop() {
                texts.remove(dropped.id());
            }
        }
        if messages.len() < 2 {
            return Err(format!(
                "no turn by `speaker_b` ({b:?}): there is no assistant message to replay"
            ));
        }

        let qa = match root.get("qa").or_else(|| conversation.get("qa")) {
            Some(Value::Array(qa)) => qa,
            Some(other) => {
                return Err(format!(
                    "`qa` is {}, not a list of questions",
                    kind_of(other)
                ));
            }
            None => return Err("`qa` is missing; it lists the questions to ask".to_owned()),
        };
        let mut probes = Vec::new();
        let mut questions = 0;
        let mut dropped_evidence = 0;
        for (i, entry) in qa.iter().enumerate() {
            let at = format!("qa[{i}]");
            let Value::Object(question) = entry else {
                return Err(format!(
                    "`{at}` is {}, not a question (an object with `question`, `answer`, \
                     `evidence` and `category`)",
                    kind_of(entry)
                ));
            };
            let category = match question.get("category") {
                Some(Value::Number(n)) => n.as_u64().filter(|c| (1..=5).contains(c)),
                None => return Err(format!("`{at}.category` is missing")),
                Some(_) => None,
            }
            .ok_or_else(|| {
                format!(
                    "`{at}.category` is {}, not one of 1, 2, 3, 4, 5",
                    question.get("category").map_or("missing", kind_of)
                )
            })?;
            if category == 5 {
                continue;
            }
            questions += 1;
            let text = text_field(question, "question", &format!("{at}."))?;
            let answer = answer_text(question, &at)?;
            let (evidence, dropped) = evidence_ids(question, &at, &texts)?;
            dropped_evidence += dropped;
            let needle = fold(&answer);
            let verbatim = evidence.iter().any(|id| {
                texts
                    .get(id)
                    .is_some_and(|t| fold(t).contains(needle.as_str()))
            });
            if !verbatim {
                continue;
            }
            probes.push(LocomoProbe {
                probe: Probe {
                    id: Some(format!("qa{}", i + 1)),
                    question: text.trim().to_owned(),
                    needles: vec![answer.clone()],
                    stale: Vec::new(),
                },
                category: u8::try_from(category).unwrap_or(0),
                answer,
                evidence,
            });
        }
        if probes.is_empty() {
            return Err(format!(
                "no probe: none of its {questions} questions of category 1-4 (in `qa`) has \
                 its answer verbatim in one of its evidence turns"
            ));
        }
        Ok(Conversation {
            path: path.to_owned(),
            speaker_a: a.to_owned(),
            speaker_b: b.to_owned(),
            sessions: sessions.len(),
            turns,
            messages,
            questions,
            probes,
            dropped_evidence,
        })
    }

    /// The transcript, checked as a JSONL one would be.
    pub fn transcript(&self) -> Result<Transcript, InvalidTranscript> {
        Transcript::from_messages(self.messages.clone())
    }

    /// The probes alone, as a probes file holds them.
    pub fn plain_probes(&self) -> Vec<Probe> {
        self.probes.iter().map(|p| p.probe.clone()).collect()
    }

    /// The file's stem (`26` for `26.json`).
    pub fn stem(&self) -> String {
        self.path.file_stem().map_or_else(
            || "conversation".into(),
            |s| s.to_string_lossy().into_owned(),
        )
    }

    /// The transcript as JSONL (one message per line) and the probes as a probes file,
    /// the two inputs of `keel eval TRANSCRIPT --probes FILE`.
    pub fn to_jsonl(&self) -> Result<(String, String), serde_json::Error> {
        let mut transcript = String::new();
        for m in &self.messages {
            transcript.push_str(&serde_json::to_string(m)?);
            transcript.push('\n');
        }
        let mut probes = String::new();
        for p in &self.probes {
            probes.push_str(&serde_json::to_string(&p.probe)?);
            probes.push('\n');
        }
        Ok((transcript, probes))
    }
}

/// Found among some probes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Share {
    /// Probes counted.
    pub probes: usize,
    /// Of those, found.
    pub found: usize,
    /// `found` as a percentage of `probes` (0 when there is none).
    pub percent: f64,
}

impl Share {
    fn add(&mut self, found: bool) {
        self.probes += 1;
        self.found += usize::from(found);
    }

    fn finish(&mut self) {
        self.percent = percent(self.found as u64, self.probes as u64);
    }
}

fn percent(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        100.0 * n as f64 / of as f64
    }
}

/// One category's share.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CategoryShare {
    /// 1-4.
    pub category: u8,
    /// `multi-hop`, `temporal`, `open-domain`, `single-hop`.
    pub name: &'static str,
    /// Found among its probes.
    #[serde(flatten)]
    pub share: Share,
}

/// The figures of one file, or summed over files.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figures {
    /// Found among all probes.
    pub found: Share,
    /// Found per category, 1 to 4.
    pub categories: Vec<CategoryShare>,
    /// Found among probes whose answer is longer than [`SHORT_ANSWER_CHARS`] characters.
    pub long_answers: Share,
    /// What the last-100 window alone (system prompt, last 99 messages, question) would
    /// have found.
    pub last100_found: Share,
    /// Tokens of the probe requests as sent.
    pub sent_tokens: u64,
    /// Tokens of the last-100 windows for the same questions.
    pub last100_tokens: u64,
    /// Tokens of the full history (system prompt, whole transcript, question).
    pub full_history_tokens: u64,
    /// `sent_tokens` as a percentage of `last100_tokens`.
    pub sent_vs_last100_percent: f64,
    /// `sent_tokens` as a percentage of `full_history_tokens`.
    pub sent_vs_full_history_percent: f64,
    /// Answers holding the answer, with a model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<Share>,
    /// Seconds to set up, replay the transcript and ask every question.
    pub wall_seconds: f64,
}

impl Figures {
    /// Sums `probes` (each with its result), taking `wall_seconds` as given.
    pub fn of<'a>(
        probes: impl IntoIterator<Item = &'a LocomoProbeResult>,
        wall_seconds: f64,
    ) -> Figures {
        let mut found = Share::default();
        let mut categories: Vec<CategoryShare> = CATEGORIES
            .iter()
            .map(|&(category, name)| CategoryShare {
                category,
                name,
                share: Share::default(),
            })
            .collect();
        let mut long_answers = Share::default();
        let mut last100_found = Share::default();
        let mut answered: Option<Share> = None;
        let (mut sent, mut last100, mut full) = (0, 0, 0);
        for p in probes {
            let r = &p.result;
            found.add(r.found);
            if let Some(c) = categories.iter_mut().find(|c| c.category == p.category) {
                c.share.add(r.found);
            }
            if p.answer.chars().count() > SHORT_ANSWER_CHARS {
                long_answers.add(r.found);
            }
            last100_found.add(r.found_in_last100);
            if let Some(a) = &r.answer {
                answered.get_or_insert_with(Share::default).add(a.found);
            }
            sent += r.request_tokens;
            last100 += r.baseline_tokens;
            full += r.full_history_tokens;
        }
        for share in [&mut found, &mut long_answers, &mut last100_found]
            .into_iter()
            .chain(categories.iter_mut().map(|c| &mut c.share))
            .chain(answered.as_mut())
        {
            share.finish();
        }
        Figures {
            found,
            categories,
            long_answers,
            last100_found,
            sent_tokens: sent,
            last100_tokens: last100,
            full_history_tokens: full,
            sent_vs_last100_percent: percent(sent, last100),
            sent_vs_full_history_percent: percent(sent, full),
            answered,
            wall_seconds,
        }
    }
}

/// One probe's result with its category and answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LocomoProbeResult {
    /// 1-4.
    pub category: u8,
    /// The answer looked for.
    pub answer: String,
    /// The evidence turns.
    pub evidence: Vec<String>,
    /// What the eval engine measured.
    #[serde(flatten)]
    pub result: ProbeResult,
}

/// What one conversation file measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FileReport {
    /// The file.
    pub file: String,
    /// The user's name.
    pub speaker_a: String,
    /// The assistant's name.
    pub speaker_b: String,
    /// Sessions with turns.
    pub sessions: usize,
    /// Messages in the transcript (without the system prompt).
    pub transcript_messages: usize,
    /// Questions of category 1-4 in the file.
    pub questions: usize,
    /// What the stack's setup warned about (a configuration key keel does not use).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The figures.
    pub figures: Figures,
    /// Every probe.
    pub probes: Vec<LocomoProbeResult>,
}

/// What `keel eval --format locomo` measured: per file and summed over all files.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LocomoReport {
    /// One report per file, in the order given.
    pub files: Vec<FileReport>,
    /// Summed over every file (wall time added up).
    pub total: Figures,
}

/// A conversation whose run failed.
#[derive(Debug, thiserror::Error)]
pub enum LocomoEvalError {
    /// The converted transcript is not one a replay accepts.
    #[error("{}: the converted transcript is invalid: {invalid}", path.display())]
    Transcript {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        invalid: InvalidTranscript,
    },
    /// The stack could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The replay or a question failed.
    #[error("{}: {source}", path.display())]
    Finish {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: FinishError,
    },
}

/// Replays one conversation through the stack `options` describe, asks every probe
/// after it (through [`evaluate_with_requests`]) and sums the figures. Returns each
/// probe's request too (`None` where a middleware answered).
pub async fn evaluate(
    conversation: &Conversation,
    options: &ReplayOptions,
    model: Option<&dyn ChatModel>,
) -> Result<(FileReport, Vec<Option<SentRequest>>), LocomoEvalError> {
    let started = Instant::now();
    let transcript = conversation
        .transcript()
        .map_err(|invalid| LocomoEvalError::Transcript {
            path: conversation.path.clone(),
            invalid,
        })?;
    let prepared = prepare_transcript(transcript, &conversation.path, options).await?;
    let probes = conversation.plain_probes();
    let (report, requests) = evaluate_with_requests(&prepared, &probes, model)
        .await
        .map_err(|source| LocomoEvalError::Finish {
            path: conversation.path.clone(),
            source,
        })?;
    let wall = started.elapsed().as_secs_f64();
    let probes: Vec<LocomoProbeResult> = conversation
        .probes
        .iter()
        .zip(report.probes)
        .map(|(p, result)| LocomoProbeResult {
            category: p.category,
            answer: p.answer.clone(),
            evidence: p.evidence.clone(),
            result,
        })
        .collect();
    let figures = Figures::of(&probes, wall);
    Ok((
        FileReport {
            file: conversation.path.display().to_string(),
            speaker_a: conversation.speaker_a.clone(),
            speaker_b: conversation.speaker_b.clone(),
            sessions: conversation.sessions,
            transcript_messages: report.transcript_messages,
            questions: conversation.questions,
            warnings: prepared.warnings.clone(),
            figures,
            probes,
        },
        requests,
    ))
}

/// [`evaluate`] without the requests and without a model, on every conversation in
/// turn: the whole report.
pub async fn evaluate_all(
    conversations: &[Conversation],
    options: &ReplayOptions,
) -> Result<LocomoReport, LocomoEvalError> {
    let mut files = Vec::with_capacity(conversations.len());
    for c in conversations {
        files.push(evaluate(c, options, None).await?.0);
    }
    Ok(LocomoReport::new(files))
}

impl LocomoReport {
    /// The report of these files, with their sum.
    pub fn new(files: Vec<FileReport>) -> LocomoReport {
        let wall = files.iter().map(|f| f.figures.wall_seconds).sum();
        let total = Figures::of(files.iter().flat_map(|f| f.probes.iter()), wall);
        LocomoReport { files, total }
    }

    /// The report as a table for people: one row per file and the sum.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let cell = |s: &Share| format!("{:.1} % {}/{}", s.percent, s.found, s.probes);
        let mut header: Vec<String> = ["file", "messages", "found"]
            .iter()
            .map(|h| (*h).to_owned())
            .collect();
        header.extend(CATEGORIES.iter().map(|(_, name)| (*name).to_owned()));
        header.extend([
            format!("answer > {SHORT_ANSWER_CHARS} chars"),
            format!("last {BASELINE_WINDOW} found"),
            format!("tokens vs last {BASELINE_WINDOW}"),
            "vs full".to_owned(),
            "wall".to_owned(),
        ]);
        let row = |name: String, messages: usize, f: &Figures| {
            let mut cells = vec![name, messages.to_string(), cell(&f.found)];
            cells.extend(f.categories.iter().map(|c| cell(&c.share)));
            cells.extend([
                cell(&f.long_answers),
                cell(&f.last100_found),
                format!("{:.1} %", f.sent_vs_last100_percent),
                format!("{:.1} %", f.sent_vs_full_history_percent),
                format!("{:.2} s", f.wall_seconds),
            ]);
            cells
        };
        let mut rows = vec![header];
        for file in &self.files {
            let name = Path::new(&file.file)
                .file_name()
                .map_or_else(|| file.file.clone(), |n| n.to_string_lossy().into_owned());
            rows.push(row(name, file.transcript_messages, &file.figures));
        }
        if self.files.len() > 1 {
            let messages = self.files.iter().map(|f| f.transcript_messages).sum();
            rows.push(row("all".to_owned(), messages, &self.total));
        }
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                rows.iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for r in &rows {
            let mut line = String::new();
            for (i, (c, w)) in r.iter().zip(&widths).enumerate() {
                if i == 0 {
                    let _ = write!(line, "{c:<w$}");
                } else {
                    let _ = write!(line, "  {c:>w$}");
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let t = &self.total;
        let _ = writeln!(
            out,
            "\nfound: the answer is in the request the model would receive ({} of {} probes); \
             tokens sent {} against {} for the last {BASELINE_WINDOW} messages and {} for the \
             full history",
            t.found.found, t.found.probes, t.sent_tokens, t.last100_tokens, t.full_history_tokens
        );
        if let Some(a) = &t.answered {
            let _ = writeln!(out, "answers holding the answer: {}", cell(a));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An invented conversation shaped like a LoCoMo file: sessions out of order in the
    /// object and numbered past 9, an empty and a missing session with dates, photos,
    /// evidence in every odd shape, a number as an answer, and a trailing user turn.
    fn sample() -> Value {
        json!({
            "speaker_a": "Ilse",
            "speaker_b": "Bram",
            "session_10_date_time": "day 40, evening",
            "session_10": [
                {"speaker": "Ilse", "dia_id": "D10:1", "text": "The  kiln   finally reached cone six."},
                {"speaker": "Bram", "dia_id": "D10:2", "text": "Brilliant, the glaze test can go ahead.",
                 "img_url": ["https://example.invalid/x.jpg"], "blip_caption": "a photo of a blue bowl",
                 "query": "blue bowl"},
                {"speaker": "Ilse", "dia_id": "D10:3", "text": "Talk soon!"}
            ],
            "session_2_date_time": "day 3, noon",
            "session_2": [
                {"speaker": "Bram", "dia_id": "D2:1", "text": "My tram pass number ends in 1987."},
                {"speaker": "Ilse", "dia_id": "D2:2", "text": "Mine is the violet one.",
                 "blip_caption": "a photo of a violet card"},
                {"speaker": "Bram", "dia_id": "D2:3", "text": "I moved to Harrowgate Lane last spring."}
            ],
            "session_3_date_time": "day 9, dusk",
            "session_3": [],
            "session_4_date_time": "day 12, dawn",
            "session_2_summary": "Bram and Ilse talk about tram passes; the answer is 1987.",
            "qa": [
                {"question": "What does Bram's pass number end in?", "answer": 1987,
                 "evidence": ["D2:1"], "category": 4},
                {"question": "Which cone did the kiln reach?", "answer": "cone six",
                 "evidence": ["D2:3; D10:01", "D:10:1", "D"], "category": 1},
                {"question": "Where did Bram move?", "answer": "Harrowgate Lane",
                 "evidence": ["D2:3"], "category": 2},
                {"question": "What colour is Ilse's card?", "answer": "violet card",
                 "evidence": ["D2:2"], "category": 3},
                {"question": "What did Bram say about the glaze?", "answer": "the glaze is fine",
                 "evidence": ["D10:2"], "category": 4},
                {"question": "What did the photo show?", "answer": "blue bowl",
                 "evidence": ["D10:2"], "category": 4},
                {"question": "What did Ilse say at the end?", "answer": "Talk soon",
                 "evidence": ["D10:3"], "category": 4},
                {"question": "Where did Ilse move?", "adversarial_answer": "Harrowgate Lane",
                 "evidence": ["D2:3"], "category": 5}
            ]
        })
    }

    fn convert(value: &Value) -> Result<Conversation, LocomoError> {
        Conversation::from_json(value, Path::new("dir/chat.json"))
    }

    #[test]
    fn turns_become_messages_in_session_order_with_speaker_date_and_photo() {
        let c = convert(&sample()).unwrap();
        assert_eq!(
            (c.speaker_a.as_str(), c.speaker_b.as_str()),
            ("Ilse", "Bram")
        );
        // Sessions 2 and 10; 3 is empty and 4 has only a date.
        assert_eq!(c.sessions, 2);
        assert_eq!(c.turns, 6);
        let ids: Vec<&str> = c.messages.iter().map(Message::id).collect();
        // The trailing user turn (D10:3) is dropped.
        assert_eq!(ids, ["system", "D2:1", "D2:2", "D2:3", "D10:1", "D10:2"]);
        let system = c.messages[0].text();
        assert!(
            system.contains("Ilse") && system.contains("Bram"),
            "{system}"
        );
        let texts: Vec<String> = c.messages[1..]
            .iter()
            .map(|m| m.text().into_owned())
            .collect();
        assert_eq!(
            texts,
            [
                "[day 3, noon] Bram: My tram pass number ends in 1987.",
                "Ilse: Mine is the violet one. [shares a photo: a photo of a violet card]",
                "Bram: I moved to Harrowgate Lane last spring.",
                "[day 40, evening] Ilse: The  kiln   finally reached cone six.",
                "Bram: Brilliant, the glaze test can go ahead. [shares a photo: a photo of a blue bowl]",
            ]
        );
        let roles: Vec<bool> = c.messages[1..].iter().map(Message::is_human).collect();
        assert_eq!(roles, [false, true, false, true, false]);
        for m in &c.messages[1..] {
            let date = m.metadata()[TIMESTAMP_KEY].as_str().unwrap();
            let session = m.id().split(':').next().unwrap();
            assert_eq!(
                date,
                if session == "D2" {
                    "day 3, noon"
                } else {
                    "day 40, evening"
                }
            );
            assert_eq!(m.name(), Some(if m.is_human() { "Ilse" } else { "Bram" }));
        }
        // Neither the empty session's date nor the authors' summary reaches the transcript.
        let all: String = c.messages.iter().map(|m| m.text().into_owned()).collect();
        assert!(!all.contains("day 9") && !all.contains("day 12") && !all.contains("tram passes"));
        c.transcript().unwrap();
    }

    #[test]
    fn probes_are_the_questions_answered_verbatim_in_their_evidence() {
        let c = convert(&sample()).unwrap();
        assert_eq!(c.questions, 7);
        let got: Vec<(&str, u8, &str, Vec<&str>)> = c
            .probes
            .iter()
            .map(|p| {
                (
                    p.probe.id.as_deref().unwrap(),
                    p.category,
                    p.answer.as_str(),
                    p.evidence.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                // A number as the answer, written as text.
                ("qa1", 4, "1987", vec!["D2:1"]),
                // "D2:3; D10:01" split and normalised; "D:10:1" and "D" dropped; the
                // answer matched across a run of spaces.
                ("qa2", 1, "cone six", vec!["D2:3", "D10:1"]),
                ("qa3", 2, "Harrowgate Lane", vec!["D2:3"]),
                // qa4: "violet card" is only in the photo's caption, not the turn's text.
                // qa5: not verbatim. qa6: only in the caption.
                // qa7: its evidence is the dropped trailing turn. qa8: category 5.
            ]
        );
        assert_eq!(c.dropped_evidence, 3);
        let p = &c.probes[0].probe;
        assert_eq!(p.question, "What does Bram's pass number end in?");
        assert_eq!(p.needles, ["1987"]);
        assert!(p.stale.is_empty());
    }

    #[test]
    fn the_nested_shape_of_the_combined_release_file_is_read_too() {
        let flat = sample();
        let mut conversation = flat.as_object().unwrap().clone();
        let qa = conversation.remove("qa").unwrap();
        let nested = json!({"sample_id": "x", "conversation": conversation, "qa": qa});
        let (a, b) = (convert(&flat).unwrap(), convert(&nested).unwrap());
        assert_eq!(a.messages, b.messages);
        assert_eq!(a.probes, b.probes);
    }

    #[test]
    fn the_written_files_read_back_as_the_same_transcript_and_probes() {
        let c = convert(&sample()).unwrap();
        let (transcript, probes) = c.to_jsonl().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (t, p) = (dir.path().join("t.jsonl"), dir.path().join("p.jsonl"));
        std::fs::write(&t, transcript).unwrap();
        std::fs::write(&p, probes).unwrap();
        let read = Transcript::read_for_replay(&t, crate::Limits::default()).unwrap();
        assert_eq!(read.into_all_messages(), c.messages);
        let read = crate::read_probes(&p, crate::Limits::default()).unwrap();
        assert_eq!(read, c.plain_probes());
    }

    #[test]
    fn bad_files_name_the_field() {
        let problem = |value: Value| convert(&value).unwrap_err().to_string();
        let with = |path: &[&str], new: Option<Value>| {
            let mut value = sample();
            let mut at = &mut value;
            for key in &path[..path.len() - 1] {
                at = match key.parse::<usize>() {
                    Ok(i) => &mut at[i],
                    Err(_) => &mut at[*key],
                };
            }
            let last = path[path.len() - 1];
            match (last.parse::<usize>(), new) {
                (Ok(i), Some(v)) => at[i] = v,
                (Err(_), Some(v)) => at[last] = v,
                (_, None) => {
                    at.as_object_mut().unwrap().remove(last);
                }
            }
            problem(value)
        };
        let cases = [
            (problem(json!([1, 2])), "a list"),
            (problem(json!({"hello": 1})), "no `speaker_a` and no `qa`"),
            (with(&["speaker_b"], None), "`speaker_b` is missing"),
            (
                with(&["speaker_b"], Some(json!(3))),
                "`speaker_b` is a number",
            ),
            (with(&["speaker_b"], Some(json!("Ilse"))), "both \"Ilse\""),
            (
                with(&["session_2", "1", "speaker"], Some(json!("Otto"))),
                "`session_2[1].speaker` is \"Otto\"",
            ),
            (
                with(&["session_2", "1", "text"], None),
                "`session_2[1].text` is missing",
            ),
            (
                with(&["session_2", "1", "dia_id"], Some(json!("D2:1"))),
                "`session_2[1].dia_id` \"D2:1\" is used",
            ),
            (
                with(&["session_2", "1"], Some(json!("hi"))),
                "`session_2[1]` is a string",
            ),
            (
                with(&["session_2", "0", "blip_caption"], Some(json!(["x"]))),
                "`session_2[0].blip_caption` is a list",
            ),
            (
                with(&["session_10"], Some(json!({"a": 1}))),
                "`session_10` is an object",
            ),
            (
                with(&["session_10_date_time"], None),
                "`session_10_date_time` is missing",
            ),
            (with(&["qa"], None), "`qa` is missing"),
            (
                with(&["qa", "0", "category"], None),
                "`qa[0].category` is missing",
            ),
            (
                with(&["qa", "0", "category"], Some(json!(9))),
                "`qa[0].category` is a number, not one of",
            ),
            (
                with(&["qa", "0", "answer"], Some(json!(null))),
                "`qa[0].answer` is null",
            ),
            (
                with(&["qa", "2", "answer"], None),
                "`qa[2].answer` is missing",
            ),
            (
                with(&["qa", "0", "evidence"], Some(json!("D2:1"))),
                "`qa[0].evidence` is a string",
            ),
            (
                with(&["qa", "0", "question"], Some(json!(""))),
                "`qa[0].question` is empty",
            ),
            (
                with(&["qa"], Some(json!([]))),
                "no probe: none of its 0 questions",
            ),
        ];
        for (message, expected) in cases {
            assert!(message.starts_with("dir/chat.json: "), "{message}");
            assert!(message.contains(expected), "{expected:?} not in: {message}");
        }
        // A category 5 question needs no answer.
        let mut value = sample();
        value["qa"][7].as_object_mut().unwrap().remove("answer");
        assert!(convert(&value).is_ok());
        // Only user turns: nothing to replay.
        let value = json!({"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "d",
            "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}], "qa": []});
        assert!(problem(value).contains("no turn by `speaker_b`"));
    }

    #[test]
    fn reading_names_the_file_when_it_is_not_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.json");
        std::fs::write(&path, "{\"speaker_a\": ").unwrap();
        let e = Conversation::read(&path, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("broken.json: not JSON"), "{e}");
        let e = Conversation::read(&dir.path().join("none.json"), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("none.json"), "{e}");
        std::fs::write(&path, sample().to_string()).unwrap();
        let e = Conversation::read(&path, 10).unwrap_err().to_string();
        assert!(e.contains("larger than 10 bytes"), "{e}");
        assert_eq!(Conversation::read(&path, 1 << 20).unwrap().probes.len(), 3);
    }

    #[tokio::test]
    async fn the_full_history_finds_every_probe_and_costs_what_it_sends() {
        let c = convert(&sample()).unwrap();
        let (report, requests) = evaluate(&c, &ReplayOptions::default(), None).await.unwrap();
        assert_eq!(requests.len(), 3);
        let f = &report.figures;
        assert_eq!((f.found.found, f.found.probes), (3, 3));
        assert_eq!(f.last100_found.found, 3);
        // Without a stack the request is the full history, and under 100 messages so is
        // the last-100 window.
        assert_eq!(f.sent_tokens, f.full_history_tokens);
        assert_eq!(f.sent_tokens, f.last100_tokens);
        assert!((f.sent_vs_full_history_percent - 100.0).abs() < 1e-9);
        let per: Vec<(u8, usize)> = f
            .categories
            .iter()
            .map(|c| (c.category, c.share.probes))
            .collect();
        assert_eq!(per, [(1, 1), (2, 1), (3, 0), (4, 1)]);
        // "1987" is 4 characters: not a long answer.
        assert_eq!(f.long_answers.probes, 2);
        assert_eq!(report.transcript_messages, 5);
        let sent = f.sent_tokens;
        let all = LocomoReport::new(vec![report.clone(), report]);
        assert_eq!(all.total.found.probes, 6);
        assert_eq!(all.total.sent_tokens, 2 * sent);
        assert!(all.render().contains("all"));
    }
}
