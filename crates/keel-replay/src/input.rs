//! Reading a JSONL transcript from a user's disk: line by line, with a cap per line, and
//! with errors that say which line, which byte and what to do.
//!
//! Every `keel` subcommand that takes a transcript reads it here, so a given file gets
//! the same verdict and the same message from all of them. Memory stays bounded by the
//! cap whatever the file is: `keel check-transcript /dev/zero` stops at the cap instead
//! of reading forever. A UTF-8 byte-order mark at the start of the file is skipped (as
//! the YAML loader skips one); a byte that is not UTF-8 is reported with its line and
//! offset; a line that is not a message is reported in plain words, not with the
//! parser's type names.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use keel_core::message::Message;
use serde_json::Value;

/// The default cap on one transcript line: 16 MiB. A message holding a pasted log of a
/// few hundred thousand words still fits; a file without newlines does not.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How much of a file a reader may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest line accepted, in bytes (without its newline).
    pub max_line_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// What is wrong with one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    /// The line is longer than the cap; reading stops there.
    #[error(
        "the line is longer than {cap} bytes, the cap on one message; if the file really \
         holds messages this long, raise the cap (keel: --max-line-bytes BYTES or \
         KEEL_MAX_LINE_BYTES)"
    )]
    TooLong {
        /// The cap, in bytes.
        cap: usize,
    },
    /// A byte sequence that is not UTF-8.
    #[error(
        "byte {column} of the line (offset {offset} in the file) is 0x{byte:02x}, which is \
         not UTF-8; save the transcript as UTF-8"
    )]
    NotUtf8 {
        /// 1-based byte position in the line.
        column: usize,
        /// 0-based byte offset in the file.
        offset: u64,
        /// The first bad byte.
        byte: u8,
    },
    /// Valid text, but not a message.
    #[error("not a valid message: {0}")]
    NotAMessage(String),
}

/// A transcript that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("cannot read transcript {}: {}", path.display(), describe_io(error))]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error (said in words in the message, so not a `source`).
        error: std::io::Error,
    },
    /// The path names a directory.
    #[error("cannot read transcript {}: it is a directory; name a .jsonl file", path.display())]
    Directory {
        /// The path.
        path: PathBuf,
    },
    /// A line that cannot be used.
    #[error("{}:{line}: {problem}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: LineProblem,
    },
}

/// An I/O error in words, without the OS error number.
pub fn describe_io(error: &std::io::Error) -> String {
    keel_config::describe_io(error.kind(), &error.to_string())
}

/// Reads lines with a cap, skipping a leading byte-order mark, and numbering them.
pub struct LineReader<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
    line: usize,
    offset: u64,
    stopped: bool,
}

impl<R: BufRead> LineReader<R> {
    /// A reader over `inner` with these limits.
    pub fn new(inner: R, limits: Limits) -> Self {
        LineReader {
            inner,
            max: limits.max_line_bytes,
            buf: Vec::new(),
            line: 0,
            offset: 0,
            stopped: false,
        }
    }

    /// The next line (1-based number, text without the newline or a trailing `\r`), or
    /// `None` at the end. After [`LineProblem::TooLong`] or an I/O error nothing more is
    /// read: the rest of the file cannot be trusted to have line breaks at all.
    pub fn next_line(&mut self) -> Option<NextLine<'_>> {
        if self.stopped {
            return None;
        }
        self.buf.clear();
        let start = self.offset;
        let mut saw_any = false;
        loop {
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.stopped = true;
                    return Some(Err((self.line + 1, LineError::Io(e))));
                }
            };
            if chunk.is_empty() {
                if !saw_any {
                    self.stopped = true;
                    return None;
                }
                break;
            }
            saw_any = true;
            let (take, found) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            if self.buf.len() + take > self.max {
                self.stopped = true;
                return Some(Err((
                    self.line + 1,
                    LineError::Problem(LineProblem::TooLong { cap: self.max }),
                )));
            }
            self.buf.extend_from_slice(&chunk[..take]);
            let used = take + usize::from(found);
            self.inner.consume(used);
            self.offset += used as u64;
            if found {
                break;
            }
        }
        self.line += 1;
        let mut from = 0;
        if self.line == 1 && self.buf.starts_with(b"\xEF\xBB\xBF") {
            from = 3;
        }
        let mut to = self.buf.len();
        if to > from && self.buf[to - 1] == b'\r' {
            to -= 1;
        }
        match std::str::from_utf8(&self.buf[from..to]) {
            Ok(text) => Some(Ok((self.line, text))),
            Err(e) => {
                let at = from + e.valid_up_to();
                Some(Err((
                    self.line,
                    LineError::Problem(LineProblem::NotUtf8 {
                        column: at + 1,
                        offset: start + at as u64,
                        byte: self.buf[at],
                    }),
                )))
            }
        }
    }
}

/// A line with its number, or the number of the line that failed and why.
pub type NextLine<'a> = Result<(usize, &'a str), (usize, LineError)>;

/// Why [`LineReader::next_line`] failed.
#[derive(Debug)]
pub enum LineError {
    /// A problem with this line.
    Problem(LineProblem),
    /// Reading failed.
    Io(std::io::Error),
}

/// Opens `path` for line reading: a directory is refused up front (on Linux it opens
/// and only fails at the first read).
pub fn open(path: &Path, limits: Limits) -> Result<LineReader<BufReader<File>>, ReadError> {
    if path.is_dir() {
        return Err(ReadError::Directory {
            path: path.to_owned(),
        });
    }
    let file = File::open(path).map_err(|error| ReadError::Io {
        path: path.to_owned(),
        error,
    })?;
    Ok(LineReader::new(
        BufReader::with_capacity(64 * 1024, file),
        limits,
    ))
}

/// Calls `each` with every non-blank line's number and message (or what is wrong with
/// it), in file order, until it returns [`ControlFlow::Break`]; returns how many
/// non-blank lines were seen. A line that is too long ends the reading (it is passed to
/// `each` first); an I/O error is returned.
pub fn scan(
    path: &Path,
    limits: Limits,
    mut each: impl FnMut(usize, Result<Message, LineProblem>) -> ControlFlow<()>,
) -> Result<usize, ReadError> {
    let mut reader = open(path, limits)?;
    let mut seen = 0;
    while let Some(next) = reader.next_line() {
        match next {
            Ok((line, text)) => {
                if text.trim().is_empty() {
                    continue;
                }
                seen += 1;
                if each(line, parse_message(text)).is_break() {
                    break;
                }
            }
            Err((line, LineError::Problem(problem))) => {
                seen += 1;
                if each(line, Err(problem)).is_break() {
                    break;
                }
            }
            Err((_, LineError::Io(error))) => {
                return Err(ReadError::Io {
                    path: path.to_owned(),
                    error,
                });
            }
        }
    }
    Ok(seen)
}

/// Reads every message with its line number; the first bad line is the error.
pub fn read_messages(path: &Path, limits: Limits) -> Result<Vec<(usize, Message)>, ReadError> {
    let mut out = Vec::new();
    let mut first_bad: Option<(usize, LineProblem)> = None;
    let mut reader = open(path, limits)?;
    while let Some(next) = reader.next_line() {
        let (line, result) = match next {
            Ok((_, text)) if text.trim().is_empty() => continue,
            Ok((line, text)) => (line, parse_message(text)),
            Err((line, LineError::Problem(problem))) => (line, Err(problem)),
            Err((_, LineError::Io(error))) => {
                return Err(ReadError::Io {
                    path: path.to_owned(),
                    error,
                });
            }
        };
        match result {
            Ok(message) => out.push((line, message)),
            Err(problem) => {
                first_bad = Some((line, problem));
                break;
            }
        }
    }
    match first_bad {
        Some((line, problem)) => Err(ReadError::Line {
            path: path.to_owned(),
            line,
            problem,
        }),
        None => Ok(out),
    }
}

/// Reads a whole text file, refusing one larger than `cap` bytes (`keel tokens --text`).
pub fn read_text(path: &Path, cap: usize) -> Result<String, String> {
    if path.is_dir() {
        return Err(format!(
            "cannot read {}: it is a directory; name a text file",
            path.display()
        ));
    }
    let file = File::open(path)
        .map_err(|e| format!("cannot read {}: {}", path.display(), describe_io(&e)))?;
    let mut bytes = Vec::new();
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {}", path.display(), describe_io(&e)))?;
    if bytes.len() > cap {
        return Err(format!(
            "{} is larger than {cap} bytes, the cap on a text file; raise it with \
             --max-text-bytes BYTES or KEEL_MAX_TEXT_BYTES",
            path.display()
        ));
    }
    let from = if bytes.starts_with(b"\xEF\xBB\xBF") {
        3
    } else {
        0
    };
    match String::from_utf8(bytes[from..].to_vec()) {
        Ok(text) => Ok(text),
        Err(e) => {
            let at = from + e.utf8_error().valid_up_to();
            let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
            Err(format!(
                "{}:{line}: byte offset {at} is 0x{:02x}, which is not UTF-8; save the file \
                 as UTF-8",
                path.display(),
                bytes[at]
            ))
        }
    }
}

/// Parses one line into a message. On failure the reason is said in the transcript's
/// own terms (keys and values), not in the parser's.
pub fn parse_message(text: &str) -> Result<Message, LineProblem> {
    match serde_json::from_str::<Message>(text) {
        Ok(message) => Ok(message),
        Err(error) => Err(LineProblem::NotAMessage(explain(text, &error))),
    }
}

const ROLES: &str = "system, user, assistant or tool";

/// Why `text` is not a message, in words.
fn explain(text: &str, error: &serde_json::Error) -> String {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return json_syntax(&e),
    };
    let Value::Object(map) = &value else {
        return format!(
            "a message is a JSON object with `role` and `content`, but this line is {}",
            kind(&value)
        );
    };
    let role = match explain_role(map) {
        Ok(role) => role,
        Err(problem) => return problem,
    };
    explain_fields(map)
        .or_else(|| explain_content(role, map))
        .or_else(|| explain_calls_and_status(role, map))
        .unwrap_or_else(|| serde_said(error))
}

/// The message's role, or why it is not one of the four (with a hint for LangChain's
/// names and upper case).
fn explain_role(map: &serde_json::Map<String, Value>) -> Result<&str, String> {
    let role = match map.get("role") {
        None => return Err(format!("the message has no `role`; expected {ROLES}")),
        Some(Value::String(r)) => r.as_str(),
        Some(other) => return Err(format!("`role` is {}; expected {ROLES}", kind(other))),
    };
    if !matches!(role, "system" | "user" | "assistant" | "tool") {
        let hint = match role.to_ascii_lowercase().as_str() {
            "human" => " (did you mean `user`? LangChain's `human` is `user` here)",
            "ai" => " (did you mean `assistant`? LangChain's `ai` is `assistant` here)",
            "developer" => " (did you mean `system`?)",
            "function" => " (did you mean `tool`?)",
            "user" | "system" | "assistant" | "tool" => " (roles are lower case)",
            _ => "",
        };
        return Err(format!("`role` is {}; expected {ROLES}{hint}", shown(role)));
    }
    Ok(role)
}

/// What is wrong with the string fields (`id`, `name`, `tool_call_id`), if anything.
fn explain_fields(map: &serde_json::Map<String, Value>) -> Option<String> {
    for key in ["id", "name", "tool_call_id"] {
        if let Some(v) = map.get(key)
            && !v.is_string()
            && !(v.is_null() && key == "name")
        {
            return Some(format!("`{key}` is {}; it must be a string", kind(v)));
        }
    }
    None
}

/// What is wrong with `content` (missing, of the wrong type, a text part without text),
/// if anything.
fn explain_content(role: &str, map: &serde_json::Map<String, Value>) -> Option<String> {
    match (role, map.get("content")) {
        ("assistant", None | Some(Value::Null)) => {}
        (_, None) => {
            return Some(format!(
                "a {role} message needs `content` (a string or a list of parts)"
            ));
        }
        (_, Some(Value::String(_) | Value::Array(_))) => {}
        (_, Some(other)) => {
            return Some(format!(
                "`content` is {}; it must be a string or a list of parts",
                kind(other)
            ));
        }
    }
    if let Some(Value::Array(parts)) = map.get("content") {
        for (i, part) in parts.iter().enumerate() {
            if let Value::Object(p) = part
                && p.get("type").and_then(Value::as_str) == Some("text")
                && !p.get("text").is_some_and(Value::is_string)
            {
                return Some(format!(
                    "`content[{i}]` is a text part without a string `text`"
                ));
            }
        }
    }
    None
}

/// What is wrong with a tool message's `tool_call_id`, the `tool_calls` or the
/// `status`, if anything.
fn explain_calls_and_status(role: &str, map: &serde_json::Map<String, Value>) -> Option<String> {
    if role == "tool" && !map.contains_key("tool_call_id") {
        return Some(
            "a tool message needs `tool_call_id`: the id of the call it answers".to_owned(),
        );
    }
    if let Some(calls) = map.get("tool_calls") {
        let Value::Array(calls) = calls else {
            return Some(format!(
                "`tool_calls` is {}; it must be a list",
                kind(calls)
            ));
        };
        for (i, call) in calls.iter().enumerate() {
            if let Some(problem) = explain_call(call) {
                return Some(format!("`tool_calls[{i}]`: {problem}"));
            }
        }
    }
    if let Some(status) = map.get("status")
        && !matches!(status.as_str(), Some("success" | "error"))
    {
        return Some(format!(
            "`status` is {}; expected \"success\" or \"error\"",
            shown_value(status)
        ));
    }
    None
}

/// What serde says when every check above passed, without its type names and position.
fn serde_said(error: &serde_json::Error) -> String {
    let said = error.to_string();
    let said = said.split(" at line ").next().unwrap_or(&said);
    if let Some(rest) = said.strip_prefix("duplicate field `") {
        let key = rest.split('`').next().unwrap_or(rest);
        return format!("the key `{key}` appears twice");
    }
    if said.contains("enum") {
        return "the keys do not fit a system, user, assistant or tool message".to_owned();
    }
    said.to_owned()
}

fn explain_call(call: &Value) -> Option<String> {
    let Value::Object(c) = call else {
        return Some(format!("a tool call is an object, not {}", kind(call)));
    };
    match c.get("id") {
        Some(Value::String(_)) => {}
        None => return Some("the call has no `id`".to_owned()),
        Some(v) => return Some(format!("`id` is {}; it must be a string", kind(v))),
    }
    let Some(Value::Object(f)) = c.get("function") else {
        return Some("the call needs `function` with `name` and `arguments`".to_owned());
    };
    if !f.get("name").is_some_and(Value::is_string) {
        return Some("`function.name` must be a string".to_owned());
    }
    match f.get("arguments") {
        Some(Value::String(args)) => {
            if !args.trim().is_empty()
                && let Err(e) = serde_json::from_str::<Value>(args)
            {
                return Some(format!(
                    "`function.arguments` is not valid JSON: {}",
                    json_syntax(&e)
                ));
            }
            None
        }
        None => Some("`function.arguments` is missing (a JSON text, \"{}\" for none)".to_owned()),
        Some(v) => Some(format!(
            "`function.arguments` is {}; it must be a string holding JSON, as OpenAI sends it",
            kind(v)
        )),
    }
}

/// A JSON syntax error in words, with the column.
fn json_syntax(e: &serde_json::Error) -> String {
    let said = e.to_string();
    let said = said.split(" at line ").next().unwrap_or(&said);
    let what = if said.starts_with("EOF while parsing") {
        "the JSON ends too early (is the line cut off?)"
    } else if said == "trailing characters" {
        "there is more text after the JSON value (one message per line)"
    } else if said == "recursion limit exceeded" {
        "the JSON is nested too deeply (more than 128 levels)"
    } else if said == "expected value" {
        "not JSON: expected a value"
    } else if said == "expected ident" {
        // serde_json read `t`, `f` or `n` and expected true, false or null: a bare word.
        "not JSON: a bare word (text must be in double quotes; only true, false and null are written without)"
    } else if said == "key must be a string" {
        "not JSON: a key without double quotes (write {\"role\": \"user\", ...})"
    } else if said == "expected `:`" {
        "not JSON: a key without its `:` and value"
    } else if said == "expected `,` or `}`" || said == "expected `,` or `]`" {
        "not JSON: a missing comma between two entries"
    } else if said.starts_with("control character") {
        "not JSON: a raw control character (a tab or newline) inside a string; write it as \\t or \\n"
    } else if said == "invalid number" || said == "number out of range" {
        "not JSON: a number that is not one"
    } else {
        return with_column(&format!("not JSON: {said}"), e.column());
    };
    with_column(what, e.column())
}

fn with_column(what: &str, column: usize) -> String {
    if column > 0 {
        format!("{what} (column {column})")
    } else {
        what.to_owned()
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn shown(s: &str) -> String {
    let cut: String = s.chars().take(40).collect();
    format!("{cut:?}")
}

fn shown_value(v: &Value) -> String {
    match v {
        Value::String(s) => shown(s),
        other => kind(other).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(bytes: &[u8], max: usize) -> Vec<Result<(usize, String), String>> {
        let mut r = LineReader::new(
            bytes,
            Limits {
                max_line_bytes: max,
            },
        );
        let mut out = Vec::new();
        while let Some(n) = r.next_line() {
            out.push(match n {
                Ok((l, t)) => Ok((l, t.to_owned())),
                Err((l, LineError::Problem(p))) => Err(format!("{l}: {p}")),
                Err((l, LineError::Io(e))) => Err(format!("{l}: {e}")),
            });
        }
        out
    }

    #[test]
    fn lines_are_numbered_and_a_bom_and_crlf_are_dropped() {
        let got = lines(b"\xEF\xBB\xBFa\r\n\nb", 10);
        assert_eq!(
            got,
            vec![
                Ok((1, "a".to_owned())),
                Ok((2, String::new())),
                Ok((3, "b".to_owned()))
            ]
        );
    }

    #[test]
    fn a_long_line_stops_reading_and_names_the_cap() {
        let got = lines(b"ok\n0123456789ABC\nnext\n", 10);
        assert_eq!(got.len(), 2);
        let err = got[1].clone().unwrap_err();
        assert!(
            err.starts_with("2: the line is longer than 10 bytes"),
            "{err}"
        );
    }

    #[test]
    fn bad_utf8_names_line_column_and_offset() {
        let got = lines(b"abc\nde\xfff\n", 100);
        assert_eq!(
            got[1],
            Err("2: byte 3 of the line (offset 6 in the file) is 0xff, which is not UTF-8; save the transcript as UTF-8".to_owned())
        );
    }

    #[test]
    fn messages_are_explained_in_plain_words() {
        let e = |t: &str| parse_message(t).unwrap_err().to_string();
        assert_eq!(
            e(r#"{"role":"user","content":5,"id":"u"}"#),
            "not a valid message: `content` is a number; it must be a string or a list of parts"
        );
        assert_eq!(
            e(r#"{"role":"human","content":"x"}"#),
            "not a valid message: `role` is \"human\"; expected system, user, assistant or tool (did you mean `user`? LangChain's `human` is `user` here)"
        );
        assert_eq!(
            e(r#"{"role":"user","content":"x","role":"user"}"#),
            "not a valid message: the key `role` appears twice"
        );
        assert_eq!(
            e("{oops"),
            "not a valid message: not JSON: a key without double quotes (write {\"role\": \"user\", ...}) (column 2)"
        );
        // A line of plain text: serde_json's own words would be `expected ident`.
        assert_eq!(
            e("not a message"),
            "not a valid message: not JSON: a bare word (text must be in double quotes; only true, false and null are written without) (column 2)"
        );
        for t in [
            r#"{"role":"user","content":5}"#,
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"x","arguments":"{"}}]}"#,
            r#"[1]"#,
        ] {
            let m = e(t);
            assert!(!m.contains("enum") && !m.contains("line 1"), "{m}");
        }
    }
}
