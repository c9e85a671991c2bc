//! The error every constructor returns for a setting out of range.

/// A setting a middleware refuses: which middleware, which field, the value, what is
/// wrong and what is allowed. The YAML stack loader adds the line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{middleware}.{field} = {value}: {problem}; allowed: {allowed}")]
pub struct ConfigError {
    /// The middleware, by its stack-file name (`model_call_limit`).
    pub middleware: &'static str,
    /// The field (`run_limit`).
    pub field: String,
    /// The value as given.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
    /// What is allowed.
    pub allowed: String,
}

impl ConfigError {
    /// A refused setting.
    pub fn new(
        middleware: &'static str,
        field: impl Into<String>,
        value: impl std::fmt::Display,
        problem: impl Into<String>,
        allowed: impl Into<String>,
    ) -> Self {
        ConfigError {
            middleware,
            field: field.into(),
            value: value.to_string(),
            problem: problem.into(),
            allowed: allowed.into(),
        }
    }
}
