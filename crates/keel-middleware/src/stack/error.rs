//! What can be wrong with a stack file.

use keel_config::{ConfigError, UnknownKey};

/// A stack file that cannot be loaded or built: what, where (the line), and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        message: String,
    },
    /// The file is larger than the cap.
    #[error("{path} is larger than {cap} bytes, the cap on a stack file; is it the right file?")]
    TooLarge {
        /// The path.
        path: String,
        /// The cap in bytes.
        cap: u64,
    },
    /// Not valid YAML.
    #[error("invalid YAML{}: {message}", at(*line))]
    Syntax {
        /// The parser's message.
        message: String,
        /// The line, when known.
        line: Option<u64>,
    },
    /// A value of the wrong type or out of range (the error names the key, the value,
    /// what is allowed and the line).
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// A key the schema does not have (the error names the line and the nearest key).
    #[error(transparent)]
    UnknownKey(#[from] UnknownKey),
    /// An entry's typed settings could not be read (serde's message, e.g. an unknown
    /// field), at the line of the value concerned.
    #[error("{key}{}: {message}", at(Some(*line)))]
    Settings {
        /// The key path (`middleware[0].session_memory`).
        key: String,
        /// What is wrong.
        message: String,
        /// The line.
        line: u64,
    },
    /// A middleware settings check failed.
    #[error("middleware[{index}].{}{}", .source, at(Some(*line)))]
    Middleware {
        /// Position in the list (0-based).
        index: usize,
        /// The line of the entry.
        line: u64,
        /// The middleware's own error.
        #[source]
        source: Box<ConfigError>,
    },
    /// The `summarization` entry is invalid (its error carries the line).
    #[error("middleware[{index}].{source}")]
    Summarization {
        /// Position in the list (0-based).
        index: usize,
        /// The summarization loader's error.
        #[source]
        source: Box<keel_summarization::config::ConfigError>,
    },
    /// The `summarization` entry could not be built (a summary model name is unknown).
    #[error("middleware[{index}] (line {line}): {source}")]
    SummarizationBuild {
        /// Position in the list (0-based).
        index: usize,
        /// The line of the entry.
        line: u64,
        /// The builder's error.
        #[source]
        source: Box<keel_summarization::middleware::BuildError>,
    },
    /// A model name the application's models do not know.
    #[error("{key} = {name:?}{}: no such model; the application resolves model names (for `keel run`, every name is the scripted model)", at(Some(*line)))]
    UnknownModel {
        /// The key path.
        key: String,
        /// The name.
        name: String,
        /// The line.
        line: u64,
    },
}

fn at(line: Option<u64>) -> String {
    keel_config::at_line(line)
}
