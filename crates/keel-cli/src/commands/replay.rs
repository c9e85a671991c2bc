//! `keel replay TRANSCRIPT.jsonl`: what would this middleware stack have sent on a
//! recorded conversation, what did it cost, and did the key facts survive?
//!
//! Every assistant message of the transcript is one model call. The history before it
//! goes through the configured stack (summarization from `--config`, session memory with
//! `--memory session`) exactly as in a live agent; the request that reaches the model is
//! recorded, and the transcript's message is the answer (the answering model is never
//! called). The engine is `keel-replay`; this module parses flags, shows progress and
//! prints the report.

use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use keel_replay::{CallReport, MemoryOptions, ReplayObserver, ReplayOptions, SentRequest};

use super::{CommandResult, print};

/// Which session memory to replay with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MemoryMode {
    /// Rolling per-session summary with pinned keys plus the last N messages (seed 000).
    Session,
}

/// Arguments of `keel replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The transcript: one JSON message per line (OpenAI chat shape plus `id`); a
    /// leading system message is the system prompt of every request.
    pub transcript: PathBuf,
    /// Compact with this summarization.yaml (DeerFlow's schema).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Keep a rolling session memory: `session`.
    #[arg(long, value_enum)]
    pub memory: Option<MemoryMode>,
    /// Session memory: recent messages sent verbatim (default 10; 0 turns memory off).
    #[arg(long, value_name = "N", requires = "memory")]
    pub n_messages: Option<usize>,
    /// Session memory: keys the summary keeps for the whole session, comma-separated.
    #[arg(long, value_name = "K1,K2", value_delimiter = ',', requires = "memory")]
    pub pinned_keys: Vec<String>,
    /// Database URL: sqlite://path.db?mode=rwc or postgres://user:pw@host/db (default
    /// with session memory: ./keel.db, created on first use).
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
    /// Summaries by this OpenAI-compatible model (OPENAI_BASE_URL, OPENAI_API_KEY)
    /// instead of the built-in extractive summarizer.
    #[arg(long, value_name = "NAME")]
    pub summary_model: Option<String>,
    /// The answering model's context window in tokens, for `fraction` triggers.
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u64>,
    /// Print one JSON object (`calls`, `totals`, `pinned`, `summary`) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write each request exactly as it would be sent to DIR/0001.json, DIR/0002.json, ...
    #[arg(long, value_name = "DIR")]
    pub dump_requests: Option<PathBuf>,
}

/// A progress bar on stderr; indicatif draws nothing when stderr is not a terminal.
struct Progress {
    bar: ProgressBar,
}

impl ReplayObserver for Progress {
    fn started(&mut self, calls: usize) {
        self.bar.set_length(calls as u64);
    }

    fn call_done(&mut self, call: &CallReport, _request: Option<&SentRequest>) {
        self.bar.set_message(format!(
            "{} tokens sent, {} in history",
            call.request_tokens, call.history_tokens
        ));
        self.bar.inc(1);
    }
}

/// Runs the command.
pub fn run(args: Args) -> CommandResult {
    let options = ReplayOptions {
        config: args.config,
        memory: args.memory.map(|MemoryMode::Session| MemoryOptions {
            n_messages: args.n_messages,
            pinned_keys: args.pinned_keys,
        }),
        db: args.db,
        summary_model: args.summary_model,
        context_window: args.context_window,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let prepared = keel_replay::prepare(&args.transcript, &options).await?;
        for warning in &prepared.warnings {
            eprintln!("keel: warning: {warning}");
        }
        if let Some(dir) = &args.dump_requests {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("--dump-requests: cannot create {}: {e}", dir.display()))?;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(ProgressStyle::with_template(
            "{bar:40} {pos}/{len} model calls  {msg}",
        )?);
        let mut progress = Progress { bar };
        let replay = prepared.run(&mut progress).await?;
        progress.bar.finish_and_clear();

        if let Some(dir) = &args.dump_requests {
            for request in replay.requests.iter().flatten() {
                let path = dir.join(format!("{:04}.json", request.index));
                let body = serde_json::to_string_pretty(&request.to_json())?;
                std::fs::write(&path, body + "\n").map_err(|e| {
                    format!("--dump-requests: cannot write {}: {e}", path.display())
                })?;
            }
        }
        let out = if args.json {
            serde_json::to_string_pretty(&replay.report)? + "\n"
        } else {
            replay.report.render()
        };
        print(&out)?;
        Ok(ExitCode::SUCCESS)
    })
}
