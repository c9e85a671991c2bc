//! One module per `keel` subcommand.

use std::process::ExitCode;

pub mod check_transcript;
pub mod compact;
pub mod replay;
pub mod tokens;

/// What a command returns: the exit code on success, or an error that `main` prints as
/// one line. Commands that need async create their own runtime inside `run`.
pub type CommandResult = Result<ExitCode, Box<dyn std::error::Error + Send + Sync>>;

/// An error and its causes on one line: `outer: inner: root`.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // thiserror's `#[error(transparent)]` and `{source}` formats repeat the cause.
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Writes to stdout; a closed pipe (`keel ... | head`) ends output quietly instead of
/// failing.
pub fn print(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
