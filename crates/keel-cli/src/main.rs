//! `keel`: Keel's command-line tool.
//!
//! Each subcommand lives in its own module under `src/commands/` and exposes an `Args`
//! struct (clap derive) and a `run(args) -> CommandResult`. Adding a command touches this
//! file in two places (the `Command` variant and its `match` arm) and `commands/mod.rs` in
//! one; nothing else. Errors end the process with a one-line message and exit code 1;
//! usage errors are clap's (exit code 2); nothing prints a backtrace.

mod commands;
mod telemetry;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Keel: agent middleware with transient summarization and rolling session memory.
#[derive(Debug, Parser)]
#[command(name = "keel", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    caps: commands::Caps,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a JSONL transcript (one message per line): bad JSON or messages by line
    /// number, duplicate ids, orphan tool results, tool calls without a result.
    CheckTranscript(commands::check_transcript::Args),
    /// Count the tokens of a JSONL transcript (per message and total) or, with `--text`,
    /// of a plain text file, with an exact tokenizer or LangChain's approximation.
    Tokens(commands::tokens::Args),
    /// Run the summarization middleware once over a transcript, as if the next model call
    /// were made: the request that would be sent, and what was summarized, rescued, kept.
    Compact(commands::compact::Args),
    /// Replay a recorded conversation through summarization and/or session memory,
    /// offline: the tokens each model call would send, against sending the last 100
    /// messages and the whole history, summary calls, cache hits, and the memory kept.
    Replay(commands::replay::Args),
    /// Ask probe questions after a recorded conversation, offline: does the request the
    /// model would receive hold each probe's evidence, does it present a corrected value
    /// as current, and what does it cost against sending the last 100 messages? With
    /// `--format locomo`, on conversations of the LoCoMo benchmark.
    Eval(commands::eval::Args),
    /// Run one turn of a middleware stack (a YAML stack file) on a thread with a scripted
    /// model, offline: the final thread, every request the model received, and the
    /// middleware's stream events.
    Run(commands::run::Args),
    /// Serve an agent described in a keel.yaml over the LangGraph Agent Server protocol
    /// (assistants, threads, runs, SSE streaming), with a chat page at `/`.
    Serve(commands::serve::Args),
    /// Manage the recall index (`rebuild --db URL` indexes a database from scratch).
    RecallIndex(commands::recall_index::Args),
}

fn main() -> ExitCode {
    // A bug must still end with a message, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("keel: internal error (please report it): {info}");
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::CheckTranscript(args) => commands::check_transcript::run(args, &cli.caps),
        Command::Tokens(args) => commands::tokens::run(args, &cli.caps),
        Command::Compact(args) => commands::compact::run(args, &cli.caps),
        Command::Replay(args) => commands::replay::run(args, &cli.caps),
        Command::Eval(args) => commands::eval::run(args, &cli.caps),
        Command::Run(args) => commands::run::run(args, &cli.caps),
        Command::Serve(args) => commands::serve::run(args),
        Command::RecallIndex(args) => commands::recall_index::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!(
                "keel: error: {}",
                commands::clean(&commands::describe(&*error))
            );
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
