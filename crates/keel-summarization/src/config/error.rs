//! The error of a `summarization.yaml` that cannot be used, and its wording.

/// A configuration error: which key, what value, what is allowed, and where.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
    /// The file is larger than the cap.
    #[error(
        "{path} is larger than {cap} bytes, the cap on a configuration file; is it the right \
         file? If so, raise the cap (keel: --max-config-bytes BYTES or KEEL_MAX_CONFIG_BYTES)"
    )]
    TooLarge {
        /// The path.
        path: String,
        /// The cap, in bytes.
        cap: u64,
    },
    /// The text is not valid YAML.
    #[error("invalid YAML{}: {message}", at(*line))]
    Syntax {
        /// The parser's message.
        message: String,
        /// The line, when known.
        line: Option<u64>,
    },
    /// A key has a value outside its allowed range or of the wrong type: the shared
    /// [`keel_config::ConfigError`], its key written as the user wrote it
    /// (`summarization.trigger[1].value`).
    #[error(transparent)]
    Invalid(keel_config::ConfigError),
    /// A key that does not exist.
    #[error("unknown key summarization.{key}{}{}", at(*line), suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownKey {
        /// The key path.
        key: String,
        /// The nearest known key, when one is close.
        suggestion: Option<String>,
        /// The line.
        line: Option<u64>,
    },
}

/// A refused value at `key` (relative to the section), with its line when it came from
/// YAML.
pub(crate) fn invalid(
    key: String,
    value: String,
    problem: String,
    allowed: String,
    line: Option<u64>,
) -> ConfigError {
    ConfigError::Invalid(keel_config::ConfigError::at(
        key_path(&key),
        value,
        problem,
        allowed,
        line.unwrap_or(0),
    ))
}

/// The key as the user wrote it: `summarization.<key>`, except for keys of DeerFlow's
/// other top-level sections (`skills.container_path`).
fn key_path(key: &str) -> String {
    if key == "(root)" {
        "the document".to_owned()
    } else if key.starts_with("skills.") {
        key.to_owned()
    } else {
        format!("summarization.{key}")
    }
}

/// ` (line N)`, or nothing when the line is unknown.
pub(crate) fn at(line: Option<u64>) -> String {
    line.filter(|l| *l > 0)
        .map(|l| format!(" (line {l})"))
        .unwrap_or_default()
}

/// The nearest known key to a misspelt one, when one is close.
pub(crate) fn suggest(key: &str, known: &[&str]) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::normalized_damerau_levenshtein(key, k), *k))
        .filter(|(score, _)| *score >= 0.5)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_owned())
}
