//! Transcripts as JSONL: one [`Message`] per line, in Keel's wire shape.
//!
//! Every command that takes a transcript file (`keel tokens`, `keel compact`,
//! `keel replay`) reads it through [`read_jsonl`], so they report a bad file the same
//! way: the path, and for a bad line its 1-based line number. Blank lines are skipped.
//!
//! ```
//! use keel_core::transcript::{parse_jsonl, TranscriptError};
//!
//! let text = "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"h1\"}\n\n{\"role\":\"robot\"}\n";
//! let err = parse_jsonl(text.as_bytes(), "chat.jsonl").unwrap_err();
//! assert!(matches!(err, TranscriptError::Line { line: 3, .. }));
//! assert!(err.to_string().starts_with("chat.jsonl:3: "));
//! ```

use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::message::Message;

/// A transcript that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// The file could not be opened or read (missing, a directory, no permission).
    #[error("cannot read transcript {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a valid message.
    #[error("{}:{line}: not a valid message: {message}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What serde_json said (includes the column).
        message: String,
    },
}

impl TranscriptError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            TranscriptError::Io { path, .. } | TranscriptError::Line { path, .. } => path,
        }
    }
}

/// Reads a JSONL transcript file.
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Vec<Message>, TranscriptError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|source| TranscriptError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse_jsonl(std::io::BufReader::new(file), path)
}

/// Parses JSONL from `reader`; `path` names the source in errors.
pub fn parse_jsonl(
    reader: impl BufRead,
    path: impl AsRef<Path>,
) -> Result<Vec<Message>, TranscriptError> {
    let path = path.as_ref();
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| TranscriptError::Io {
            path: path.to_owned(),
            source,
        })?;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let message = serde_json::from_str(trimmed).map_err(|e| TranscriptError::Line {
            path: path.to_owned(),
            line: i + 1,
            message: e.to_string(),
        })?;
        out.push(message);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lines_and_skips_blanks() {
        let text = "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"h1\"}\n\n  \n{\"role\":\"assistant\",\"content\":null,\"id\":\"a1\"}";
        let msgs = parse_jsonl(text.as_bytes(), "t.jsonl").unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[1].id(), "a1");
    }

    #[test]
    fn bad_line_names_path_and_line() {
        let text = "{\"role\":\"user\",\"content\":\"hi\"}\n{oops\n";
        let err = parse_jsonl(text.as_bytes(), "dir/t.jsonl").unwrap_err();
        match &err {
            TranscriptError::Line { line, path, .. } => {
                assert_eq!(*line, 2);
                assert_eq!(path, Path::new("dir/t.jsonl"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn missing_file_is_io_error() {
        let err = read_jsonl("/nonexistent/keel/t.jsonl").unwrap_err();
        assert!(matches!(err, TranscriptError::Io { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/keel/t.jsonl"));
    }
}
