//! The error every constructor returns for a setting out of range: the shared
//! [`keel_config::ConfigError`], keyed `middleware.field` (`model_call_limit.run_limit`).
//! The YAML stack loader adds the entry's position and line.

pub use keel_config::ConfigError;
