//! One module per `keel` subcommand, plus what they share: the input caps and the
//! escaping of text printed to a terminal.

use std::borrow::Cow;
use std::process::ExitCode;

use keel_replay::input::DEFAULT_MAX_LINE_BYTES;

pub mod check_transcript;
pub mod compact;
pub mod eval;
pub mod recall_index;
pub mod replay;
pub mod run;
pub mod serve;
pub mod tokens;

/// What a command returns: the exit code on success, or an error that `main` prints as
/// one line. Commands that need async create their own runtime inside `run`.
pub type CommandResult = Result<ExitCode, Box<dyn std::error::Error + Send + Sync>>;

/// How much of the user's files a command reads at most (global options, also taken
/// from the environment). A file over a cap is refused with a message naming the cap
/// and these options.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct Caps {
    /// The longest transcript line (one message) read, in bytes.
    #[arg(
        long,
        global = true,
        env = "KEEL_MAX_LINE_BYTES",
        value_name = "BYTES",
        default_value_t = DEFAULT_MAX_LINE_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(1..=(isize::MAX as u64)),
    )]
    pub max_line_bytes: u64,
    /// The largest summarization.yaml read, in bytes.
    #[arg(
        long,
        global = true,
        env = "KEEL_MAX_CONFIG_BYTES",
        value_name = "BYTES",
        default_value_t = keel_summarization::config::MAX_CONFIG_BYTES,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub max_config_bytes: u64,
    /// The largest file `keel tokens --text` reads, in bytes.
    #[arg(
        long,
        global = true,
        env = "KEEL_MAX_TEXT_BYTES",
        value_name = "BYTES",
        default_value_t = 64 * 1024 * 1024,
        value_parser = clap::value_parser!(u64).range(1..=(isize::MAX as u64)),
    )]
    pub max_text_bytes: u64,
}

impl Caps {
    /// The transcript reader's limits.
    pub fn limits(&self) -> keel_replay::Limits {
        keel_replay::Limits {
            max_line_bytes: usize::try_from(self.max_line_bytes).unwrap_or(usize::MAX),
        }
    }
}

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

/// True for characters a terminal may act on instead of showing: C0 and C1 controls
/// (ESC starts colour and cursor sequences), DEL, and the bidirectional overrides and
/// isolates that reorder what is shown (U+202E "right-to-left override").
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{2028}' | '\u{2029}' | '\u{202A}'
                ..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// Text from a user's file made safe to print on one line of a terminal: unsafe
/// characters (and newlines) are shown as `\u{..}` escapes, so a transcript cannot
/// clear, restyle or reorder the user's terminal.
pub fn clean(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Like [`clean`], keeping newlines (for multi-line output such as a summary).
pub fn clean_lines(text: &str) -> String {
    text.split('\n').map(clean).collect::<Vec<_>>().join("\n")
}

/// JSON made safe for a terminal: serde_json leaves C1 controls and bidirectional
/// overrides unescaped inside strings; they are written as `\uXXXX` escapes, which
/// any JSON reader decodes to the same text.
pub fn clean_json(json: String) -> String {
    if !json.chars().any(|c| is_unsafe(c) && c != '\n') {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_unsafe(c) && c != '\n' {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
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

/// Prints a warning on stderr, as every command does.
pub fn warn(text: &str) {
    eprintln!("keel: warning: {}", clean(text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(clean("plain"), "plain");
        assert_eq!(
            clean("a\u{1b}[2Jb\nc\u{202e}d"),
            "a\\u{1b}[2Jb\\u{a}c\\u{202e}d"
        );
        let json = clean_json("{\"a\":\"x\u{9b}y\u{202e}\"}".to_owned());
        assert_eq!(json, "{\"a\":\"x\\u009by\\u202e\"}");
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["a"], "x\u{9b}y\u{202e}");
    }
}
