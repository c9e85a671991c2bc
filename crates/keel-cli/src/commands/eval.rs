//! `keel eval TRANSCRIPT --probes PROBES.jsonl`: asked about a fact after the whole
//! conversation, would the model have the evidence in front of it?
//!
//! The transcript is replayed through the same stack as `keel replay` (summarization from
//! `--config`, session memory with `--memory session`); then each probe's question is
//! asked as the next user message, and the request the model would receive is checked
//! for the probe's needles and for stale values presented as current. With `--model` the
//! request is also sent to that model (OpenAI-compatible, or `anthropic:NAME`) and its
//! answer checked. The engine
//! is `keel_replay::eval`; docs/memory-eval.md says what the figures can and cannot say.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use keel_core::model::ChatModel;

use super::replay::{StackArgs, prepare_dump_dir};
use super::{Caps, CommandResult, clean_json, clean_lines, print, warn};

/// Arguments of `keel eval`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The transcript: one JSON message per line, as for `keel replay`.
    pub transcript: PathBuf,
    /// The probes: one JSON object per line,
    /// `{"question": "...", "needles": ["..."], "stale": ["..."]}` (`stale` and an `id`
    /// label are optional).
    #[arg(long, value_name = "FILE")]
    pub probes: PathBuf,
    #[command(flatten)]
    pub stack: StackArgs,
    /// Also send each request to this model and check its answer for the needles: a
    /// model on an OpenAI-compatible server (OPENAI_BASE_URL, OPENAI_API_KEY), or
    /// `anthropic:NAME` for Claude through Anthropic's Messages API (ANTHROPIC_API_KEY,
    /// ANTHROPIC_BASE_URL).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Print one JSON object (`transcript_messages`, `probes`, `totals`) instead of a
    /// table.
    #[arg(long)]
    pub json: bool,
    /// Write each probe's request exactly as it would be sent to DIR/0001.json,
    /// DIR/0002.json, ... (one per probe, in file order).
    #[arg(long, value_name = "DIR")]
    pub dump_requests: Option<PathBuf>,
    /// With --dump-requests: replace the dumps a folder already holds.
    #[arg(long, requires = "dump_requests")]
    pub force: bool,
}

/// Runs the command.
pub fn run(args: Args, caps: &Caps) -> CommandResult {
    let probes = keel_replay::read_probes(&args.probes, caps.limits())?;
    let model: Option<Arc<dyn ChatModel>> = match &args.model {
        Some(name) => {
            Some(keel_replay::models::model_by_name(name).map_err(|e| format!("--model: {e}"))?)
        }
        None => None,
    };
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
        let (report, requests) =
            keel_replay::eval::evaluate_with_requests(&prepared, &probes, model.as_deref()).await?;
        if let Some(dir) = &args.dump_requests {
            for (i, request) in requests.iter().enumerate() {
                let Some(request) = request else { continue };
                let path = dir.join(format!("{:04}.json", i + 1));
                let body = serde_json::to_string_pretty(&request.to_json())? + "\n";
                std::fs::write(&path, body).map_err(|e| {
                    format!("--dump-requests: cannot write {}: {e}", path.display())
                })?;
            }
        }
        let out = if args.json {
            clean_json(serde_json::to_string_pretty(&report)? + "\n")
        } else {
            clean_lines(&report.render())
        };
        print(&out)?;
        Ok(ExitCode::SUCCESS)
    })
}
