//! `keel tokens FILE`: how many tokens a transcript (or, with `--text`, a plain text)
//! costs under a given counter.
//!
//! A transcript is read and checked as by every other command
//! ([`keel_replay::Transcript::read`]): the same verdict and the same message for the
//! same file. `--text` reads a plain file of at most `--max-text-bytes`.
//! Plain output is one line per message (`id  role  tokens`) and a total; `--json`
//! prints `{"total": N, "messages": [{"id": ..., "tokens": ...}, ...]}`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use keel_core::message::Message;
use keel_core::tokens::TokenCounter;
use keel_replay::{Transcript, transcript_warnings};
use serde_json::json;

use super::{Caps, CommandResult, clean, clean_json, print, warn};

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
pub fn run(args: Args, caps: &Caps) -> CommandResult {
    let counter = keel_tokens::counter_by_name(&args.counter)?;
    let counts = if args.text {
        let cap = usize::try_from(caps.max_text_bytes).unwrap_or(usize::MAX);
        let text = keel_replay::input::read_text(&args.file, cap)?;
        Counts {
            messages: Vec::new(),
            total: counter.count_text(&text),
        }
    } else {
        let transcript = Transcript::read(&args.file, caps.limits())?;
        for w in transcript_warnings(&args.file, &transcript) {
            warn(&w);
        }
        count(&*counter, &transcript.into_all_messages())
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
            clean_json(serde_json::Value::Array(messages).to_string())
        );
    } else {
        for (id, role, tokens) in &counts.messages {
            let _ = writeln!(out, "{}\t{role}\t{tokens}", clean(id));
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
