//! `keel replay TRANSCRIPT.jsonl`: what would this middleware stack have sent on a
//! recorded conversation, what did it cost, and did the key facts survive?
//!
//! Every assistant message of the transcript is one model call. The history before it
//! goes through the configured stack (summarization from `--config`, session memory with
//! `--memory session`) exactly as in a live agent; the request that reaches the model is
//! recorded, and the transcript's message is the answer (the answering model is never
//! called). The engine is `keel-replay`; this module parses flags, shows progress, writes
//! request dumps as the replay goes, and prints the report.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use keel_replay::{CallReport, MemoryOptions, ReplayObserver, ReplayOptions, SentRequest};

use super::{Caps, CommandResult, clean_json, clean_lines, print, warn};

/// Which session memory to replay with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MemoryMode {
    /// Rolling per-session summary with pinned keys plus the last N messages (the design
    /// asked for in Langflow feature request #15799).
    Session,
}

/// How progress is shown on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, nothing otherwise.
    Auto,
    /// A bar.
    Bar,
    /// One line per model call (for logs and CI).
    Lines,
    /// Nothing.
    None,
}

/// The middleware stack and database a replay runs through (shared by `keel replay`
/// and `keel eval`).
#[derive(Debug, clap::Args)]
pub struct StackArgs {
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
    /// Database URL: sqlite://path.db (created on first use; `?mode=ro` opens it
    /// read-only) or postgres://user:pw@host/db (default with session memory: ./keel.db).
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
    /// Replay into this session (and thread) id instead of a new one per run: replays
    /// given the same id share one session memory, in one database.
    #[arg(long, value_name = "ID", value_parser = session_id)]
    pub session: Option<String>,
    /// Summaries by this OpenAI-compatible model (OPENAI_BASE_URL, OPENAI_API_KEY), or
    /// by Claude as `anthropic:NAME` (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL), instead of
    /// the built-in extractive summarizer.
    #[arg(long, value_name = "NAME")]
    pub summary_model: Option<String>,
    /// The answering model's context window in tokens, for `fraction` triggers.
    #[arg(
        long,
        visible_alias = "max-input-tokens",
        value_name = "TOKENS",
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub context_window: Option<u64>,
    /// Recall of the exact evidence on (it is by default with session memory, in
    /// `keel eval`, and when the --config file has a `recall:` section).
    #[arg(long, conflicts_with = "no_recall")]
    pub recall: bool,
    /// Recall off, even where it is on by default.
    #[arg(long)]
    pub no_recall: bool,
}

impl StackArgs {
    /// The replay options these flags ask for.
    pub fn options(self, caps: &Caps) -> ReplayOptions {
        ReplayOptions {
            config: self.config,
            memory: self.memory.map(|MemoryMode::Session| MemoryOptions {
                n_messages: self.n_messages,
                pinned_keys: self.pinned_keys,
            }),
            db: self.db,
            summary_model: self.summary_model,
            context_window: self.context_window,
            session: self.session,
            limits: caps.limits(),
            max_config_bytes: Some(caps.max_config_bytes),
            discard_requests: true,
            recall: if self.no_recall {
                Some(false)
            } else if self.recall {
                Some(true)
            } else {
                None
            },
        }
    }
}

/// Arguments of `keel replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The transcript: one JSON message per line (OpenAI chat shape plus `id`); a
    /// leading system message is the system prompt of every request.
    pub transcript: PathBuf,
    #[command(flatten)]
    pub stack: StackArgs,
    /// Print one JSON object (`calls`, `totals`, `pinned`, `summary`) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write each request exactly as it would be sent to DIR/0001.json, DIR/0002.json, ...
    #[arg(long, value_name = "DIR")]
    pub dump_requests: Option<PathBuf>,
    /// With --dump-requests: replace the dumps a folder already holds.
    #[arg(long, requires = "dump_requests")]
    pub force: bool,
    /// Progress on stderr: a bar on a terminal (auto), a bar, one line per model call,
    /// or none.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
}

fn session_id(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > 200 || text.chars().any(char::is_control) {
        Err("a session id is 1 to 200 printable characters".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

/// Shows progress and writes request dumps as calls finish, so a long replay holds no
/// request it does not need.
struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    dump: Option<PathBuf>,
    error: Option<String>,
}

impl ReplayObserver for Progress {
    fn wants_requests(&self) -> bool {
        self.dump.is_some()
    }

    fn started(&mut self, calls: usize) {
        if let Some(bar) = &self.bar {
            bar.set_length(calls as u64);
        }
    }

    fn call_done(&mut self, call: &CallReport, request: Option<&SentRequest>) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!(
                "{} tokens sent, {} in history",
                call.request_tokens, call.history_tokens
            ));
            bar.inc(1);
        }
        if self.lines {
            eprintln!(
                "keel: call {} (line {}): {} tokens sent, {} in the transcript before it",
                call.index, call.line, call.request_tokens, call.history_tokens
            );
        }
        if let (Some(dir), Some(request), None) = (&self.dump, request, &self.error) {
            let path = dir.join(format!("{:04}.json", request.index));
            let body = serde_json::to_string_pretty(&request.to_json())
                .map(|b| b + "\n")
                .map_err(|e| e.to_string());
            if let Err(e) = body.and_then(|b| std::fs::write(&path, b).map_err(|e| e.to_string())) {
                self.error = Some(format!(
                    "--dump-requests: cannot write {}: {e}",
                    path.display()
                ));
            }
        }
    }
}

/// Creates the dump folder, refusing to mix with earlier dumps unless `force`.
pub fn prepare_dump_dir(dir: &Path, force: bool) -> Result<(), String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "--dump-requests: {} is a file, not a folder",
            dir.display()
        ));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("--dump-requests: cannot create {}: {e}", dir.display()))?;
    let existing = std::fs::read_dir(dir)
        .map_err(|e| format!("--dump-requests: cannot read {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.len() >= 9
                && name.ends_with(".json")
                && name[..name.len() - 5].bytes().all(|b| b.is_ascii_digit())
        })
        .count();
    if existing > 0 && !force {
        return Err(format!(
            "--dump-requests: {} already holds {existing} request dump(s) (0001.json, ...) \
             from an earlier replay; choose an empty folder, or pass --force to overwrite them",
            dir.display()
        ));
    }
    Ok(())
}

/// What a replay runs through, for the title line.
fn stack_description(stack: &StackArgs) -> String {
    let mut parts = Vec::new();
    if stack.memory.is_some() {
        let mut memory = match stack.n_messages {
            Some(n) => format!("session memory (last {n} messages"),
            None => "session memory (default window".to_owned(),
        };
        if !stack.pinned_keys.is_empty() {
            memory.push_str(&format!(", pinned {}", stack.pinned_keys.join(",")));
        }
        memory.push_str(&format!(
            ", {})",
            stack.db.as_deref().unwrap_or("sqlite://keel.db")
        ));
        parts.push(memory);
    }
    if let Some(config) = &stack.config {
        let writer = stack.summary_model.as_deref().map_or_else(
            || "extractive summaries".to_owned(),
            |m| format!("summaries by {m}"),
        );
        parts.push(format!(
            "summarization from {} ({writer})",
            config.display()
        ));
    }
    if parts.is_empty() {
        "no middleware (each request is the whole history)".to_owned()
    } else {
        parts.join(" around ")
    }
}

/// The second line of the text report: what each column of the table holds.
pub const LEGEND: &str = "columns: call = model call, line = its answer's line in the \
transcript, history / hist.tok = messages / tokens before it, sent / sent.tok = messages / \
tokens of the request sent, summary = written now (call) / reused (cached) / none (-), \
events = what the middleware streamed";

/// Runs the command.
pub fn run(args: Args, caps: &Caps) -> CommandResult {
    let through = stack_description(&args.stack);
    let options = args.stack.options(caps);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let prepared = keel_replay::prepare(&args.transcript, &options).await?;
        for warning in &prepared.warnings {
            warn(warning);
        }
        if let Some(dir) = &args.dump_requests {
            prepare_dump_dir(dir, args.force)?;
        }
        let bar = match args.progress {
            ProgressMode::Bar => true,
            ProgressMode::Auto => std::io::stderr().is_terminal(),
            ProgressMode::Lines | ProgressMode::None => false,
        }
        .then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{bar:40} {pos}/{len} model calls  {msg}")
            {
                bar.set_style(style);
            }
            bar
        });
        let mut progress = Progress {
            bar,
            lines: args.progress == ProgressMode::Lines,
            dump: args.dump_requests.clone(),
            error: None,
        };
        let replay = prepared.run(&mut progress).await?;
        if let Some(bar) = &progress.bar {
            bar.finish_and_clear();
        }
        if let Some(error) = progress.error {
            return Err(error.into());
        }
        let out = if args.json {
            clean_json(serde_json::to_string_pretty(&replay.report)? + "\n")
        } else {
            let title = format!(
                "keel replay {}: {} model calls through {through}; tokens counted with {}",
                args.transcript.display(),
                replay.report.totals.calls,
                replay.report.counter
            );
            clean_lines(&format!("{title}\n{LEGEND}\n\n{}", replay.report.render()))
        };
        print(&out)?;
        Ok(ExitCode::SUCCESS)
    })
}
