//! `keel tokens FILE`: how many tokens a transcript (or, with `--text`, a plain text)
//! costs under a given counter. `keel tokens --model NAME` prints what Keel believes of
//! a model: its context window, output limit, the input a request may carry (the
//! window less `--max-tokens`, or less the output limit), and where the figures come
//! from; with a FILE too, both.
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
    #[arg(required_unless_present = "model")]
    pub file: Option<PathBuf>,
    /// Print what Keel believes of this model (as the provider or a gateway names it:
    /// `gpt-4o`, `anthropic/claude-3.5-sonnet`, `llama3.1:8b`): context window, output
    /// limit, usable input and the source of the figures.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// With `--model`: the window the server really has (a local server started with a
    /// smaller context), as `keel run` takes it. Ignored without `--model`.
    #[arg(long, value_name = "TOKENS", env = "KEEL_CONTEXT_WINDOW",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub context_window: Option<u64>,
    /// With `--model`: the request's `max_tokens`, reserved instead of the model's
    /// output limit.
    #[arg(long, value_name = "TOKENS", requires = "model",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// o200k_base | cl100k_base | approximate | approximate-anthropic (LangChain's
    /// estimate; 3.3 characters per token) | approximate-script |
    /// approximate-anthropic-script (script-aware estimate for CJK and other non-Latin
    /// text).
    #[arg(long, default_value = "o200k_base")]
    pub counter: String,
    /// Print JSON: `{"total": N, "messages": [{"id", "tokens"}, ...]}`, and with
    /// `--model` a `"model"` object.
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

/// What Keel believes of a model, as `keel tokens --model` prints it.
#[derive(Debug, PartialEq, Eq, serde::Serialize)]
pub struct ModelFacts {
    /// The name asked about.
    pub model: String,
    /// The table's family that matched, when one did.
    pub family: Option<&'static str>,
    /// Who makes it, when known.
    pub vendor: Option<&'static str>,
    /// The context window in tokens, when known.
    pub context_window: Option<u64>,
    /// The output limit in tokens, when known.
    pub max_output_tokens: Option<u64>,
    /// The request's `max_tokens`, when given.
    pub max_tokens: Option<u32>,
    /// What a request may carry: the window less `max_tokens` or the output limit.
    pub usable_input_tokens: Option<u64>,
    /// Where the window comes from: the provider's page, or the override.
    pub source: String,
}

/// What Keel believes of `model`, built as the OpenAI adapter builds its profile.
pub fn model_facts(
    model: &str,
    context_window: Option<u64>,
    max_tokens: Option<u32>,
) -> ModelFacts {
    let mut config = keel_openai::OpenAiConfig::new(model);
    config.context_window = context_window;
    let known = keel_openai::known_model(model);
    let profile = keel_core::model::ModelProfile {
        max_input_tokens: config.resolved_context_window(),
        max_output_tokens: config.resolved_max_output_tokens(),
        ..keel_core::model::ModelProfile::new(model, "")
    };
    let source = match (context_window, known) {
        (Some(_), _) => "--context-window / KEEL_CONTEXT_WINDOW".to_owned(),
        (None, Some(k)) => k.source.to_owned(),
        (None, None) => "none: the model is not in Keel's table".to_owned(),
    };
    ModelFacts {
        model: model.to_owned(),
        family: known.map(|k| k.family),
        vendor: known.map(|k| k.vendor),
        context_window: profile.max_input_tokens,
        max_output_tokens: profile.max_output_tokens,
        max_tokens,
        usable_input_tokens: profile.usable_input_tokens(max_tokens),
        source,
    }
}

/// The plain-text lines of `facts`.
fn describe_model(facts: &ModelFacts, out: &mut String) {
    let n = |v: Option<u64>| v.map_or_else(|| "unknown".to_owned(), |n| n.to_string());
    let _ = writeln!(out, "model\t{}", clean(&facts.model));
    if let (Some(family), Some(vendor)) = (facts.family, facts.vendor) {
        let _ = writeln!(out, "family\t{family} ({vendor})");
    }
    let _ = writeln!(out, "window\t{}", n(facts.context_window));
    let _ = writeln!(out, "output limit\t{}", n(facts.max_output_tokens));
    let reserve = match (facts.max_tokens, facts.max_output_tokens) {
        (Some(m), _) => format!("the window less max_tokens {m}"),
        (None, Some(_)) => "the window less the output limit".to_owned(),
        (None, None) => "the whole window: no output limit known".to_owned(),
    };
    match facts.usable_input_tokens {
        Some(u) => {
            let _ = writeln!(out, "usable input\t{u}\t({reserve})");
        }
        None => {
            let _ = writeln!(
                out,
                "usable input\tunknown\t(set the window with --context-window or KEEL_CONTEXT_WINDOW; fraction triggers need it)"
            );
        }
    }
    let _ = writeln!(out, "source\t{}", facts.source);
}

/// Runs the command.
pub fn run(args: Args, caps: &Caps) -> CommandResult {
    let facts = args
        .model
        .as_deref()
        .map(|m| model_facts(m, args.context_window, args.max_tokens));
    let Some(file) = args.file.as_deref() else {
        let facts = facts.ok_or("keel tokens needs a FILE or --model NAME")?;
        let out = if args.json {
            format!("{}\n", clean_json(serde_json::to_string(&facts)?))
        } else {
            let mut out = String::new();
            describe_model(&facts, &mut out);
            out
        };
        print(&out)?;
        return Ok(ExitCode::SUCCESS);
    };
    let counter = keel_tokens::counter_by_name(&args.counter)?;
    let counts = if args.text {
        let cap = usize::try_from(caps.max_text_bytes).unwrap_or(usize::MAX);
        let text = keel_replay::input::read_text(file, cap)?;
        Counts {
            messages: Vec::new(),
            total: counter.count_text(&text),
        }
    } else {
        let transcript = Transcript::read(file, caps.limits())?;
        for w in transcript_warnings(file, &transcript) {
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
        let model = match &facts {
            Some(f) => format!(",\"model\":{}", clean_json(serde_json::to_string(f)?)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{{\"total\":{},\"messages\":{}{model}}}",
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
        if let Some(f) = &facts {
            describe_model(f, &mut out);
        }
    }
    print(&out)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_facts_from_the_table_an_override_and_an_unknown_name() {
        let f = model_facts("gpt-4o", None, None);
        assert_eq!(f.context_window, Some(128_000));
        assert_eq!(f.max_output_tokens, Some(16_384));
        assert_eq!(f.usable_input_tokens, Some(111_616));
        assert_eq!(f.source, "https://platform.openai.com/docs/models/gpt-4o");
        assert_eq!(
            model_facts("gpt-4o", None, Some(1_000)).usable_input_tokens,
            Some(127_000)
        );
        let local = model_facts("qwen2.5:0.5b", Some(2_048), None);
        assert_eq!(local.context_window, Some(2_048));
        assert_eq!(
            local.max_output_tokens, None,
            "the table's limit does not fit a server's own window"
        );
        assert_eq!(local.usable_input_tokens, Some(2_048));
        let unknown = model_facts("smollm2", None, None);
        assert_eq!(
            (unknown.context_window, unknown.usable_input_tokens),
            (None, None)
        );
        let mut out = String::new();
        describe_model(&unknown, &mut out);
        assert!(out.contains("usable input\tunknown"), "{out}");
    }

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
