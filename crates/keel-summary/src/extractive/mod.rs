//! A deterministic extractive summarizer: no model, no network, same input same output.
//!
//! It is the offline default of `keel compact` and `keel replay`, what session memory
//! folds with when no model is configured, and the last resort of the middleware when
//! the summary model fails and the uncompressed request would not fit. It never invents
//! anything: every line is a sentence (or a clause) taken from the input.
//!
//! Sentences are chosen by what they contribute to this session, whoever says them
//! (module `scoring`): rules ("never", "always", "must", and their German, Spanish and
//! Chinese forms), decisions and agreements, requirements and preferences, values
//! (identifiers, versions, hashes, numbers with units, dates and times, paths, URLs, IP
//! addresses, names, error codes), and terms rare in the session, so a constraint in
//! plain words ("no customer data leaves the Frankfurt region") counts too. Filler is
//! recognised by its shape, not by a list of phrases: acknowledgements, narration of
//! the speaker's own work ("Let's continue.", "I'm going through the pods"), chat-log
//! prefixes (`[09:12] Sam:`), announcements of a paste (a line ending with `:`), and
//! reports that recur with other values (log records, status polls). The user's words
//! weigh a little more than the assistant's. A tool result is read line by line
//! whatever the tool's name: the line that establishes something (the build running in
//! production, a nearly full disk, a certificate's expiry) is kept, log records and
//! table rows are not. Lines are picked by score per word until the word budget is
//! spent, so twenty short facts beat one long paragraph.
//!
//! Folding puts the previous summary's lines back in the same competition (with a
//! small bonus for having been kept before), so newer facts displace older low-value
//! lines. A fact stays until a newer statement about the same subject replaces it ("the
//! cache TTL is 300 s", later "set the cache TTL to 900 s"), or a correction states a
//! value of the same kind ("change of plan: eu-west-3 instead", "switch to", "bump ...
//! to", "actually", a tool result `key: value` for what someone said): the summary then
//! holds only the current value, written `new (was old)`. Of several lines with the
//! same shape (a status line repeated with other numbers) only the newest stays.
//!
//! The output is grouped the way the summary prompt asks (module `grouping`): goal and
//! requirements, facts and decisions, what was done, open questions. Each line names
//! the message it came from and who said it; tool output is always attributed to its
//! tool (`read_file returned: ...`), never written in the user's voice.
//!
//! What it cannot do: it does not paraphrase or merge two sentences into one, does not
//! resolve "it" or "that" to what they point at, cannot tell a fact from a guess stated
//! with the same words, and knows cue words of English, German, Spanish and Chinese
//! only (values such as paths, numbers and identifiers, and rare terms, are recognised
//! in any language; sentences are split in scripts without spaces too).
//!
//! ```
//! use keel_core::message::Message;
//! use keel_summary::extractive::{summarize, ExtractiveOptions};
//!
//! let msgs = [
//!     Message::human("Please migrate the billing service to Postgres 17.").with_id("m1"),
//!     Message::ai("Sure.").with_id("m2"),
//!     Message::human("We agreed: the cutover is on 2026-12-04 at 02:00 UTC. Never touch the ledger tables.").with_id("m3"),
//! ];
//! let s = summarize(None, &msgs, &ExtractiveOptions::default());
//! assert!(s.contains("- [m1] Goal: Please migrate the billing service to Postgres 17."));
//! assert!(s.contains("- [m3] user: We agreed: the cutover is on 2026-12-04 at 02:00 UTC."));
//! assert!(s.contains("- [m3] user: Never touch the ledger tables."));
//! assert!(!s.contains("Sure."));
//! // Folding keeps what the previous summary holds.
//! let next = summarize(Some(&s), &[Message::human("thanks!").with_id("m4")], &ExtractiveOptions::default());
//! assert!(next.contains("Never touch the ledger tables."));
//! ```

mod grouping;
mod pinned;
mod scoring;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use keel_core::hash::{OFFSET_BASIS, StableHasher};
use keel_core::message::{Message, MessageBody, ToolStatus};

use crate::SUMMARY_NAME;
use grouping::{Line, Section};
use scoring::{Entity, Information};

pub use pinned::{PinnedValues, pinned_values, pinned_values_after};

/// A value that replaced another one, as an extractive summary records it: the ledger
/// of current values, read back from the summary's `new (was old)` lines.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CurrentValue {
    /// The current value, as the line writes it.
    pub value: String,
    /// The value it replaced.
    pub was: String,
    /// The reference of the message that stated the current value.
    pub reference: Option<String>,
    /// The line that states it (without the `(was ...)` note).
    pub statement: String,
}

/// The current values a summary records: one per `new (was old)` line, in the
/// summary's order. A later fold keeps them in its text, so this is a view of the
/// summary, stored next to it by the middlewares that keep state.
///
/// ```
/// use keel_summary::extractive::current_values;
///
/// let s = "Facts and decisions:\n- [m9] user: Bump the request timeout to 90 seconds. (was 30 seconds)";
/// let v = current_values(s);
/// assert_eq!(v[0].value, "90 seconds");
/// assert_eq!(v[0].was, "30 seconds");
/// assert_eq!(v[0].reference.as_deref(), Some("m9"));
/// ```
pub fn current_values(summary: &str) -> Vec<CurrentValue> {
    let mut out = Vec::new();
    for line in grouping::parse(summary) {
        let text = line.text.as_str();
        let body = without_was(text);
        if body.len() == text.len() {
            continue;
        }
        let was = text[body.len() + " (was ".len()..text.len() - 1].to_owned();
        let stated = without_was(speech(text));
        let info = scoring::information(stated);
        let old = scoring::information(&was);
        let shapes: Vec<u64> = old.values.iter().map(|(k, v)| value_shape(*k, v)).collect();
        let value = info
            .values
            .iter()
            .find(|(k, v)| shapes.contains(&value_shape(*k, v)))
            .or_else(|| info.values.first())
            .map(|(_, v)| as_written(stated, v));
        if let Some(value) = value {
            out.push(CurrentValue {
                value,
                was,
                reference: line.reference.clone(),
                statement: body.to_owned(),
            });
        }
    }
    out
}

/// Options of the extractive summarizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractiveOptions {
    /// Maximum words in the result (at least 1). Every token with a letter or a digit
    /// counts, headers and message references included, the way session memory counts.
    pub word_budget: usize,
    /// Maximum words of any one line's text.
    pub max_words_per_item: usize,
}

impl Default for ExtractiveOptions {
    fn default() -> Self {
        ExtractiveOptions {
            word_budget: 300,
            max_words_per_item: 40,
        }
    }
}

/// Below this budget the groups have no headers: a header would cost more than it says.
const HEADERS_FROM_BUDGET: usize = 60;
/// Words of the goal line at most.
const GOAL_WORDS: usize = 30;
/// Weights of who said it.
const USER: u32 = 2;
const ASSISTANT: u32 = 0;
/// A line of a tool's output, whatever the tool's name: its content decides.
const TOOL: u32 = 1;
/// A tool that failed: the error line says what went wrong.
const TOOL_FAILED: u32 = 3;
/// A line that was in the previous summary.
const KEPT_BEFORE: u32 = 1;
/// A line that states the current value of something corrected.
const CURRENT: u32 = 3;
/// Lines of a tool result examined, at most (a tool's output can be megabytes).
const TOOL_LINES: usize = 40;
/// Lines of one tool result kept as candidates, at most.
const TOOL_KEEP: usize = 2;
/// Terms in at most this many sentences of the input are rare: what a sentence adds.
const RARE_DF: u32 = 2;
/// Points for rare terms, at most.
const RARE_MAX: u32 = 4;
/// A line shape seen this often with other values is a repeated report (log lines,
/// status polls), not a fact.
const NOISE_REPEATS: u32 = 3;
/// Words of a tool outcome line at most: an outcome is a status, not a log.
const TOOL_WORDS: usize = 24;
/// Tools named in the "Tools used" line, at most.
const TOOLS_LISTED: usize = 6;

/// Words that say a statement corrects an earlier value ("change of plan: B instead").
const CORRECTIONS: &[&str] = &[
    "instead",
    "actually",
    "switch",
    "switched",
    "switching",
    "moved",
    "bump",
    "bumped",
    "raise",
    "raised",
    "lower",
    "lowered",
    "changed",
    "correction",
    "stattdessen",
    "eigentlich",
];

/// Words that say a statement gives a value that holds from now on, without saying it
/// corrects one ("production is now on build 5124", "the exports are moving to
/// eu-west-3", "no longer 30 s"): a correction only of a value of the same named
/// subject.
const CHANGES: &[&str] = &[
    "now", "moving", "move", "update", "updated", "replace", "replaced", "revert", "reverted",
    "anymore", "longer", "nun", "jetzt", "ahora",
];

/// True when `text` says its value holds from now on ([`CHANGES`]) or assigns it ("set
/// the request timeout to 90 s", "has request_timeout set to 238 seconds").
fn changes(text: &str) -> bool {
    text.split(|c: char| !c.is_alphanumeric()).any(|w| {
        CHANGES
            .iter()
            .chain(scoring::CHANGE_VERBS)
            .any(|c| w.eq_ignore_ascii_case(c))
    })
}

/// What the whole input says, for judging one sentence: how many sentences hold each
/// term, and how often each line shape recurs with other values.
#[derive(Default)]
struct Stats {
    /// Term -> (sentences holding it, the last sentence counted).
    df: HashMap<String, (u32, u32)>,
    /// Sentences counted so far.
    units: u32,
    /// Shape -> (occurrences, hash of the first text, seen with another text).
    shapes: HashMap<u64, (u32, u64, bool)>,
}

impl Stats {
    fn add_terms(&mut self, text: &str) {
        self.units += 1;
        let unit = self.units;
        let df = &mut self.df;
        scoring::terms(text, |t| match df.get_mut(t) {
            Some(e) => {
                if e.1 != unit {
                    e.0 += 1;
                    e.1 = unit;
                }
            }
            None => {
                df.insert(t.to_owned(), (1, unit));
            }
        });
    }

    fn add_unit(&mut self, text: &str) {
        self.add_terms(text);
        let shape = scoring::noise_shape(text);
        let exact = scoring::shape(text) ^ text.len() as u64;
        let e = self.shapes.entry(shape).or_insert((0, exact, false));
        e.0 += 1;
        e.2 |= e.1 != exact;
    }

    /// Rare terms in `text`, capped at [`RARE_MAX`].
    fn rare(&self, text: &str) -> u32 {
        let mut n = 0;
        scoring::terms(text, |t| {
            if self.df.get(t).map_or(0, |e| e.0) <= RARE_DF {
                n += 1;
            }
        });
        n.min(RARE_MAX)
    }

    /// What rare terms add to a line's score: everything when the line holds no value
    /// (a constraint in plain words), a point when it does (its values say more).
    fn bonus(rare: u32, info: &Information) -> u32 {
        if info.is_empty() { rare } else { rare.min(1) }
    }

    /// True for a line whose shape recurs with other values.
    fn noise(&self, text: &str) -> bool {
        self.shapes
            .get(&scoring::noise_shape(text))
            .is_some_and(|(n, _, varied)| *n >= NOISE_REPEATS && *varied)
    }
}

/// The shape of a value: digit runs as `#`, letter runs as `a` (a quantity keeps its
/// unit), so `eu-west-1` and `us-east-2` are values of one kind.
///
/// FNV-1a seeded by the kind (the offset basis xor the kind), so values of two kinds with
/// one shape stay apart.
fn value_shape(kind: Entity, value: &str) -> u64 {
    let mut h = StableHasher::with_state(OFFSET_BASIS ^ kind as u64);
    let keep_letters = kind == Entity::Quantity;
    let mut last = 0u8;
    for b in value.bytes() {
        let class = if b.is_ascii_digit() {
            b'#'
        } else if b.is_ascii_alphabetic() && !keep_letters {
            b'a'
        } else {
            b
        };
        if (class == b'#' || class == b'a') && class == last {
            continue;
        }
        h.write_u8(class);
        last = class;
    }
    h.finish()
}

/// The line's text without a `(was ...)` note of a value it replaced.
fn without_was(text: &str) -> &str {
    match text.rfind(" (was ") {
        Some(i) if text.ends_with(')') => &text[..i],
        _ => text,
    }
}

/// True when `text` says it corrects an earlier value.
fn corrects(text: &str) -> bool {
    let lower = text.to_lowercase();
    lower.contains("change of plan")
        || lower.contains("en vez de")
        || lower.contains("en su lugar")
        || lower.contains("改为")
        || lower.contains("改成")
        || lower
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| CORRECTIONS.contains(&w))
}

/// A line that may go into the summary.
struct Candidate {
    line: Line,
    score: u32,
    /// Words of the written line (reference and speaker included).
    words: usize,
    /// Chronological position: previous summary lines first, then the span's messages.
    order: usize,
    /// The goal: always kept first.
    goal: bool,
    subject: Option<String>,
    shape: u64,
    /// Values that make this line a fact (bare numbers and acronyms excluded).
    values: Vec<String>,
    /// The same values with their shapes, as written in the line.
    shaped: Vec<(u64, String)>,
    cue: bool,
    /// The line says it corrects an earlier value.
    correction: bool,
    /// The full id of the message (the reference may be a part of it).
    id: Option<String>,
    /// Values this line replaced (`(was ...)`).
    was: Option<String>,
}

impl Candidate {
    fn new(line: Line, info: &Information, base: u32, order: usize) -> Candidate {
        let words = grouping::count_words(&line.text) + usize::from(line.reference.is_some());
        let body = without_was(speech(&line.text));
        // A value that can be corrected: not a bare number, an acronym, a hash, a
        // hyphenated word (`on-call`), or a time of day or zone (dates stay: a
        // cut-over moves).
        let shaped = info
            .values
            .iter()
            .filter(|(k, v)| {
                !matches!(
                    k,
                    Entity::Number | Entity::Acronym | Entity::Hash | Entity::Name
                ) && !(*k == Entity::DateTime && (v.contains(':') || !v.contains('-')))
            })
            .map(|(k, v)| (value_shape(*k, v), v.clone()))
            .collect();
        Candidate {
            subject: None,
            shape: scoring::shape(body),
            values: info
                .values
                .iter()
                .filter(|(k, _)| !matches!(k, Entity::Number | Entity::Acronym))
                .map(|(_, v)| v.clone())
                .collect(),
            shaped,
            correction: corrects(body),
            id: line.reference.clone(),
            was: None,
            cue: info.cues != 0,
            score: base + info.score(),
            words,
            order,
            goal: false,
            line,
        }
    }
}

impl Candidate {
    /// What the line costs to send: its words, or a token estimate when its words are
    /// long (JSON, paths, log fields cost more tokens per word than prose).
    fn cost(&self) -> u64 {
        (self.words as u64).max(self.line.text.len() as u64 / 7)
    }
}

/// The words of a line after its speaker (`user: `, `read_file returned: `).
fn speech(text: &str) -> &str {
    for marker in [
        "user: ",
        "assistant: ",
        "note: ",
        "user asked: ",
        "assistant asked: ",
    ] {
        if let Some(rest) = text.strip_prefix(marker) {
            return rest;
        }
    }
    for marker in [" returned: ", " failed: "] {
        if let Some((_, rest)) = text.split_once(marker) {
            return rest;
        }
    }
    text.strip_prefix("Goal: ").unwrap_or(text)
}

/// `text` cut to `n` words, with a marker when cut.
fn first_words(text: &str, n: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().take(n.saturating_add(1)).collect();
    if words.len() > n {
        format!("{} …", words[..n].join(" "))
    } else {
        words.join(" ")
    }
}

/// Summarizes `messages`, folding in `previous` (an earlier summary) first.
pub fn summarize(
    previous: Option<&str>,
    messages: &[Message],
    options: &ExtractiveOptions,
) -> String {
    let refs: Vec<&Message> = messages.iter().collect();
    summarize_refs(previous, &refs, options)
}

/// [`summarize`] over borrowed messages (a non-contiguous selection, without cloning).
pub fn summarize_refs(
    previous: Option<&str>,
    messages: &[&Message],
    options: &ExtractiveOptions,
) -> String {
    let budget = options.word_budget.max(1);
    let per_item = options.max_words_per_item.max(1);

    // A summary message inside the span (from a destructive peer, or a legacy thread)
    // is an earlier summary, not a user statement.
    let mut previous_text = previous.map(str::to_owned);
    for m in messages {
        if m.name() == Some(SUMMARY_NAME) && previous_text.is_none() {
            previous_text = Some(strip_summary_prefix(&m.text()).to_owned());
        }
    }

    let previous_lines = previous_text
        .as_deref()
        .map(grouping::parse)
        .unwrap_or_default();
    let stats = statistics(&previous_lines, messages);
    let mut tools: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let (mut candidates, has_goal) = previous_candidates(previous_lines, &stats, &mut tools);
    let offset = candidates.len();
    // A continued span's first user message is a statement, unless the summary so far
    // has no goal (the first message was kept verbatim when that summary was made).
    collect(
        messages,
        has_goal,
        per_item,
        offset,
        &stats,
        &mut candidates,
        &mut tools,
    );
    if !tools.is_empty() {
        let line = Line {
            section: Section::Done,
            reference: None,
            text: tools_line(&tools),
        };
        let c = Candidate::new(line, &Information::default(), 1, usize::MAX);
        candidates.push(c);
    }

    let selected = select(candidates, budget, per_item);
    if selected.is_empty() {
        if messages.is_empty() {
            return String::new();
        }
        let n = messages.len();
        let text = format!(
            "{n} earlier message{} with nothing to keep.",
            if n == 1 { "" } else { "s" }
        );
        return format!("- {}", first_words(&text, budget.min(per_item)));
    }
    grouping::render(&selected, budget >= HEADERS_FROM_BUDGET)
}

/// The candidates of an earlier summary's lines, and whether one of them is the goal.
/// Its tool-count line is added to `tools` instead of becoming a candidate.
fn previous_candidates(
    lines: Vec<Line>,
    stats: &Stats,
    tools: &mut BTreeMap<String, (usize, usize)>,
) -> (Vec<Candidate>, bool) {
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut has_goal = false;
    for (order, mut line) in lines.into_iter().enumerate() {
        if let Some(counts) = parse_tools_line(&line.text) {
            for (name, (ok, failed)) in counts {
                let e = tools.entry(name).or_default();
                e.0 += ok;
                e.1 += failed;
            }
            continue;
        }
        // One goal: the first. A later "Goal:" line (notes of an older span made
        // without the summary) is a statement like the others.
        let goal = line.text.starts_with("Goal: ");
        if goal && has_goal {
            line.text = format!("user: {}", speech(&line.text));
        }
        let goal = goal && !has_goal;
        has_goal |= goal;
        candidates.extend(previous_candidate(line, goal, order, stats));
    }
    (candidates, has_goal)
}

/// One line of an earlier summary as a candidate, with the bonus for having been kept
/// before (and for a current value), or `None` for filler an older summary kept.
fn previous_candidate(line: Line, goal: bool, order: usize, stats: &Stats) -> Option<Candidate> {
    let body = without_was(speech(&line.text)).to_owned();
    let info = scoring::information(&body);
    let rare = stats.rare(&body);
    let assistant = line.text.starts_with("assistant");
    if !goal
        && tool_of_line(&line.text).is_none()
        && (scoring::is_filler(&body, &info, assistant)
            || scoring::is_narration(&body, &info)
            || slight(&body, &info, rare))
    {
        return None; // an earlier summary's filler (older rules kept some) is dropped
    }
    let was = line
        .text
        .rfind(" (was ")
        .filter(|_| line.text.ends_with(')'))
        .map(|i| line.text[i + 6..line.text.len() - 1].to_owned());
    let mut c = match tool_of_line(&line.text) {
        Some((_, failed)) => {
            let base = if failed { TOOL_FAILED } else { TOOL };
            Candidate::new(
                line,
                &info,
                base + KEPT_BEFORE + Stats::bonus(rare, &info),
                order,
            )
        }
        None => {
            let base = if line.text.starts_with("assistant") {
                ASSISTANT
            } else {
                USER
            };
            let mut c = Candidate::new(
                line,
                &info,
                base + KEPT_BEFORE + Stats::bonus(rare, &info),
                order,
            );
            c.subject = scoring::subject(&body);
            c
        }
    };
    c.was = was;
    if c.was.is_some() {
        c.score += CURRENT;
    }
    c.goal = goal;
    Some(c)
}

/// A short remark with nothing in it ("That part looks normal.", "Same picture as
/// before."): five words or fewer, no value (not even a number) or cue, and fewer
/// than three rare terms.
fn slight(sentence: &str, info: &Information, rare: u32) -> bool {
    info.values.is_empty() && info.cues == 0 && rare < 3 && grouping::count_words(sentence) <= 5
}

/// Term and shape counts over the previous summary's lines and the span's sentences
/// and tool-output lines.
fn statistics(previous: &[Line], messages: &[&Message]) -> Stats {
    let mut stats = Stats::default();
    for line in previous {
        stats.add_unit(without_was(speech(&line.text)));
    }
    for m in messages {
        if m.name() == Some(SUMMARY_NAME) {
            continue;
        }
        let text = m.text();
        if let MessageBody::Tool(_) = m.body() {
            // Log records are never candidates; their terms would only make the
            // session's vocabulary look common.
            for line in tool_lines(&text).filter(|l| !scoring::is_log_record(l)) {
                stats.add_unit(line);
            }
        } else {
            for sentence in scoring::sentences(&text) {
                stats.add_unit(scoring::strip_chat_prefix(sentence));
            }
        }
    }
    stats
}

/// The lines of a tool result that are read: the first [`TOOL_LINES`] non-empty ones.
fn tool_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(TOOL_LINES)
}

/// Where the span's words are said: for each key (a value-like piece or a content
/// term, see [`reference_keys`]), the last message whose user or assistant statements
/// hold it. A record (a tool's output line, a pasted log line) is kept only when a
/// later message relies on it: names one of its values or rare terms.
#[derive(Default)]
struct Mentions {
    last: HashMap<String, usize>,
}

impl Mentions {
    /// The mentions in the statements of `messages` (filler and narration say nothing
    /// about a record: "Pulling the next batch of logs.") and in the arguments of the
    /// tool calls they make.
    fn of(messages: &[&Message]) -> Mentions {
        let mut last = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            if m.name() == Some(SUMMARY_NAME) || !(m.is_human() || m.is_ai()) {
                continue;
            }
            let text = m.text();
            for sentence in scoring::sentences(scoring::strip_label(&text, m.name())) {
                let sentence = scoring::strip_chat_prefix(sentence);
                if scoring::is_record(sentence) {
                    continue;
                }
                let info = scoring::information(sentence);
                if scoring::is_filler(sentence, &info, m.is_ai())
                    || scoring::is_narration(sentence, &info)
                {
                    continue;
                }
                reference_keys(sentence, |k| {
                    last.insert(k, i);
                });
            }
            // A call made with a record's value relies on it (a path found, then read).
            for call in m.tool_calls() {
                pieces(&call.args.to_string(), |p| {
                    last.insert(p.to_owned(), i);
                });
            }
        }
        Mentions { last }
    }

    /// True when a message after `index` mentions `key`.
    fn after(&self, key: &str, index: usize) -> bool {
        self.last.get(key).is_some_and(|&j| j > index)
    }

    /// True when a message after `index` relies on `line`: names one of its value-like
    /// pieces, one of its terms rare in the session, or (`about`: the call's tool and
    /// target) what it was about.
    fn rely_on(&self, line: &str, about: &str, index: usize, stats: &Stats) -> bool {
        let mut hit = false;
        pieces(line, |p| hit |= self.after(p, index));
        if hit {
            return true;
        }
        scoring::terms(line, |t| {
            hit |= stats.df.get(t).is_some_and(|e| e.0 <= RELIED_DF) && self.after(t, index);
        });
        if hit {
            return true;
        }
        scoring::terms(about, |t| hit |= self.after(t, index));
        hit
    }
}

/// A term in at most this many sentences can show that a later one relies on a record.
const RELIED_DF: u32 = 3;

/// The keys a statement can name a record by: value-like pieces ([`pieces`]) and
/// content terms.
fn reference_keys(text: &str, mut each: impl FnMut(String)) {
    pieces(text, |p| each(p.to_owned()));
    scoring::terms(text, |t| each(t.to_owned()));
}

/// The value-like pieces of a text, lower-cased: runs between spaces and punctuation
/// (`/ : = , ; ( ) [ ] { } " ' < >`) of four characters or more with a digit or an
/// inner `-`, `_` or `.` (`build-5312`, `registry.acme.internal`, `9888605`).
fn pieces(text: &str, mut each: impl FnMut(&str)) {
    for raw in text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '/' | ':'
                    | '='
                    | ','
                    | ';'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | '{'
                    | '}'
                    | '"'
                    | '\''
                    | '<'
                    | '>'
                    | '`'
            )
    }) {
        let p = raw
            .trim_end_matches(['.', '!', '?'])
            .trim_start_matches(['#', '@']);
        if p.len() < 4 {
            continue;
        }
        let digit = p.bytes().any(|b| b.is_ascii_digit());
        let joined = p.trim_matches(['-', '_', '.']).contains(['-', '_', '.']);
        if digit || joined {
            each(&p.to_lowercase());
        }
    }
}

/// True for a `key: value` line with a short value (`image: registry/x:build-5312`,
/// `Not After: 2026-12-24 23:59:59 UTC`): a field of a record, not a sentence.
fn is_field(line: &str) -> bool {
    line.split_once(": ").is_some_and(|(key, value)| {
        !key.is_empty()
            && key.split_whitespace().count() <= 3
            && value.split_whitespace().count() <= 4
    })
}

/// Candidates from the span's messages.
fn collect(
    messages: &[&Message],
    has_goal: bool,
    per_item: usize,
    offset: usize,
    stats: &Stats,
    out: &mut Vec<Candidate>,
    tools: &mut BTreeMap<String, (usize, usize)>,
) {
    let last = LastTurn::of(messages);
    let mentions = Mentions::of(messages);
    // The goal is the span's first user message, when it asks for something (a
    // greeting states no goal, and a later message is not taken for one).
    let mut seen_goal = has_goal;
    // The question the last message ended with, and whether the user asked it.
    let mut asked: Option<(bool, String)> = None;
    for (index, m) in messages.iter().enumerate() {
        if m.name() == Some(SUMMARY_NAME) {
            continue;
        }
        let reference = grouping::reference(m.id());
        let order = offset + index * 64;
        let source = Source {
            reference: &reference,
            id: m.id(),
            index,
            per_item,
            stats,
            mentions: &mentions,
        };
        match m.body() {
            MessageBody::Human(_) | MessageBody::System(_) => {
                let full = m.text();
                let text = scoring::strip_label(&full, m.name());
                let human = m.is_human();
                if human && !seen_goal {
                    seen_goal = true;
                    if let Some(c) = goal_candidate(text, &reference, order) {
                        out.push(c);
                        continue;
                    }
                }
                let speaker = Speaker {
                    name: if human { "user" } else { "note" },
                    human,
                    open: human && Some(index) == last.human && !last.answered,
                    asked: asked
                        .as_ref()
                        .filter(|(by_human, _)| human && !by_human)
                        .map(|(_, q)| q.as_str()),
                };
                statements(text, speaker, &source, order, out);
                asked = last_question(text).map(|q| (human, q));
            }
            MessageBody::Ai(_) => {
                let full = m.text();
                let text = scoring::strip_label(&full, m.name());
                let open = Some(index) == last.ai_text
                    && !messages[index + 1..].iter().any(|m| m.is_human());
                let speaker = Speaker {
                    name: "assistant",
                    human: false,
                    open,
                    asked: asked
                        .as_ref()
                        .filter(|(by_human, _)| *by_human)
                        .map(|(_, q)| q.as_str()),
                };
                statements(text, speaker, &source, order, out);
                // A message with only tool calls answers nothing yet.
                if !text.trim().is_empty() {
                    asked = last_question(text).map(|q| (false, q));
                }
            }
            MessageBody::Tool(t) => {
                let (name, target) =
                    caller(messages, index, &t.tool_call_id).unwrap_or_else(|| {
                        (
                            t.name.clone().unwrap_or_else(|| "tool".into()),
                            String::new(),
                        )
                    });
                let failed = t.status == ToolStatus::Error;
                let counts = tools.entry(name.clone()).or_default();
                if failed {
                    counts.1 += 1;
                } else {
                    counts.0 += 1;
                }
                let call = Call {
                    name: &name,
                    target: &target,
                    failed,
                };
                outcome(m, &call, &source, order, out);
            }
        }
    }
}

/// Where the span's last turn is: the last human message, whether the assistant
/// answered it in words, and the last assistant message with words.
struct LastTurn {
    human: Option<usize>,
    answered: bool,
    ai_text: Option<usize>,
}

impl LastTurn {
    /// The last turn of `messages`.
    fn of(messages: &[&Message]) -> LastTurn {
        let human = messages
            .iter()
            .rposition(|m| m.is_human() && m.name() != Some(SUMMARY_NAME));
        let answered = human.is_some_and(|h| {
            messages[h + 1..]
                .iter()
                .any(|m| m.is_ai() && !m.text().trim().is_empty())
        });
        let ai_text = messages
            .iter()
            .rposition(|m| m.is_ai() && !m.text().trim().is_empty());
        LastTurn {
            human,
            answered,
            ai_text,
        }
    }
}

/// The message a candidate comes from, and what its lines are judged against.
struct Source<'a> {
    /// The message's short reference.
    reference: &'a Option<String>,
    /// The message's id.
    id: &'a str,
    /// The message's position in the span.
    index: usize,
    /// Maximum words of one line.
    per_item: usize,
    stats: &'a Stats,
    mentions: &'a Mentions,
}

impl Source<'_> {
    /// True when a later message relies on the record `line` (see [`Mentions`]).
    fn relied_on(&self, line: &str, about: &str) -> bool {
        self.mentions.rely_on(line, about, self.index, self.stats)
    }
}

/// The goal line of the first user message, when it has one.
fn goal_candidate(text: &str, reference: &Option<String>, order: usize) -> Option<Candidate> {
    let goal = goal_text(text)?;
    let line = Line {
        section: Section::Goal,
        reference: reference.clone(),
        text: format!("Goal: {goal}"),
    };
    let mut c = Candidate::new(line, &Information::default(), USER, order);
    c.goal = true;
    Some(c)
}

/// The candidates of one message's sentences, each at its own position after `order`.
fn statements(
    text: &str,
    speaker: Speaker<'_>,
    source: &Source<'_>,
    order: usize,
    out: &mut Vec<Candidate>,
) {
    for (k, sentence) in scoring::sentences(text).into_iter().enumerate() {
        if k == 0
            && let Some(question) = speaker.asked
            && let Some(c) = answer(question, sentence, speaker, source, order)
        {
            out.push(c);
            continue;
        }
        statement(sentence, speaker, source, order + k.min(63), out);
    }
}

/// Words of a short answer at most: longer, the answer stands on its own.
const ANSWER_WORDS: usize = 4;

/// The last sentence of `text` when it is a question, without a chat prefix.
fn last_question(text: &str) -> Option<String> {
    let last = scoring::strip_chat_prefix(scoring::sentences(text).pop()?);
    (last.ends_with('?') || last.ends_with('？')).then(|| last.to_owned())
}

/// A short answer to the other speaker's question ("Bach and Mozart.", "Yes, pin
/// it."), written with the question it answers: alone it says nothing, together they
/// are a preference or a decision. `None` when the answer is long enough to stand on
/// its own, is a question, or the question names nothing.
fn answer(
    question: &str,
    sentence: &str,
    speaker: Speaker<'_>,
    source: &Source<'_>,
    order: usize,
) -> Option<Candidate> {
    let reply = scoring::compress(scoring::strip_chat_prefix(sentence));
    let words = grouping::count_words(&reply);
    if words == 0
        || words > ANSWER_WORDS
        || reply.ends_with('?')
        || reply.ends_with('？')
        || scoring::is_record(&reply)
    {
        return None;
    }
    let asked = scoring::information(question);
    if (!scoring::substantive(&asked) && asked.cues == 0 && asked.content < 2)
        || scoring::is_small_talk(question, &asked)
    {
        return None; // "How have you been?": small talk
    }
    // "Yes." and "No." answer; "Will do." and "Checking." only acknowledge.
    let mine = scoring::information(&reply);
    let first = reply
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .next()
        .unwrap_or("")
        .to_lowercase();
    let affirms = matches!(
        first.as_str(),
        "yes" | "yeah" | "yep" | "yup" | "no" | "nope" | "correct" | "exactly" | "agreed"
    );
    let says = scoring::substantive(&mine) || mine.content > 0 || scoring::names(&reply);
    if !affirms && (!says || scoring::is_narration(&reply, &mine)) {
        return None;
    }
    let info = scoring::information(&format!("{question} {reply}"));
    let asker = if speaker.human { "assistant" } else { "user" };
    let text = first_words(
        &format!("{asker} asked: {question} {}: {reply}", speaker.name),
        source.per_item,
    );
    let base = if speaker.human { USER } else { ASSISTANT };
    let mut c = Candidate::new(
        Line {
            section: Section::Facts,
            reference: source.reference.clone(),
            text,
        },
        &info,
        base + 1,
        order,
    );
    c.id = Some(source.id.to_owned());
    c.subject = scoring::subject(&reply);
    Some(c)
}

/// The goal: a user message without its greetings and small talk, cut to
/// [`GOAL_WORDS`]; `None` when nothing is left (a greeting states no goal).
fn goal_text(text: &str) -> Option<String> {
    let kept: Vec<&str> = scoring::sentences(text)
        .into_iter()
        .filter(|s| {
            let s = scoring::strip_chat_prefix(s);
            let info = scoring::information(s);
            let question = s.ends_with('?') || s.ends_with('？');
            !(scoring::is_filler(s, &info, false)
                || scoring::is_exclamation(s, &info)
                || scoring::is_remark(&scoring::compress(s), &info)
                // About the speaker, the listener or something unnamed, asking and
                // naming nothing ("They've been there for me for 4 years.").
                || (scoring::opens_with_pronoun(&scoring::compress(s))
                    && info.cues == 0
                    && !question
                    && !info.values.iter().any(|(k, _)| {
                        !matches!(
                            k,
                            Entity::Number | Entity::Acronym | Entity::DateTime | Entity::Quantity
                        )
                    }))
                || scoring::is_past_narration(s, &info)
                || scoring::is_record(s)
                || (question && info.is_empty() && info.content < 2)
                || (question && scoring::is_small_talk(s, &info)))
        })
        .collect();
    let goal = first_words(&kept.join(" "), GOAL_WORDS);
    (!goal.is_empty()).then_some(goal)
}

/// Who says a sentence.
#[derive(Clone, Copy)]
struct Speaker<'a> {
    name: &'a str,
    human: bool,
    /// The sentence is part of the last, unanswered turn.
    open: bool,
    /// The other speaker's question this message may answer.
    asked: Option<&'a str>,
}

/// One sentence of the user (or the assistant, or a system note) as a candidate.
fn statement(
    sentence: &str,
    speaker: Speaker<'_>,
    source: &Source<'_>,
    order: usize,
    out: &mut Vec<Candidate>,
) {
    let Some(judged) = judge(sentence, speaker, source.stats) else {
        return;
    };
    let Speaker {
        name: speaker,
        human,
        open,
        ..
    } = speaker;
    let Judged {
        sentence,
        info,
        rare,
        question,
        empty,
        record,
    } = judged;
    // A pasted record (a log line, a row, JSON) is evidence, not a statement: it goes
    // in only when a later message relies on it, and weighs what a tool's line does.
    if record && !(question && open) && !source.relied_on(&sentence, "") {
        return;
    }
    let text = first_words(&sentence, source.per_item);
    let (section, text, base) = if record && !question {
        (Section::Facts, format!("{speaker}: {text}"), TOOL)
    } else if question {
        if open {
            let base = if human { USER + 2 } else { 1 };
            (Section::Open, format!("{speaker} asked: {text}"), base)
        } else if info.score() >= 4 {
            out.push(past_question(speaker, &text, &info, source, order));
            return;
        } else {
            return;
        }
    } else if info.cues & (scoring::RULE | scoring::REQUIREMENT) != 0 && human {
        (Section::Goal, format!("{speaker}: {text}"), USER)
    } else {
        let base = if human { USER } else { ASSISTANT };
        (Section::Facts, format!("{speaker}: {text}"), base)
    };
    let mut c = Candidate::new(
        Line {
            section,
            reference: source.reference.clone(),
            text,
        },
        &info,
        base + Stats::bonus(rare, &info),
        order,
    );
    c.id = Some(source.id.to_owned());
    if info.values.is_empty() && grouping::count_words(&sentence) < 6 && rare < 2 {
        // "Needs checking.", "That's the decision.": a cue with nothing it applies to.
        c.score = base + info.score() / 2;
    }
    if empty && section != Section::Open {
        return; // nothing recognisable: a narrow summary leaves the room unused
    }
    if c.score > 0 {
        c.subject = scoring::subject(&sentence);
        out.push(c);
    }
}

/// A sentence worth a line, as [`judge`] reads it.
struct Judged {
    /// The sentence without a chat prefix, compressed.
    sentence: String,
    info: Information,
    /// Rare terms in it.
    rare: u32,
    question: bool,
    /// No value, cue or rare terms to speak of.
    empty: bool,
    /// Machine output pasted into a message ([`scoring::is_record`]).
    record: bool,
}

/// Content words a statement with no cue and no value needs to be one ("The mobile
/// team is frozen."); fewer, it is a remark.
const PLAIN_CONTENT: u32 = 3;

/// What a sentence says, or `None` when it is worth no line: a repeated report, an
/// assistant sentence with nothing in it, a past question naming little, filler,
/// narration, an announcement of a paste, or a slight remark (an open question is
/// always kept).
fn judge(sentence: &str, speaker: Speaker<'_>, stats: &Stats) -> Option<Judged> {
    let Speaker { human, open, .. } = speaker;
    // A pasted chat line (`[09:12] Sam: ...`) is judged by what it says.
    let sentence = scoring::strip_chat_prefix(sentence);
    if stats.noise(sentence) && !open {
        return None; // a report repeated with other values: a status line, not a fact
    }
    let record = scoring::is_record(sentence);
    let sentence = scoring::compress(sentence);
    let info = scoring::information(&sentence);
    let rare = stats.rare(&sentence);
    let question = sentence.ends_with('?') || sentence.ends_with('？');
    let empty = info.is_empty() && rare < 2;
    let kept_open = question && open;
    if record {
        // Judged by whether a later message relies on it (see `statement`).
        return Some(Judged {
            sentence,
            info,
            rare,
            question,
            empty,
            record,
        });
    }
    if empty && !kept_open {
        return None; // nothing in it: no line, whoever says it
    }
    if question && !open && info.score() < 4 {
        return None;
    }
    // Filler by its shape: two words with no value, an acknowledgement, a greeting or
    // compliment shouted, a story about the past, narration of one's own work, an
    // announcement of what follows, a remark without content words.
    // Scripts without spaces have no words to count.
    let spaced = !sentence.chars().any(scoring::is_cjk);
    // A hyphenated word alone ("Breath-taking.") is an exclamation, not a name.
    let short = spaced
        && grouping::count_words(&sentence) <= 2
        && info.values.iter().all(|(k, _)| {
            matches!(
                k,
                Entity::Number | Entity::Acronym | Entity::DateTime | Entity::Name
            )
        });
    let plain = spaced
        && info.is_empty()
        && (info.content < PLAIN_CONTENT || scoring::opens_with_pronoun(&sentence));
    if (short
        || plain
        || scoring::is_filler(&sentence, &info, !human)
        || scoring::is_exclamation(&sentence, &info)
        || scoring::is_past_narration(&sentence, &info)
        || scoring::is_remark(&sentence, &info)
        || sentence.ends_with(':')
        || scoring::is_narration(&sentence, &info)
        || slight(&sentence, &info, rare))
        && !kept_open
    {
        return None;
    }
    Some(Judged {
        sentence,
        info,
        rare,
        question,
        empty,
        record,
    })
}

/// A past question as a fact line: it names what was looked at, so it counts its
/// values at half the worth of a statement (no cues).
fn past_question(
    speaker: &str,
    text: &str,
    info: &Information,
    source: &Source<'_>,
    order: usize,
) -> Candidate {
    let info = Information {
        cues: 0,
        values: info.values.clone(),
        content: info.content,
    };
    let mut c = Candidate::new(
        Line {
            section: Section::Facts,
            reference: source.reference.clone(),
            text: format!("{speaker} asked: {text}"),
        },
        &info,
        0,
        order,
    );
    c.id = Some(source.id.to_owned());
    Candidate {
        score: c.score / 2,
        ..c
    }
}

/// The call a tool result answers.
struct Call<'a> {
    name: &'a str,
    target: &'a str,
    failed: bool,
}

impl Call<'_> {
    /// What the call was about, as a later message may name it: the last part of the
    /// tool's name (`check_disk`: disk) and its target.
    fn about(&self) -> String {
        let object = self
            .name
            .rsplit(['_', '-', '.'])
            .next()
            .unwrap_or(self.name);
        format!("{object} {}", self.target)
    }
}

/// The lines of a tool result worth a place, as `name target returned: line` (or
/// `failed:`): what the output says decides, not the tool's name. Repeated report
/// lines (logs, tables of the same shape) are skipped; of the rest, the
/// [`TOOL_KEEP`] best.
fn outcome(
    m: &Message,
    call: &Call<'_>,
    source: &Source<'_>,
    order: usize,
    out: &mut Vec<Candidate>,
) {
    let text = m.text();
    let target = if call.target.is_empty() {
        String::new()
    } else {
        format!(" {}", call.target)
    };
    let mut best = outcome_lines(&text, call, &target, source, order);
    if best.is_empty() && !call.failed {
        best.extend(whole_answer(&text, call, &target, source, order));
    }
    if best.is_empty() && call.failed {
        best.extend(failure_line(&text, call, &target, source, order));
    }
    // The best lines by score per word, then back in their order.
    best.sort_by(|a, b| {
        let pa = u64::from(a.score) * 1000 / (a.cost() + 3);
        let pb = u64::from(b.score) * 1000 / (b.cost() + 3);
        pb.cmp(&pa).then(a.order.cmp(&b.order))
    });
    best.truncate(TOOL_KEEP);
    best.sort_by_key(|c| c.order);
    out.extend(best);
}

/// The candidates of a tool result's lines one by one, in their order: lines of a
/// repeated shape (a table, a log), cut lines, status reports, lines with nothing
/// recognisable and table headers are skipped. `target` is the call's target with a
/// leading space, or empty.
fn outcome_lines(
    text: &str,
    call: &Call<'_>,
    target: &str,
    source: &Source<'_>,
    order: usize,
) -> Vec<Candidate> {
    let verb = if call.failed { "failed" } else { "returned" };
    let mut best: Vec<Candidate> = Vec::new();
    // Rows of one shape in one output are a table or a log: rows, not facts. Log
    // records are known by their opening and never hashed.
    let mut rows: HashMap<u64, u32> = HashMap::new();
    let lines: Vec<(usize, &str, u64)> = tool_lines(text)
        .enumerate()
        .filter(|(_, l)| call.failed || !scoring::is_log_record(l))
        .map(|(k, l)| (k, l, scoring::noise_shape(l)))
        .collect();
    for (_, _, shape) in &lines {
        *rows.entry(*shape).or_insert(0) += 1;
    }
    for &(k, line, shape) in &lines {
        // A line cut in its middle (a capped output) is half a record.
        if line.contains(" characters omitted ...]") {
            continue;
        }
        if !call.failed && rows.get(&shape).is_some_and(|n| *n >= 2) {
            continue;
        }
        let error = call.failed && {
            let lower = line.to_ascii_lowercase();
            ["error", "fail", "exception", "denied", "refused"]
                .iter()
                .any(|w| lower.contains(w))
        };
        if source.stats.noise(line) && !error {
            continue;
        }
        // A record (a field, a row, a log line) goes in only when a later message
        // relies on it; a sentence the tool writes ("Created incident INC-7.") and a
        // failure's error line are outcomes.
        if !error
            && (scoring::is_record(line) || is_field(line))
            && !source.relied_on(line, &call.about())
        {
            continue;
        }
        let shown = first_words(line, source.per_item.min(TOOL_WORDS));
        let info = scoring::information(&shown);
        let rare = source.stats.rare(&shown);
        if info.is_empty() && rare < 2 && !error {
            continue;
        }
        // A table's header row (`LAST SEEN TYPE REASON OBJECT`) names columns only.
        if info.values.iter().all(|(k, _)| *k == Entity::Acronym)
            && shown
                .split_whitespace()
                .all(|w| !w.chars().any(char::is_lowercase))
        {
            continue;
        }
        let base = if error { TOOL_FAILED } else { TOOL };
        let mut c = Candidate::new(
            Line {
                section: Section::Done,
                reference: source.reference.clone(),
                text: format!("{}{target} {verb}: {shown}", call.name),
            },
            &info,
            base + Stats::bonus(rare, &info),
            order + k.min(63),
        );
        c.id = Some(source.id.to_owned());
        best.push(c);
    }
    best
}

/// A short answer whose lines say nothing alone (`count / ----- / 9888605`), read
/// whole: with the call's target (the query) it is the finding.
fn whole_answer(
    text: &str,
    call: &Call<'_>,
    target: &str,
    source: &Source<'_>,
    order: usize,
) -> Option<Candidate> {
    let lines: Vec<&str> = tool_lines(text).take(7).collect();
    let joined = if lines.len() <= 6 {
        lines.join(" ")
    } else {
        String::new()
    };
    if joined.is_empty()
        || grouping::count_words(&joined) > TOOL_WORDS
        || !source.relied_on(&joined, &call.about())
    {
        return None;
    }
    let info = scoring::information(&joined);
    if info.values.is_empty() {
        return None;
    }
    let mut c = Candidate::new(
        Line {
            section: Section::Done,
            reference: source.reference.clone(),
            text: format!("{}{target} returned: {joined}", call.name),
        },
        &info,
        TOOL + 4,
        order,
    );
    c.id = Some(source.id.to_owned());
    Some(c)
}

/// The first line of a failed call's output: a failure says so even when its output
/// says nothing recognisable.
fn failure_line(
    text: &str,
    call: &Call<'_>,
    target: &str,
    source: &Source<'_>,
    order: usize,
) -> Option<Candidate> {
    let first = tool_lines(text).next()?;
    let shown = first_words(first, source.per_item.min(TOOL_WORDS));
    let mut c = Candidate::new(
        Line {
            section: Section::Done,
            reference: source.reference.clone(),
            text: format!("{}{target} failed: {shown}", call.name),
        },
        &Information::default(),
        TOOL_FAILED,
        order,
    );
    c.id = Some(source.id.to_owned());
    Some(c)
}

/// The tool and whether it failed, for a line written by [`outcome`].
fn tool_of_line(text: &str) -> Option<(&str, bool)> {
    let returned = text.find(" returned: ");
    let failed = text.find(" failed: ");
    let failed = match (returned, failed) {
        (Some(r), Some(f)) => f < r,
        (None, Some(_)) => true,
        (Some(_), None) => false,
        (None, None) => return None,
    };
    let name = text.split_whitespace().next()?;
    if matches!(name, "user:" | "assistant:" | "note:" | "Goal:") {
        return None;
    }
    Some((name, failed))
}

/// The last two words of a subject.
fn last_two_words(s: &str) -> &str {
    match s.rmatch_indices(' ').nth(1) {
        Some((i, _)) => &s[i + 1..],
        None => s,
    }
}

/// True when the shorter of two subjects, one ending the other, starts at a word.
fn word_aligned(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.len() == long.len() || long.as_bytes()[long.len() - short.len() - 1] == b' '
}

/// Picks lines by score per word until the budget is spent, then puts them back in
/// chronological order.
fn select(mut candidates: Vec<Candidate>, budget: usize, per_item: usize) -> Vec<Line> {
    drop_stale(&mut candidates);
    rank(&mut candidates);
    let headers = budget >= HEADERS_FROM_BUDGET;
    let mut used = 0usize;
    let mut sections: BTreeSet<Section> = BTreeSet::new();
    let mut covered: BTreeSet<String> = BTreeSet::new();
    let mut texts: BTreeSet<String> = BTreeSet::new();
    let mut chosen: Vec<(usize, Option<String>, Line)> = Vec::new();
    let mut goal_taken = false;
    for mut c in candidates {
        if c.goal {
            if goal_taken {
                continue;
            }
            goal_taken = true;
        }
        if !c.cue && !c.goal && !c.values.is_empty() && c.values.iter().all(|v| covered.contains(v))
        {
            continue; // says nothing a kept line does not already say
        }
        if budget.saturating_sub(used) < 2 {
            break;
        }
        let header = if headers && !sections.contains(&c.line.section) {
            grouping::count_words(c.line.section.header())
        } else {
            0
        };
        let room = budget.saturating_sub(used + header);
        if !fit(&mut c, room, per_item) {
            continue;
        }
        if !texts.insert(without_was(speech(&c.line.text)).to_owned()) {
            continue;
        }
        used += c.words + header;
        sections.insert(c.line.section);
        covered.extend(c.values.iter().cloned());
        chosen.push((c.order, c.id, c.line));
    }
    chosen.sort_by_key(|(order, _, _)| *order);
    with_full_references(chosen)
}

/// Removes the candidates a newer line makes stale, then scores recurring reports down.
///
/// A newer statement about the same subject replaces an older one; of lines with the
/// same shape, the newest stays; a line a later correction replaces goes (see
/// [`corrections`]). Subjects are grouped by their last two words; within a group,
/// "cache ttl" and "ledger-api cache ttl" are the same subject (one ends the other),
/// while "ledger-api cache ttl" and "billing-gw cache ttl" are not. The goal is never
/// stale.
fn drop_stale(candidates: &mut Vec<Candidate>) {
    let corrected = corrections(candidates);
    let mut subjects: BTreeMap<&str, Vec<(&str, usize)>> = BTreeMap::new();
    let mut newest_shape: BTreeMap<u64, usize> = BTreeMap::new();
    let mut repeats: BTreeMap<u64, usize> = BTreeMap::new();
    for c in candidates.iter() {
        if c.goal {
            continue;
        }
        *repeats.entry(c.shape).or_insert(0) += 1;
        if let Some(s) = &c.subject {
            subjects
                .entry(last_two_words(s))
                .or_default()
                .push((s.as_str(), c.order));
        }
        let e = newest_shape.entry(c.shape).or_insert(c.order);
        *e = (*e).max(c.order);
    }
    let replaced = |c: &Candidate| -> bool {
        let Some(s) = c.subject.as_deref() else {
            return false;
        };
        subjects.get(last_two_words(s)).is_some_and(|group| {
            group.iter().any(|(other, order)| {
                *order > c.order
                    && (other.ends_with(s) || s.ends_with(other))
                    && word_aligned(s, other)
            })
        })
    };
    let stale: Vec<bool> = candidates
        .iter()
        .zip(&corrected)
        .map(|(c, corrected)| {
            !c.goal
                && (*corrected
                    || replaced(c)
                    || newest_shape.get(&c.shape).is_some_and(|&o| o > c.order))
        })
        .collect();
    let mut keep = stale.iter().map(|s| !s);
    candidates.retain(|_| keep.next().unwrap_or(false));
    // A report that recurs with other values (a status line polled again) is worth
    // less than a fact stated once: only its newest copy stays, at a quarter of its
    // score.
    for c in candidates.iter_mut() {
        if !c.goal && repeats.get(&c.shape).is_some_and(|n| *n >= 2) {
            c.score /= 4;
        }
    }
}

/// Sorts the candidates in the order they are picked: the goal first (the earliest),
/// then by score per word, ties to the older line.
fn rank(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| {
        b.goal
            .cmp(&a.goal)
            .then_with(|| {
                if a.goal && b.goal {
                    a.order.cmp(&b.order)
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .then_with(|| {
                let pa = u64::from(a.score) * 1000 / (a.cost() + 3);
                let pb = u64::from(b.score) * 1000 / (b.cost() + 3);
                pb.cmp(&pa)
            })
            .then_with(|| a.order.cmp(&b.order))
    });
}

/// Fits a picked candidate into the `room` words left: the goal is cut rather than
/// lost, a corrected value gets its `(was ...)` note. False when the line does not fit
/// (or is longer than a line may be).
fn fit(c: &mut Candidate, room: usize, per_item: usize) -> bool {
    if c.words > room {
        if c.goal && room >= 4 {
            // The goal is cut rather than lost.
            let reference = usize::from(c.line.reference.is_some());
            let text = first_words(&c.line.text, room - reference);
            c.line.text = text;
            c.words = grouping::count_words(&grouping::bullet(&c.line));
        } else {
            return false;
        }
    }
    if let Some(was) = &c.was {
        let text = format!("{} (was {was})", without_was(&c.line.text));
        c.words = grouping::count_words(&text) + usize::from(c.line.reference.is_some());
        c.line.text = text;
        if c.words > room {
            return false;
        }
    }
    c.words <= per_item + 4 || c.goal
}

/// The chosen lines, in their order, with whole ids where references collide.
///
/// A reference names one message: when two messages' references are the same (long
/// ids sharing a prefix and a suffix), those lines carry the whole id.
fn with_full_references(chosen: Vec<(usize, Option<String>, Line)>) -> Vec<Line> {
    let mut ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, id, line) in &chosen {
        if let (Some(r), Some(id)) = (&line.reference, id) {
            ids.entry(r.clone()).or_default().insert(id.clone());
        }
    }
    chosen
        .into_iter()
        .map(|(_, id, mut l)| {
            if let Some(r) = &l.reference
                && ids.get(r).is_some_and(|set| set.len() > 1)
            {
                l.reference = id.as_deref().and_then(grouping::full_reference);
            }
            l
        })
        .collect()
}

/// Marks the lines a later correction replaces: a line that says it corrects
/// ("change of plan: B instead", "switch to B", "bump it to B", "actually, B") or a
/// tool result showing `key: B` replaces the newest earlier line holding a value of
/// the same shape (unless both name different subjects); the correction then shows
/// `B (was A)`. Returns, per candidate, whether it was replaced.
fn corrections(candidates: &mut [Candidate]) -> Vec<bool> {
    let n = candidates.len();
    let mut replaced = vec![false; n];
    // Per value shape, the candidates holding one, oldest first.
    let mut history: HashMap<u64, Vec<usize>> = HashMap::new();
    for i in 0..n {
        if candidates[i].goal {
            continue;
        }
        let key = tool_key(&candidates[i].line.text);
        // Only someone speaking corrects with words: a tool's output saying "switch" (a
        // commit message, a log line) is data about something else.
        let spoken = tool_of_line(&candidates[i].line.text).is_none();
        let changing = spoken
            && !candidates[i].correction
            && !candidates[i].shaped.is_empty()
            && changes(speech(&candidates[i].line.text));
        let topic = if (spoken && candidates[i].correction) || changing || key.is_some() {
            topic(&candidates[i].line.text)
        } else {
            BTreeSet::new()
        };
        let says = spoken && (candidates[i].correction || (changing && !topic.is_empty()));
        if says || key.is_some() {
            let mut was: Option<String> = None;
            // A correction that names what it corrects replaces a value of the same
            // subject only, the newest one with a word of the subject in common ("bump
            // the request timeout to 90 s" after "set the request timeout to 30 s",
            // whatever values of the kind were said between). One that names nothing
            // ("change of plan: eu-west-3 instead") replaces the newest value of its
            // kind; so does a tool's `key: value`.
            let named = says && !topic.is_empty();
            for (shape, value) in &candidates[i].shaped {
                let Some(earlier) = history.get(shape) else {
                    continue;
                };
                let look = if named { CORRECTION_LOOK_BACK } else { 1 };
                let found = earlier.iter().rev().take(look).copied().find(|&j| {
                    let o = &candidates[j];
                    let c = &candidates[i];
                    if replaced[j] || o.shaped.iter().any(|(_, v)| v == value) {
                        return false;
                    }
                    // Without a word saying it corrects, two statements about subjects
                    // with no word in common are about two things ("the ledger-api TTL"
                    // and "the billing pool size").
                    if !says
                        && let (Some(a), Some(b)) = (&c.subject, &o.subject)
                        && !a.split(' ').any(|w| b.split(' ').any(|x| x == w))
                    {
                        return false;
                    }
                    if named && !same_topic(&topic, &self::topic(&o.line.text)) {
                        return false;
                    }
                    // A tool's `key: value` corrects what someone said about the key,
                    // not the same tool's earlier output (a poll is not a correction).
                    let said = tool_of_line(&o.line.text).is_none();
                    (says && (said || key.is_none()))
                        || (said && key.as_deref().is_some_and(|k| mentions(&o.line.text, k)))
                });
                let Some(j) = found else {
                    continue;
                };
                let o = &candidates[j];
                let Some((_, old)) = o.shaped.iter().find(|(s, _)| s == shape) else {
                    continue;
                };
                was = Some(as_written(&o.line.text, old));
                replaced[j] = true;
            }
            if was.is_some() {
                let c = &mut candidates[i];
                c.was = was;
                c.score += CURRENT;
            }
        }
        for (shape, _) in &candidates[i].shaped {
            history.entry(*shape).or_default().push(i);
        }
    }
    replaced
}

/// Earlier values of its kind a correction naming its subject looks through.
const CORRECTION_LOOK_BACK: usize = 16;

/// What a line is about: its content terms (see [`scoring::terms`]) other than the
/// words that say it corrects or changes something ("change of plan", "switch",
/// "bump") and units, so "Change of plan: eu-west-3 instead." is about nothing named
/// and "Bump the request timeout to 90 seconds." about the request timeout.
fn topic(text: &str) -> BTreeSet<String> {
    let body = without_was(speech(text));
    let info = scoring::information(body);
    let mut out = BTreeSet::new();
    scoring::topic_terms(body, |t| {
        // A value's own words (`release/26.11`, a person) are what changes, not what;
        // a hyphenated or underscored name (`request_timeout`) names the subject.
        if !CORRECTIONS.contains(&t)
            && !CHANGES.contains(&t)
            && !matches!(t, "change" | "plan")
            && !info
                .values
                .iter()
                .any(|(k, v)| *k != Entity::Name && v.contains(t))
        {
            out.insert(t.to_owned());
        }
    });
    // Hyphenated words whole (`cut-over`, `on-call`): their halves are short or common.
    for w in body.split_whitespace() {
        let w = w.trim_matches(|c: char| !c.is_alphanumeric());
        if w.contains('-') && w.chars().all(|c| c.is_alphabetic() || c == '-') {
            out.insert(w.to_lowercase().replace('-', ""));
        }
    }
    out
}

/// True when two topics share a word, a plural or a short inflection counting as the
/// same ("export" and "exports").
fn same_topic(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    a.iter().any(|x| {
        b.iter().any(|y| {
            let (short, long) = if x.len() <= y.len() { (x, y) } else { (y, x) };
            long.starts_with(short.as_str()) && long.len() - short.len() <= 2 && short.len() >= 4
        })
    })
}

/// The key of a tool-output line `name returned: key: value` (or `key = value`).
fn tool_key(text: &str) -> Option<String> {
    let (_, body) = text.split_once(" returned: ")?;
    let (key, _) = body.split_once([':', '='])?;
    let key = key.trim().trim_matches('"');
    let plain = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    (!key.is_empty() && key.len() <= 40 && plain).then(|| key.to_ascii_lowercase())
}

/// True when `text` mentions a word of `key` (`export_region` in "ship the exports").
fn mentions(text: &str, key: &str) -> bool {
    // `cutover_date` is the "cut-over" of "the cut-over is planned for ...".
    let lower = text.to_lowercase().replace('-', "");
    key.split(['_', '-', '.'])
        .filter(|w| w.len() >= 4)
        .any(|w| lower.contains(&w[..w.len().min(6)]))
}

/// `value` (lower-cased) as `text` writes it.
fn as_written(text: &str, value: &str) -> String {
    let lower = text.to_ascii_lowercase();
    match lower.find(value) {
        Some(i) if text.is_char_boundary(i) && text.is_char_boundary(i + value.len()) => {
            text[i..i + value.len()].to_owned()
        }
        _ => value.to_owned(),
    }
}

/// `Tools used: read_file ×3, kubectl_logs ×2 (1 failed)`: the most used tools first.
fn tools_line(tools: &BTreeMap<String, (usize, usize)>) -> String {
    let mut list: Vec<(&String, &(usize, usize))> = tools.iter().collect();
    list.sort_by(|a, b| (b.1.0 + b.1.1).cmp(&(a.1.0 + a.1.1)).then(a.0.cmp(b.0)));
    let parts: Vec<String> = list
        .iter()
        .take(TOOLS_LISTED)
        .map(|(name, (ok, failed))| {
            if *failed > 0 {
                format!("{name} ×{} ({failed} failed)", ok + failed)
            } else {
                format!("{name} ×{ok}")
            }
        })
        .collect();
    format!("Tools used: {}", parts.join(", "))
}

/// The counts of a `Tools used:` line of an earlier summary.
fn parse_tools_line(text: &str) -> Option<Vec<(String, (usize, usize))>> {
    let rest = text.strip_prefix("Tools used: ")?;
    let mut out = Vec::new();
    for part in rest.split(", ") {
        let (name, count) = part.split_once(" ×")?;
        let (total, failed) = match count.split_once(" (") {
            Some((t, f)) => (
                t.parse::<usize>().ok()?,
                f.trim_end_matches(" failed)").parse::<usize>().ok()?,
            ),
            None => (count.parse::<usize>().ok()?, 0),
        };
        out.push((name.to_owned(), (total.saturating_sub(failed), failed)));
    }
    Some(out)
}

/// The text after the summary message prefix, if it has one.
fn strip_summary_prefix(text: &str) -> &str {
    text.strip_prefix(crate::SUMMARY_PREFIX)
        .unwrap_or(text)
        .trim()
}

/// The name and target of the call a tool result at `index` answers: the nearest
/// earlier AI message that made it (results follow their call closely, so the look-back
/// is bounded).
fn caller(messages: &[&Message], index: usize, call_id: &str) -> Option<(String, String)> {
    messages[..index].iter().rev().take(64).find_map(|m| {
        m.tool_calls()
            .iter()
            .find(|c| c.id == call_id)
            .map(|c| (c.name.clone(), target_of(&c.args)))
    })
}

/// The most telling argument of a tool call (a path, a query, a command), if any.
fn target_of(args: &serde_json::Value) -> String {
    for key in [
        "path",
        "file_path",
        "filepath",
        "query",
        "command",
        "url",
        "name",
    ] {
        if let Some(v) = args.get(key).and_then(|v| v.as_str()) {
            return first_words(v, 8);
        }
    }
    String::new()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod shape_pins {
    use super::*;

    #[test]
    fn value_shapes_are_pinned() {
        // The seed is the offset basis xor the kind.
        assert_eq!(
            value_shape(Entity::Identifier, "eu-west-1"),
            0x45de_6bd0_691e_14a5
        );
        assert_eq!(
            value_shape(Entity::Quantity, "300 ms"),
            0xb838_5a52_e0d5_3bed
        );
        assert_eq!(value_shape(Entity::Url, ""), 0xcbf2_9ce4_8422_2325);
    }
}
