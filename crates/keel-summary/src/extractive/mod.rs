//! A deterministic extractive summarizer: no model, no network, same input same output.
//!
//! It is the offline default of `keel compact` and `keel replay`, what session memory
//! folds with when no model is configured, and the last resort of the middleware when
//! the summary model fails and the uncompressed request would not fit. It never invents
//! anything: every line is a sentence (or a clause) taken from the input.
//!
//! Sentences are chosen by what they hold, not where they stand (module `scoring`):
//! rules ("never", "always", "must"), decisions and agreements, requirements and
//! preferences, and values (identifiers, versions, hashes, numbers with units, dates and
//! times, paths, URLs, IP addresses, names, error codes) score; acknowledgements,
//! greetings and announcements of work ("Let me check the logs.") are dropped. The
//! user's words weigh more than the assistant's; a tool result counts as an outcome when
//! the tool changed something or failed. Lines are picked by score per word until the
//! word budget is spent, so twenty short facts beat one long paragraph.
//!
//! Folding keeps the previous summary's lines in the same competition (with a small
//! bonus for having been kept before): a fact stays until a newer statement about the
//! same subject replaces it ("the cache TTL is 300 s", later "set the cache TTL to
//! 900 s"), and of several lines with the same shape (a status line repeated with other
//! numbers) only the newest stays.
//!
//! The output is grouped the way the summary prompt asks (module `grouping`): goal and
//! requirements, facts and decisions, what was done, open questions. Each line names
//! the message it came from and who said it; tool output is always attributed to its
//! tool (`read_file returned: ...`), never written in the user's voice.
//!
//! What it cannot do: it does not paraphrase or merge two sentences into one, does not
//! resolve "it" or "that" to what they point at, cannot tell a fact from a guess stated
//! with the same words, and reads English cue words only (values such as paths, numbers
//! and identifiers are recognised in any language).
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

use std::collections::{BTreeMap, BTreeSet};

use keel_core::message::{Message, MessageBody, ToolStatus};

use crate::SUMMARY_NAME;
use grouping::{Line, Section};
use scoring::{Entity, Information};

pub use pinned::{PinnedValues, pinned_values};

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
const TOOL_OUTCOME: u32 = 3;
/// A line that was in the previous summary.
const KEPT_BEFORE: u32 = 1;
/// Tool results examined for an error line, at most.
const TOOL_LINES: usize = 20;
/// Words of a tool outcome line at most: an outcome is a status, not a log.
const TOOL_WORDS: usize = 24;
/// Tools named in the "Tools used" line, at most.
const TOOLS_LISTED: usize = 6;

/// Parts of a tool name that mean it only reads.
const READ_ONLY: &[&str] = &[
    "read", "get", "list", "search", "grep", "cat", "view", "logs", "log", "describe", "query",
    "peek", "watch", "count", "ping", "fetch", "show", "find", "ls", "diff", "status", "check",
    "inspect", "lookup", "head", "tail",
];

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
    cue: bool,
}

impl Candidate {
    fn new(line: Line, info: &Information, base: u32, order: usize) -> Candidate {
        let words = grouping::count_words(&line.text) + usize::from(line.reference.is_some());
        let body = speech(&line.text);
        Candidate {
            subject: None,
            shape: scoring::shape(body),
            values: info
                .values
                .iter()
                .filter(|(k, _)| !matches!(k, Entity::Number | Entity::Acronym))
                .map(|(_, v)| v.clone())
                .collect(),
            cue: info.cues != 0,
            score: base + info.score(),
            words,
            order,
            goal: false,
            line,
        }
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

    let mut candidates: Vec<Candidate> = Vec::new();
    let mut tools: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut has_goal = false;
    if let Some(p) = previous_text.as_deref() {
        for (order, mut line) in grouping::parse(p).into_iter().enumerate() {
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
            let body = speech(&line.text);
            let info = scoring::information(body);
            let mut c = match tool_of_line(&line.text) {
                Some((name, failed)) => {
                    let base = tool_base(name, failed);
                    let mut c = Candidate::new(line, &info, base + KEPT_BEFORE, order);
                    if base == 0 {
                        c.score = read_only_score(c.score);
                    }
                    c
                }
                None => {
                    let base = if line.text.starts_with("assistant") {
                        ASSISTANT
                    } else {
                        USER
                    };
                    let subject = scoring::subject(speech(&line.text));
                    let mut c = Candidate::new(line, &info, base + KEPT_BEFORE, order);
                    c.subject = subject;
                    c
                }
            };
            c.goal = goal;
            candidates.push(c);
        }
    }
    let offset = candidates.len();
    // A continued span's first user message is a statement, unless the summary so far
    // has no goal (the first message was kept verbatim when that summary was made).
    collect(
        messages,
        has_goal,
        per_item,
        offset,
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

/// Candidates from the span's messages.
fn collect(
    messages: &[&Message],
    has_goal: bool,
    per_item: usize,
    offset: usize,
    out: &mut Vec<Candidate>,
    tools: &mut BTreeMap<String, (usize, usize)>,
) {
    // The last human message, and whether the assistant answered it in words.
    let last_human = messages
        .iter()
        .rposition(|m| m.is_human() && m.name() != Some(SUMMARY_NAME));
    let answered = last_human.is_some_and(|h| {
        messages[h + 1..]
            .iter()
            .any(|m| m.is_ai() && !m.text().trim().is_empty())
    });
    let last_ai_text = messages
        .iter()
        .rposition(|m| m.is_ai() && !m.text().trim().is_empty());
    let mut seen_goal = has_goal;
    for (index, m) in messages.iter().enumerate() {
        if m.name() == Some(SUMMARY_NAME) {
            continue;
        }
        let reference = grouping::reference(m.id());
        let order = offset + index * 64;
        match m.body() {
            MessageBody::Human(_) | MessageBody::System(_) => {
                let text = m.text();
                let human = m.is_human();
                if human && !seen_goal {
                    seen_goal = true;
                    if let Some(goal) = goal_text(&text) {
                        let line = Line {
                            section: Section::Goal,
                            reference: reference.clone(),
                            text: format!("Goal: {goal}"),
                        };
                        let mut c = Candidate::new(line, &Information::default(), USER, order);
                        c.goal = true;
                        out.push(c);
                        continue;
                    }
                }
                let open = human && Some(index) == last_human && !answered;
                let speaker = if human { "user" } else { "note" };
                for (k, sentence) in scoring::sentences(&text).into_iter().enumerate() {
                    statement(
                        sentence,
                        speaker,
                        human,
                        open,
                        &reference,
                        per_item,
                        order + k.min(63),
                        out,
                    );
                }
            }
            MessageBody::Ai(_) => {
                let text = m.text();
                let open = Some(index) == last_ai_text
                    && !messages[index + 1..].iter().any(|m| m.is_human());
                for (k, sentence) in scoring::sentences(&text).into_iter().enumerate() {
                    statement(
                        sentence,
                        "assistant",
                        false,
                        open,
                        &reference,
                        per_item,
                        order + k.min(63),
                        out,
                    );
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
                if let Some(c) = outcome(m, &name, &target, failed, &reference, per_item, order) {
                    out.push(c);
                }
            }
        }
    }
}

/// The goal: the first user message without its greetings, cut to [`GOAL_WORDS`].
fn goal_text(text: &str) -> Option<String> {
    let kept: Vec<&str> = scoring::sentences(text)
        .into_iter()
        .filter(|s| {
            let info = scoring::information(s);
            !scoring::is_filler(s, &info, false) || s.ends_with('?')
        })
        .collect();
    // A first message that is all filler by these rules is still the user's opening.
    let goal = if kept.is_empty() {
        first_words(text, GOAL_WORDS)
    } else {
        first_words(&kept.join(" "), GOAL_WORDS)
    };
    (!goal.is_empty()).then_some(goal)
}

/// One sentence of the user (or the assistant, or a system note) as a candidate.
#[allow(clippy::too_many_arguments)] // one call site per speaker; a struct would only rename them
fn statement(
    sentence: &str,
    speaker: &str,
    human: bool,
    open: bool,
    reference: &Option<String>,
    per_item: usize,
    order: usize,
    out: &mut Vec<Candidate>,
) {
    let sentence = scoring::compress(sentence);
    let info = scoring::information(&sentence);
    let question = sentence.ends_with('?');
    if info.is_empty() && !(human || open) {
        return; // an assistant sentence with nothing in it: no line, whatever it says
    }
    if question && !open && info.score() < 4 {
        return;
    }
    if scoring::is_filler(&sentence, &info, !human) && !(question && open) {
        return;
    }
    let text = first_words(&sentence, per_item);
    let (section, text, base) = if question {
        if open {
            let base = if human { USER + 2 } else { 1 };
            (Section::Open, format!("{speaker} asked: {text}"), base)
        } else if info.score() >= 4 {
            // A past question names what was looked at; half the worth of a statement.
            let info = Information {
                cues: 0,
                values: info.values.clone(),
            };
            let c = Candidate::new(
                Line {
                    section: Section::Facts,
                    reference: reference.clone(),
                    text: format!("{speaker} asked: {text}"),
                },
                &info,
                0,
                order,
            );
            out.push(Candidate {
                score: c.score / 2,
                ..c
            });
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
            reference: reference.clone(),
            text,
        },
        &info,
        base,
        order,
    );
    if info.values.is_empty() && grouping::count_words(&sentence) < 6 {
        // "Needs checking.", "That's the decision.": a cue with nothing it applies to.
        c.score = base + info.score() / 2;
    }
    if info.is_empty() && section != Section::Open {
        // Nothing recognisable: kept only when the budget has room to spare.
        c.score = if human { 1 } else { 0 };
    }
    if c.score > 0 {
        c.subject = scoring::subject(&sentence);
        out.push(c);
    }
}

/// A tool result as an outcome line: `name target returned: line` (or `failed:`).
fn outcome(
    m: &Message,
    name: &str,
    target: &str,
    failed: bool,
    reference: &Option<String>,
    per_item: usize,
    order: usize,
) -> Option<Candidate> {
    let base = tool_base(name, failed);
    if base == 0 {
        // A read's output is data, not an outcome: the "Tools used" line counts it.
        return None;
    }
    let text = m.text();
    let lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.clone().next()?;
    let line = if failed {
        lines
            .take(TOOL_LINES)
            .find(|l| {
                let lower = l.to_ascii_lowercase();
                ["error", "fail", "exception", "denied", "refused"]
                    .iter()
                    .any(|w| lower.contains(w))
            })
            .unwrap_or(first)
    } else {
        first
    };
    // A bare opening (`{` of pretty-printed JSON) says nothing: read on a little. Only
    // what the line can show is read (a tool's one-line output can be megabytes).
    let line = if line
        .split_whitespace()
        .filter(|w| grouping::is_word(w))
        .take(3)
        .count()
        < 3
    {
        first_words(&text, per_item.min(TOOL_WORDS))
    } else {
        first_words(line, per_item.min(TOOL_WORDS))
    };
    let info = scoring::information(&line);
    let base = tool_base(name, failed);
    let target = if target.is_empty() {
        String::new()
    } else {
        format!(" {target}")
    };
    let verb = if failed { "failed" } else { "returned" };
    let c = Candidate::new(
        Line {
            section: Section::Done,
            reference: reference.clone(),
            text: format!("{name}{target} {verb}: {line}"),
        },
        &info,
        base,
        order,
    );
    Some(c)
}

/// What a tool result is worth: an outcome when the tool changed something or failed.
fn tool_base(name: &str, failed: bool) -> u32 {
    let reads = name
        .to_ascii_lowercase()
        .split(['_', '-', '.'])
        .any(|part| READ_ONLY.contains(&part));
    if failed || !reads { TOOL_OUTCOME } else { 0 }
}

/// A read's output is data, not an outcome: worth a line only with room to spare.
fn read_only_score(score: u32) -> u32 {
    score.min(2) / 2
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
    // A newer statement about the same subject replaces an older one; of lines with the
    // same shape, the newest stays.
    // Subjects are grouped by their last two words; within a group, "cache ttl" and
    // "ledger-api cache ttl" are the same subject (one ends the other), while
    // "ledger-api cache ttl" and "billing-gw cache ttl" are not.
    let mut subjects: BTreeMap<&str, Vec<(&str, usize)>> = BTreeMap::new();
    let mut newest_shape: BTreeMap<u64, usize> = BTreeMap::new();
    for c in &candidates {
        if c.goal {
            continue;
        }
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
        .map(|c| {
            !c.goal && (replaced(c) || newest_shape.get(&c.shape).is_some_and(|&o| o > c.order))
        })
        .collect();
    let mut keep = stale.iter().map(|s| !s);
    candidates.retain(|_| keep.next().unwrap_or(false));

    // Goal first (the earliest), then by score per word, ties to the older line.
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
                let pa = u64::from(a.score) * 1000 / (a.words as u64 + 3);
                let pb = u64::from(b.score) * 1000 / (b.words as u64 + 3);
                pb.cmp(&pa)
            })
            .then_with(|| a.order.cmp(&b.order))
    });
    let headers = budget >= HEADERS_FROM_BUDGET;
    let mut used = 0usize;
    let mut sections: BTreeSet<Section> = BTreeSet::new();
    let mut covered: BTreeSet<String> = BTreeSet::new();
    let mut texts: BTreeSet<String> = BTreeSet::new();
    let mut chosen: Vec<(usize, Line)> = Vec::new();
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
        if c.words > room {
            if c.goal && room >= 4 {
                // The goal is cut rather than lost.
                let reference = usize::from(c.line.reference.is_some());
                let text = first_words(&c.line.text, room - reference);
                c.line.text = text;
                c.words = grouping::count_words(&grouping::bullet(&c.line));
            } else {
                continue;
            }
        }
        if c.words > per_item + 4 && !c.goal {
            continue;
        }
        if !texts.insert(speech(&c.line.text).to_owned()) {
            continue;
        }
        used += c.words + header;
        sections.insert(c.line.section);
        covered.extend(c.values.iter().cloned());
        chosen.push((c.order, c.line));
    }
    chosen.sort_by_key(|(order, _)| *order);
    chosen.into_iter().map(|(_, l)| l).collect()
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
