//! The one error for a refused setting.

/// A setting that is refused: the key (dotted, `middleware[1].pii.strategy`), the value
/// as written, what is wrong, what is allowed, and the line (0 when the setting did not
/// come from a file, e.g. a constructor's check; a loader adds it with
/// [`with_line`](Self::with_line)).
///
/// Reads `KEY = VALUE (line N): PROBLEM; allowed: ALLOWED`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value}{}: {problem}; allowed: {allowed}", at_line(*line))]
pub struct ConfigError {
    /// The key path.
    pub key: String,
    /// The value as written.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
    /// What is allowed.
    pub allowed: String,
    /// The line (1-based; 0 when unknown).
    pub line: u64,
}

impl ConfigError {
    /// A refused `field` of `section` (`model_call_limit`, `run_limit`): the key reads
    /// `section.field`, and the line is unknown until a loader adds it.
    pub fn new(
        section: &str,
        field: impl AsRef<str>,
        value: impl std::fmt::Display,
        problem: impl Into<String>,
        allowed: impl Into<String>,
    ) -> Self {
        let field = field.as_ref();
        let key = if section.is_empty() {
            field.to_owned()
        } else {
            format!("{section}.{field}")
        };
        Self::at(key, value, problem, allowed, 0)
    }

    /// A refused value at a full key path and line.
    pub fn at(
        key: impl Into<String>,
        value: impl std::fmt::Display,
        problem: impl Into<String>,
        allowed: impl Into<String>,
        line: u64,
    ) -> Self {
        ConfigError {
            key: key.into(),
            value: value.to_string(),
            problem: problem.into(),
            allowed: allowed.into(),
            line,
        }
    }

    /// The same error at `line`.
    pub fn with_line(mut self, line: u64) -> Self {
        self.line = line;
        self
    }
}

/// ` (line N)`, or nothing when the line is unknown (`None` or 0).
pub fn at_line(line: impl Into<Option<u64>>) -> String {
    line.into()
        .filter(|l| *l > 0)
        .map(|l| format!(" (line {l})"))
        .unwrap_or_default()
}
