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
//!
//! `keel eval --format locomo FILE.json ...` builds the transcript and the probes of each
//! file from a LoCoMo conversation (`keel_replay::locomo`) and reports the benchmark's
//! figures per file and summed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use keel_core::model::ChatModel;
use keel_replay::SentRequest;
use keel_replay::locomo::{Conversation, LocomoReport};

use super::replay::{StackArgs, prepare_dump_dir};
use super::{Caps, CommandResult, clean_json, clean_lines, print, warn};

/// What the input files are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSONL transcript and a `--probes` file.
    Jsonl,
    /// One or more LoCoMo conversation files (JSON), each giving its transcript and its
    /// probes (Maharana et al., ACL 2024).
    Locomo,
}

/// Arguments of `keel eval`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("outputs").args(["dump_requests", "write_transcript"]).multiple(true)))]
pub struct Args {
    /// The transcript: one JSON message per line, as for `keel replay`. With
    /// `--format locomo`: one or more LoCoMo conversation files.
    #[arg(value_name = "TRANSCRIPT", required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
    /// The probes: one JSON object per line,
    /// `{"question": "...", "needles": ["..."], "stale": ["..."]}` (`stale` and an `id`
    /// label are optional). Not taken with `--format locomo`, whose files hold their
    /// questions.
    #[arg(long, value_name = "FILE")]
    pub probes: Option<PathBuf>,
    /// The input's format: `jsonl` (a transcript and `--probes`) or `locomo` (LoCoMo
    /// conversation files: the transcript is the conversation, the probes its questions
    /// of category 1-4 answered verbatim in an evidence turn; docs/memory-eval.md).
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: Format,
    /// With `--format locomo`: also write each file's converted transcript and probes to
    /// DIR/STEM.jsonl and DIR/STEM.probes.jsonl (STEM: the file's name without `.json`),
    /// for `keel eval DIR/STEM.jsonl --probes DIR/STEM.probes.jsonl`.
    #[arg(long, value_name = "DIR")]
    pub write_transcript: Option<PathBuf>,
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
    /// DIR/0002.json, ... (one per probe, in file order; with `--format locomo`, in
    /// DIR/STEM/ for each file).
    #[arg(long, value_name = "DIR")]
    pub dump_requests: Option<PathBuf>,
    /// With --dump-requests: replace the dumps a folder already holds; with
    /// --write-transcript: replace the files written there before.
    #[arg(long, requires = "outputs")]
    pub force: bool,
}

/// Runs the command.
pub fn run(args: Args, caps: &Caps) -> CommandResult {
    match args.format {
        Format::Jsonl => run_jsonl(args, caps),
        Format::Locomo => run_locomo(args, caps),
    }
}

/// The `--model` (`NAME` on an OpenAI-compatible server, or `anthropic:NAME`), configured
/// from the environment.
fn answering_model(name: Option<&String>) -> Result<Option<Arc<dyn ChatModel>>, String> {
    Ok(match name {
        Some(name) => {
            Some(keel_replay::models::model_by_name(name).map_err(|e| format!("--model: {e}"))?)
        }
        None => None,
    })
}

/// Writes each request to DIR/0001.json, ... (skipping probes a middleware answered).
fn write_dumps(dir: &Path, requests: &[Option<SentRequest>]) -> Result<(), String> {
    for (i, request) in requests.iter().enumerate() {
        let Some(request) = request else { continue };
        let path = dir.join(format!("{:04}.json", i + 1));
        let body =
            serde_json::to_string_pretty(&request.to_json()).map_err(|e| e.to_string())? + "\n";
        std::fs::write(&path, body)
            .map_err(|e| format!("--dump-requests: cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `keel eval TRANSCRIPT --probes FILE`.
fn run_jsonl(args: Args, caps: &Caps) -> CommandResult {
    let [transcript] = args.inputs.as_slice() else {
        return Err(format!(
            "{} transcripts given; `keel eval` takes one transcript and its --probes file \
             (several files are for --format locomo)",
            args.inputs.len()
        )
        .into());
    };
    if args.write_transcript.is_some() {
        return Err(
            "--write-transcript writes converted LoCoMo files; it needs --format locomo".into(),
        );
    }
    let Some(probes_path) = &args.probes else {
        return Err(
            "--probes FILE is needed: the questions to ask after the transcript, one JSON \
             object per line (or --format locomo for LoCoMo files, which hold their questions)"
                .into(),
        );
    };
    let probes = keel_replay::read_probes(probes_path, caps.limits())?;
    let model = answering_model(args.model.as_ref())?;
    let mut options = args.stack.options(caps);
    // Evidence is recalled by default when asking about a transcript.
    options.recall.get_or_insert(true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let prepared = keel_replay::prepare(transcript, &options).await?;
        for warning in &prepared.warnings {
            warn(warning);
        }
        if let Some(dir) = &args.dump_requests {
            prepare_dump_dir(dir, args.force)?;
        }
        let (report, requests) =
            keel_replay::eval::evaluate_with_requests(&prepared, &probes, model.as_deref()).await?;
        if let Some(dir) = &args.dump_requests {
            write_dumps(dir, &requests)?;
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

/// Writes a conversation's transcript and probes to DIR/STEM.jsonl and
/// DIR/STEM.probes.jsonl, refusing to replace existing files unless `force`.
fn write_converted(dir: &Path, c: &Conversation, force: bool) -> Result<(), String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "--write-transcript: {} is a file, not a folder",
            dir.display()
        ));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("--write-transcript: cannot create {}: {e}", dir.display()))?;
    let stem = c.stem();
    let (transcript, probes) = c.to_jsonl().map_err(|e| e.to_string())?;
    for (name, body) in [
        (format!("{stem}.jsonl"), transcript),
        (format!("{stem}.probes.jsonl"), probes),
    ] {
        let path = dir.join(name);
        if path.exists() && !force {
            return Err(format!(
                "--write-transcript: {} exists; choose another folder, or pass --force to \
                 replace it",
                path.display()
            ));
        }
        std::fs::write(&path, body)
            .map_err(|e| format!("--write-transcript: cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `keel eval --format locomo FILE.json ...`.
fn run_locomo(args: Args, caps: &Caps) -> CommandResult {
    if args.probes.is_some() {
        return Err(
            "--probes is not taken with --format locomo: each LoCoMo file holds its questions"
                .into(),
        );
    }
    if args.stack.session.is_some() && args.inputs.len() > 1 {
        return Err(
            "--session names one session, and several LoCoMo files would replay into it \
             mixed; give one file, or leave --session out (each file gets its own session)"
                .into(),
        );
    }
    // Every file is read and converted before anything runs: a bad file fails at once.
    let max_bytes = usize::try_from(caps.max_text_bytes).unwrap_or(usize::MAX);
    let mut conversations = Vec::with_capacity(args.inputs.len());
    let mut stems = std::collections::HashSet::new();
    for path in &args.inputs {
        let c = Conversation::read(path, max_bytes)?;
        if (args.write_transcript.is_some() || args.dump_requests.is_some())
            && !stems.insert(c.stem())
        {
            return Err(format!(
                "{}: another file given has the name {:?} too; the files written for each \
                 are named after it",
                path.display(),
                c.stem()
            )
            .into());
        }
        conversations.push(c);
    }
    if let Some(dir) = &args.write_transcript {
        for c in &conversations {
            write_converted(dir, c, args.force)?;
        }
    }
    let model = answering_model(args.model.as_ref())?;
    let mut options = args.stack.options(caps);
    options.recall.get_or_insert(true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut files = Vec::with_capacity(conversations.len());
        for c in &conversations {
            let dump = args.dump_requests.as_ref().map(|d| d.join(c.stem()));
            if let Some(dir) = &dump {
                prepare_dump_dir(dir, args.force)?;
            }
            let (report, requests) =
                keel_replay::locomo::evaluate(c, &options, model.as_deref()).await?;
            if let Some(dir) = &dump {
                write_dumps(dir, &requests)?;
            }
            files.push(report);
        }
        let mut warned = std::collections::HashSet::new();
        for warning in files.iter().flat_map(|f| &f.warnings) {
            if warned.insert(warning) {
                warn(warning);
            }
        }
        let report = LocomoReport::new(files);
        let out = if args.json {
            clean_json(serde_json::to_string_pretty(&report)? + "\n")
        } else {
            clean_lines(&report.render())
        };
        print(&out)?;
        Ok(ExitCode::SUCCESS)
    })
}
