//! What can be wrong with a stack file, and the contract of one kind of stack entry.

use std::sync::Arc;

use keel_core::middleware::Middleware;
use keel_core::model::ModelRegistry;

use crate::yaml::Node;
use crate::{ConfigError, UnknownKey};

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
    /// An entry's own loader refused its settings (its error names the key, the value
    /// and the line), e.g. keel-summarization's for `summarization`.
    #[error("{}", entry_message(*index, source.as_ref()))]
    Entry {
        /// Position in the list (0-based).
        index: usize,
        /// The entry loader's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An entry could not be built (e.g. a summary model name is unknown).
    #[error("middleware[{index}] (line {line}): {source}")]
    Build {
        /// Position in the list (0-based).
        index: usize,
        /// The line of the entry.
        line: u64,
        /// The builder's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
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

/// An entry loader's error with the entry's place in the list: its key path gets the
/// `middleware[i].` prefix (`unknown key middleware[1].summarization.triger`, not
/// `middleware[1].unknown key summarization.triger`).
fn entry_message(index: usize, source: &(dyn std::error::Error + Send + Sync)) -> String {
    let text = source.to_string();
    match text.strip_prefix("unknown key ") {
        Some(rest) => format!("unknown key middleware[{index}].{rest}"),
        None => format!("middleware[{index}].{text}"),
    }
}

fn at(line: Option<u64>) -> String {
    crate::at_line(line)
}

/// Where one entry of the `middleware` list sits: what an entry reader needs to read
/// its settings and to name them in errors.
#[derive(Clone, Copy, Debug)]
pub struct EntrySource<'a> {
    /// Position in the list (0-based).
    pub index: usize,
    /// The entry's name (`pii`).
    pub name: &'a str,
    /// The line of the name.
    pub line: u64,
    /// The settings (the value under the name), with the file's lines.
    pub node: &'a Node,
}

impl EntrySource<'_> {
    /// The key path of one of the entry's settings (`middleware[1].pii.strategy`).
    pub fn key(&self, field: &str) -> String {
        format!("middleware[{}].{}.{field}", self.index, self.name)
    }
}

/// What building an entry may use: its position (for errors) and the application's
/// models.
#[derive(Clone, Copy)]
pub struct BuildContext<'a> {
    /// Position in the list (0-based).
    pub index: usize,
    /// The entry's name.
    pub name: &'a str,
    /// The line of the entry's name.
    pub line: u64,
    /// The application's models, by name.
    pub models: &'a Arc<dyn ModelRegistry>,
}

/// One kind of `middleware` entry: its name in the file and how its settings are
/// read. Reading checks every setting (no model is resolved yet); the checked entry
/// then builds with the application's models.
pub trait StackEntry: Send + Sync {
    /// The entry's name in a stack file (`pii`).
    fn name(&self) -> &'static str;

    /// Reads and checks the entry's settings.
    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError>;
}

/// An entry whose settings are read and checked, ready to build.
pub trait CheckedEntry: Send + Sync {
    /// The middleware, or `None` when the settings turn it off.
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError>;
}
