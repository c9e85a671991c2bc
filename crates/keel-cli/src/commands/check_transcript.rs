//! `keel check-transcript FILE`: is this JSONL transcript one a provider would accept?
//!
//! Every problem in the file is listed, `FILE:LINE: error: ...`, with the words `replay`,
//! `compact` and `tokens` use when they refuse the same file (they share
//! [`keel_replay::check`]). Errors: a line that is not a message (bad JSON, an unknown
//! role, tool arguments that are not JSON, bytes that are not UTF-8, a line over the
//! cap), an empty file, an id used twice, a tool result that answers no call of the
//! assistant message right before it (an orphan), a result given twice, and a tool call
//! left without a result when the conversation moves on. Warnings: a message without an
//! id (keel derives `line-N`), and a tool call still unanswered at the end of the file
//! (the pending call of a run).

use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

use keel_replay::check::{Checker, Report, Severity};

use super::{Caps, CommandResult, clean, print};

/// Errors after which the check stops listing (a binary file has one per line).
const MAX_ERRORS: usize = 100;

/// Arguments of `keel check-transcript`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The transcript: one JSON message per line (OpenAI chat shape plus `id`). Blank
    /// lines are skipped.
    pub file: PathBuf,
    /// Print only problems, not the summary line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Checks a transcript file, reading it line by line.
pub fn check_file(
    path: &std::path::Path,
    caps: &Caps,
) -> Result<(Report, bool), keel_replay::input::ReadError> {
    let mut checker = Checker::new();
    let mut errors = 0;
    let mut stopped = false;
    keel_replay::input::scan(path, caps.limits(), |line, message| {
        match message {
            Ok(m) => checker.message(line, &m),
            Err(problem) => {
                checker.bad_line(line, problem);
                errors += 1;
            }
        }
        if errors >= MAX_ERRORS {
            stopped = true;
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    Ok((checker.finish(), stopped))
}

/// Runs the command: prints `FILE:LINE: error: ...` per finding and a summary; exit code
/// 1 when there is any error.
pub fn run(args: Args, caps: &Caps) -> CommandResult {
    let (report, stopped) = check_file(&args.file, caps)?;
    let display = args.file.display().to_string();
    let path = clean(&display);
    let mut out = String::new();
    for f in &report.findings {
        let kind = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let text = f.problem.to_string();
        if f.line == 0 {
            let _ = writeln!(out, "{path}: {kind}: {}", clean(&text));
        } else {
            let _ = writeln!(out, "{path}:{}: {kind}: {}", f.line, clean(&text));
        }
    }
    if stopped {
        let _ = writeln!(
            out,
            "{path}: stopped after {MAX_ERRORS} errors; is this a JSONL transcript?"
        );
    }
    let errors = report.errors();
    if !args.quiet {
        let [s, u, a, t] = report.counts;
        let total: usize = report.counts.iter().sum();
        let verdict = if errors == 0 {
            "ok".to_owned()
        } else {
            format!("{errors} error(s)")
        };
        let _ = writeln!(
            out,
            "{path}: {total} messages ({s} system, {u} user, {a} assistant, {t} tool): {verdict}"
        );
    }
    print(&out)?;
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
