//! A deterministic extractive summarizer: no model, no network, same input same output.
//!
//! It is the offline default of `keel compact` and the last resort of the middleware
//! when the summary model fails and the uncompressed request would not fit. It never
//! invents anything: every bullet is text taken from the input, in this priority order:
//!
//! 1. the previous summary's facts (capped at half the budget when there is new material,
//!    so a long thread keeps learning);
//! 2. the user's goal (the first user message) and later user statements; when an
//!    earlier summary is folded in, the span continues a conversation whose goal that
//!    summary already holds, so its first user message is a statement like the others;
//! 3. facts and decisions stated by the assistant (the first sentence of each answer,
//!    plus sentences with decision words: "decided", "will", "chose", ...);
//! 4. tool outcomes: tool name, target, status and the first line of the result.
//!
//! The result respects a word budget and is never empty for non-empty input.
//!
//! ```
//! use keel_core::message::Message;
//! use keel_summarization::extractive::{summarize, ExtractiveOptions};
//!
//! let msgs = [
//!     Message::human("Please migrate the billing service to Postgres 17."),
//!     Message::ai("I decided to use logical replication. The cutover is on Friday."),
//! ];
//! let s = summarize(Some("- The user is Ada from ACME."), &msgs, &ExtractiveOptions::default());
//! assert!(s.starts_with("- The user is Ada from ACME."));
//! // A continuation: the earlier summary holds the goal, this is a later user turn.
//! assert!(s.contains("User: Please migrate the billing service to Postgres 17."));
//! let first = summarize(None, &msgs, &ExtractiveOptions::default());
//! assert!(first.contains("Goal: Please migrate the billing service to Postgres 17."));
//! assert!(s.contains("I decided to use logical replication."));
//! ```

use keel_core::message::{Message, MessageBody, ToolStatus};

use crate::SUMMARY_NAME;

/// Options of the extractive summarizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractiveOptions {
    /// Maximum words in the result (at least 1).
    pub word_budget: usize,
    /// Maximum words of any one bullet.
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

const DECISION_WORDS: &[&str] = &[
    "decided",
    "decide",
    "decision",
    "will ",
    "chose",
    "choose",
    "agreed",
    "plan",
    "must",
    "should",
    "conclude",
    "confirmed",
    "prefer",
    "next step",
];

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

    let mut previous_items: Vec<String> = Vec::new();
    let mut previous_text = previous.map(str::to_owned);
    // A summary message inside the span (from a destructive peer, or a legacy thread)
    // is an earlier summary, not a user statement.
    for m in messages {
        if m.name() == Some(SUMMARY_NAME) && previous_text.is_none() {
            previous_text = Some(strip_summary_prefix(&m.text()).to_owned());
        }
    }
    if let Some(p) = previous_text.as_deref() {
        for line in p.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let line = line.trim_start_matches(['-', '*', '•']).trim();
            if !line.is_empty() {
                previous_items.push(line.to_owned());
            }
        }
    }

    let mut out: Vec<String> = Vec::new();
    let mut used = 0usize;
    let has_new = messages.iter().any(|m| m.name() != Some(SUMMARY_NAME));
    let previous_cap = if has_new { budget.div_ceil(2) } else { budget };
    for item in &previous_items {
        if used >= previous_cap {
            break;
        }
        push_item(
            &mut out,
            &mut used,
            item,
            previous_cap.min(budget),
            per_item,
        );
    }
    // New material, stage by stage in priority order; each stage stops as soon as the
    // budget is spent, so a fold over thousands of messages only reads what it keeps.
    let emit = |item: String, out: &mut Vec<String>, used: &mut usize| {
        push_item(out, used, &item, budget, per_item);
        *used >= budget
    };
    let continuation = previous_text.is_some();
    'stages: for stage in 0..4 {
        if stage == 0 && continuation {
            continue;
        }
        let mut seen_goal = continuation;
        for (index, m) in messages.iter().enumerate() {
            if used >= budget {
                break 'stages;
            }
            if m.name() == Some(SUMMARY_NAME) {
                continue;
            }
            let full = match (stage, m.body()) {
                (0 | 1, MessageBody::Human(_) | MessageBody::System(_)) => {
                    let text = m.text();
                    let text = text.trim();
                    if text.is_empty() {
                        continue;
                    }
                    let is_goal = !seen_goal && m.is_human();
                    seen_goal |= m.is_human();
                    match (stage, is_goal) {
                        (0, true) => {
                            if emit(
                                format!("Goal: {}", first_words(text, 60)),
                                &mut out,
                                &mut used,
                            ) {
                                break 'stages;
                            }
                            // Stage 0 only looks for the goal; the rest of a long span
                            // need not be read for it.
                            continue 'stages;
                        }
                        (1, false) => {
                            let label = if m.is_human() { "User" } else { "Note" };
                            let mut full = false;
                            for s in sentences(text).into_iter().take(2) {
                                full = emit(format!("{label}: {s}"), &mut out, &mut used);
                                if full {
                                    break;
                                }
                            }
                            full
                        }
                        _ => false,
                    }
                }
                (2, MessageBody::Ai(_)) => {
                    let text = m.text();
                    let mut full = false;
                    for (i, s) in sentences(&text).into_iter().enumerate() {
                        if i == 0 || is_decision(&s) {
                            full = emit(s, &mut out, &mut used);
                            if full {
                                break;
                            }
                        }
                    }
                    full
                }
                (3, MessageBody::Tool(t)) => {
                    let (name, target) =
                        caller(messages, index, &t.tool_call_id).unwrap_or_else(|| {
                            (
                                t.name.clone().unwrap_or_else(|| "tool".into()),
                                String::new(),
                            )
                        });
                    let status = if t.status == ToolStatus::Error {
                        "failed"
                    } else {
                        "ok"
                    };
                    let text = m.text();
                    let first = text
                        .lines()
                        .map(str::trim)
                        .find(|l| !l.is_empty())
                        .unwrap_or("");
                    let target = if target.is_empty() {
                        String::new()
                    } else {
                        format!(" {target}")
                    };
                    emit(
                        format!("Tool {name}{target} {status}: {}", first_words(first, 20)),
                        &mut out,
                        &mut used,
                    )
                }
                _ => false,
            };
            if full {
                break 'stages;
            }
        }
    }
    if out.is_empty() && !messages.is_empty() {
        let n = messages.len();
        let fallback = format!(
            "{n} earlier message{} with no text content.",
            if n == 1 { "" } else { "s" }
        );
        push_item(&mut out, &mut used, &fallback, budget, per_item);
    }
    out.join("\n")
}

fn push_item(out: &mut Vec<String>, used: &mut usize, item: &str, budget: usize, per_item: usize) {
    let words: Vec<&str> = item.split_whitespace().collect();
    if words.is_empty() {
        return;
    }
    let room = budget.saturating_sub(*used).min(per_item);
    if room == 0 {
        return;
    }
    let line = if words.len() > room {
        format!("- {} …", words[..room].join(" "))
    } else {
        format!("- {}", words.join(" "))
    };
    // Folding the same fact twice (a repeated question, a re-read file) wastes budget.
    if out.contains(&line) {
        return;
    }
    *used += words.len().min(room);
    out.push(line);
}

/// The text after the summary message prefix, if it has one.
fn strip_summary_prefix(text: &str) -> &str {
    text.strip_prefix(crate::SUMMARY_PREFIX)
        .unwrap_or(text)
        .trim()
}

fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            push_sentence(&mut out, &mut cur);
            continue;
        }
        cur.push(c);
        if matches!(c, '.' | '!' | '?' | '。' | '！' | '？')
            && chars.peek().is_none_or(|n| n.is_whitespace())
        {
            push_sentence(&mut out, &mut cur);
        }
    }
    push_sentence(&mut out, &mut cur);
    out
}

fn push_sentence(out: &mut Vec<String>, cur: &mut String) {
    let s = cur.trim();
    if !s.is_empty() {
        out.push(s.to_owned());
    }
    cur.clear();
}

fn is_decision(sentence: &str) -> bool {
    let lower = sentence.to_lowercase();
    DECISION_WORDS.iter().any(|w| lower.contains(w))
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

fn first_words(text: &str, n: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() > n {
        format!("{} …", words[..n].join(" "))
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::ToolCall;
    use serde_json::json;

    fn sample() -> Vec<Message> {
        vec![
            Message::human("Find why the nightly build fails. My name is Ada."),
            Message::ai("").with_tool_calls(vec![ToolCall::new(
                "c1",
                "read_file",
                json!({"path": "/repo/ci.log"}),
            )]),
            Message::tool("c1", "\nerror: linker `cc` not found\nmore"),
            Message::ai("The linker is missing on the runner. We will install build-essential."),
            Message::human("Also keep the cache."),
        ]
    }

    #[test]
    fn priority_order_and_content() {
        let s = summarize(
            Some("- Repo is acme/api"),
            &sample(),
            &ExtractiveOptions::default(),
        );
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "- Repo is acme/api");
        assert_eq!(lines[1], "- User: Find why the nightly build fails.");
        assert_eq!(lines[2], "- User: My name is Ada.");
        let first = summarize(None, &sample(), &ExtractiveOptions::default());
        assert!(
            first.starts_with("- Goal: Find why the nightly build fails. My name is Ada."),
            "{first}"
        );
        assert!(s.contains("- User: Also keep the cache."));
        assert!(s.contains("We will install build-essential."));
        assert!(s.contains("- Tool read_file /repo/ci.log ok: error: linker `cc` not found"));
    }

    #[test]
    fn deterministic_and_budgeted() {
        let opts = ExtractiveOptions {
            word_budget: 12,
            max_words_per_item: 40,
        };
        let a = summarize(None, &sample(), &opts);
        assert_eq!(a, summarize(None, &sample(), &opts));
        let words = a
            .split_whitespace()
            .filter(|w| *w != "-" && *w != "…")
            .count();
        assert!(words <= 12, "{a}");
        assert!(!a.is_empty());
    }

    #[test]
    fn never_empty() {
        let msgs = vec![Message::ai("").with_tool_calls(vec![ToolCall::new("c", "x", json!({}))])];
        let s = summarize(
            None,
            &msgs,
            &ExtractiveOptions {
                word_budget: 1,
                max_words_per_item: 1,
            },
        );
        assert!(!s.trim().is_empty());
        assert_eq!(summarize(None, &[], &ExtractiveOptions::default()), "");
    }

    #[test]
    fn previous_summary_leaves_room_for_new_facts() {
        let prev: String = (0..100)
            .map(|i| format!("- old fact number {i}\n"))
            .collect();
        let s = summarize(
            Some(&prev),
            &sample(),
            &ExtractiveOptions {
                word_budget: 40,
                max_words_per_item: 40,
            },
        );
        assert!(s.starts_with("- old fact number 0"));
        assert!(s.contains("User: Find why the nightly build fails."), "{s}");
    }
}
