//! `keel tokens FILE`: how many tokens a transcript (or, with `--text`, a plain text)
//! costs under a given counter.
//!
//! A transcript is read with [`keel_core::transcript::read_jsonl`], so a missing file and
//! a bad line (with its number) are reported the same way as by every other command.
//! Plain output is one line per message (`id  role  tokens`) and a total; `--json`
//! prints `{"total": N, "messages": [{"id": ..., "tokens": ...}, ...]}`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use keel_core::message::Message;
use keel_core::tokens::TokenCounter;
use keel_core::transcript::read_jsonl;
use serde_json::json;

use super::{CommandResult, print};

/// Arguments of `keel tokens`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A JSONL transcript (one message per line), or any text file with `--text`.
    pub file: PathBuf,
    /// o200k_base | cl100k_base | approximate | approximate-anthropic (LangChain's
    /// estimate; 3.3 characters per token) | approximate-script |
    /// approximate-anthropic-script (script-aware estimate for CJK and other non-Latin
    /// text).
    #[arg(long, default_value = "o200k_base")]
    pub counter: String,
    /// Print JSON: `{"total": N, "messages": [{"id", "tokens"}, ...]}`.
    #[arg(long)]
    pub json: bool,
    /// Count FILE as plain text instead of a transcript.
    #[arg(long)]
    pub text: bool,
}

/// Per-message counts of a transcript and their total.
#[derive(Debug, PartialEq, Eq)]
pub struct Counts {
    /// `(id, role, tokens)` per message, in file order.
    pub messages: Vec<(String, &'static str, u64)>,
    /// Sum of the messages' counts.
    pub total: u64,
}

/// Counts `messages` with `counter`.
pub fn count(counter: &dyn TokenCounter, messages: &[Message]) -> Counts {
    let each = counter.count_each(messages);
    Counts {
        total: each.iter().sum(),
        messages: messages
            .iter()
            .zip(each)
            .map(|(m, n)| (m.id().to_owned(), m.role().as_str(), n))
            .collect(),
    }
}

/// Runs the command.
pub fn run(args: Args) -> CommandResult {
    let counter = keel_tokens::counter_by_name(&args.counter)?;
    let counts = if args.text {
        let text = std::fs::read_to_string(&args.file)
            .map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
        Counts {
            messages: Vec::new(),
            total: counter.count_text(&text),
        }
    } else {
        count(&*counter, &read_jsonl(&args.file)?)
    };
    let mut out = String::new();
    if args.json {
        let messages: Vec<_> = counts
            .messages
            .iter()
            .map(|(id, _, tokens)| json!({"id": id, "tokens": tokens}))
            .collect();
        // Written by hand so `total` comes first, as documented (serde_json sorts keys).
        let _ = writeln!(
            out,
            "{{\"total\":{},\"messages\":{}}}",
            counts.total,
            serde_json::Value::Array(messages)
        );
    } else {
        for (id, role, tokens) in &counts.messages {
            let _ = writeln!(out, "{id}\t{role}\t{tokens}");
        }
        let what = if args.text {
            "text".to_owned()
        } else {
            format!("{} messages", counts.messages.len())
        };
        let _ = writeln!(out, "total\t{}\t({what}, {})", counts.total, counter.name());
    }
    print(&out)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sum_to_total() {
        let counter = keel_tokens::counter_by_name("approximate").unwrap();
        let msgs = vec![
            Message::human("hello world").with_id("h1"),
            Message::ai("hi there!").with_id("a1"),
        ];
        let c = count(&*counter, &msgs);
        assert_eq!(c.total, 15);
        assert_eq!(
            c.messages,
            vec![
                ("h1".to_owned(), "user", 7),
                ("a1".to_owned(), "assistant", 8)
            ]
        );
    }
}
