//! Where and how to reach an OpenAI-compatible server, from code or the environment.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};

use crate::profile::known_model;

/// OpenAI's public endpoint, used when no base URL is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The default time allowed for a whole non-streaming call, for connecting, and
/// between two reads of a streamed answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Environment variables [`OpenAiConfig::from_env`] reads.
pub mod env {
    /// Base URL of the server, e.g. `http://127.0.0.1:8080/v1`.
    pub const BASE_URL: &str = "OPENAI_BASE_URL";
    /// Secret key, sent as `Authorization: Bearer ...`.
    pub const API_KEY: &str = "OPENAI_API_KEY";
    /// OpenAI organization id (`OpenAI-Organization` header).
    pub const ORG_ID: &str = "OPENAI_ORG_ID";
    /// OpenAI project id (`OpenAI-Project` header).
    pub const PROJECT_ID: &str = "OPENAI_PROJECT_ID";
    /// The model name; required unless set in code.
    pub const MODEL: &str = "KEEL_MODEL";
    /// Context window in input tokens, for models the built-in table does not know.
    pub const CONTEXT_WINDOW: &str = "KEEL_CONTEXT_WINDOW";
    /// Timeout in seconds (decimals allowed).
    pub const TIMEOUT_SECS: &str = "KEEL_OPENAI_TIMEOUT_SECS";
}

/// A configuration that cannot work. Each variant names the setting and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No model name was given in code or in `KEEL_MODEL`.
    #[error("no model name: set it with .model(..) or the KEEL_MODEL environment variable")]
    MissingModel,
    /// The base URL is not an http(s) URL.
    #[error("base_url {value:?} is invalid: it must start with http:// or https://")]
    InvalidBaseUrl {
        /// The rejected value.
        value: String,
    },
    /// A header name or value cannot be sent over HTTP.
    #[error("header {name:?} is invalid: {reason}")]
    InvalidHeader {
        /// The header's name.
        name: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A setting is out of range.
    #[error("{field} = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The setting.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// The allowed range.
        allowed: &'static str,
    },
    /// An environment variable holds something that is not a valid value.
    #[error("environment variable {var}={value:?} is invalid: expected {expected}")]
    InvalidEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// The HTTP client could not be built (TLS setup).
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
}

/// Everything needed to talk to one model on one server.
///
/// Build it with [`OpenAiConfig::new`] and the `with_*` methods, or read it from the
/// environment with [`OpenAiConfig::from_env`]; [`OpenAiConfig::validate`] runs when the
/// model is built.
#[derive(Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Base URL ending before `/chat/completions`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// API key; `None` sends no `Authorization` header worth the name (local servers).
    pub api_key: Option<String>,
    /// OpenAI organization id.
    pub organization: Option<String>,
    /// OpenAI project id.
    pub project: Option<String>,
    /// Extra headers sent with every request (proxies, gateways).
    pub headers: Vec<(String, String)>,
    /// Connect timeout, total timeout of a non-streaming call, and the longest silence
    /// allowed between two reads of a stream.
    pub timeout: Duration,
    /// The model name sent in every request.
    pub model: String,
    /// Provider name reported in profiles and response metadata.
    pub provider: String,
    /// Context window override; `None` uses the built-in table ([`crate::KNOWN_MODELS`]).
    pub context_window: Option<u64>,
    /// Ask streaming servers for a final usage chunk (`stream_options.include_usage`).
    pub stream_usage: bool,
}

impl fmt::Debug for OpenAiConfig {
    // The API key is a secret: logs must never carry it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("organization", &self.organization)
            .field("project", &self.project)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("model", &self.model)
            .field("provider", &self.provider)
            .field("context_window", &self.context_window)
            .field("stream_usage", &self.stream_usage)
            .finish()
    }
}

impl OpenAiConfig {
    /// A configuration for `model` on OpenAI's endpoint with no key.
    pub fn new(model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            organization: None,
            project: None,
            headers: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            model: model.into(),
            provider: String::new(),
            context_window: None,
            stream_usage: true,
        }
    }

    /// Reads the process environment; see [`env`] for the variables.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env) with a custom variable lookup (tests, config files).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut config = OpenAiConfig::new(get(env::MODEL).unwrap_or_default());
        if let Some(url) = get(env::BASE_URL) {
            config.base_url = url;
        }
        config.api_key = get(env::API_KEY);
        config.organization = get(env::ORG_ID);
        config.project = get(env::PROJECT_ID);
        if let Some(v) = get(env::CONTEXT_WINDOW) {
            let n = v.trim().parse::<u64>().ok().filter(|n| *n > 0);
            config.context_window = Some(n.ok_or(ConfigError::InvalidEnv {
                var: env::CONTEXT_WINDOW,
                value: v,
                expected: "a positive whole number of tokens",
            })?);
        }
        if let Some(v) = get(env::TIMEOUT_SECS) {
            let secs = v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0);
            config.timeout = Duration::from_secs_f64(secs.ok_or(ConfigError::InvalidEnv {
                var: env::TIMEOUT_SECS,
                value: v,
                expected: "seconds, greater than 0 and at most 86400",
            })?);
        }
        Ok(config)
    }

    /// Sets the base URL.
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the organization id.
    pub fn with_organization(mut self, org: impl Into<String>) -> Self {
        self.organization = Some(org.into());
        self
    }

    /// Sets the project id.
    pub fn with_project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// Adds a header sent with every request.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the model name.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets the provider name reported in metadata.
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }

    /// Sets the context window in input tokens.
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// Whether to request a usage chunk when streaming (on by default; turn it off for
    /// servers that reject `stream_options`).
    pub fn with_stream_usage(mut self, on: bool) -> Self {
        self.stream_usage = on;
        self
    }

    /// The base URL without a trailing slash.
    pub fn normalized_base_url(&self) -> &str {
        self.base_url.trim().trim_end_matches('/')
    }

    /// The provider name: the configured one, else `openai` for OpenAI's endpoint and
    /// `openai-compatible` for anything else.
    pub fn provider_name(&self) -> String {
        if !self.provider.is_empty() {
            self.provider.clone()
        } else if self.normalized_base_url().contains("://api.openai.com") {
            "openai".to_owned()
        } else {
            "openai-compatible".to_owned()
        }
    }

    /// The context window: the configured one, else the known window of the model
    /// ([`known_model`](crate::known_model)).
    pub fn resolved_context_window(&self) -> Option<u64> {
        self.context_window
            .or_else(|| known_model(&self.model).map(|k| k.context_window))
    }

    /// The model's output limit, from the table, when the window comes from the table
    /// too: a configured window is the server's own (a local server started with a
    /// small context), and the table's limit for the model family may not fit in it.
    pub fn resolved_max_output_tokens(&self) -> Option<u64> {
        match self.context_window {
            Some(_) => None,
            None => known_model(&self.model).and_then(|k| k.max_output_tokens),
        }
    }

    /// Checks every setting; the error names the first that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.model.trim().is_empty() {
            return Err(ConfigError::MissingModel);
        }
        let url = self.normalized_base_url();
        let host = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        if host.is_none_or(str::is_empty) {
            return Err(ConfigError::InvalidBaseUrl {
                value: self.base_url.clone(),
            });
        }
        if self.timeout.is_zero() || self.timeout > Duration::from_secs(86_400) {
            return Err(ConfigError::OutOfRange {
                field: "timeout",
                value: format!("{:?}", self.timeout),
                allowed: "greater than 0 and at most 24 hours",
            });
        }
        if self.context_window == Some(0) {
            return Err(ConfigError::OutOfRange {
                field: "context_window",
                value: "0".to_owned(),
                allowed: "at least 1 token",
            });
        }
        if let Some(key) = &self.api_key {
            // Do not echo the key: the error may be logged.
            HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ConfigError::InvalidHeader {
                    name: "Authorization".to_owned(),
                    reason: "the API key contains characters not allowed in a header \
                             (control characters or newlines)"
                        .to_owned(),
                }
            })?;
        }
        for (name, value) in [
            ("OpenAI-Organization", &self.organization),
            ("OpenAI-Project", &self.project),
        ] {
            if let Some(v) = value {
                check_header(name, v)?;
            }
        }
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        Ok(())
    }
}

fn check_header(name: &str, value: &str) -> Result<(), ConfigError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|e| ConfigError::InvalidHeader {
        name: name.to_owned(),
        reason: format!("not a valid header name: {e}"),
    })?;
    HeaderValue::from_str(value).map_err(|e| ConfigError::InvalidHeader {
        name: name.to_owned(),
        reason: format!("not a valid header value: {e}"),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn reads_the_environment() {
        let c = OpenAiConfig::from_lookup(lookup(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1/"),
            ("OPENAI_API_KEY", "sk-test"),
            ("KEEL_MODEL", "smollm2"),
            ("KEEL_CONTEXT_WINDOW", "2048"),
            ("KEEL_OPENAI_TIMEOUT_SECS", "2.5"),
        ]))
        .unwrap();
        assert_eq!(c.normalized_base_url(), "http://127.0.0.1:8080/v1");
        assert_eq!(c.api_key.as_deref(), Some("sk-test"));
        assert_eq!(c.model, "smollm2");
        assert_eq!(c.resolved_context_window(), Some(2048));
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.provider_name(), "openai-compatible");
        c.validate().unwrap();
    }

    #[test]
    fn defaults_and_known_windows() {
        let c = OpenAiConfig::from_lookup(lookup(&[("KEEL_MODEL", "gpt-4o-mini")])).unwrap();
        assert_eq!(c.normalized_base_url(), DEFAULT_BASE_URL);
        assert_eq!(c.provider_name(), "openai");
        assert_eq!(c.resolved_context_window(), Some(128_000));
        assert_eq!(OpenAiConfig::new("local").resolved_context_window(), None);
    }

    #[test]
    fn bad_values_are_named() {
        let err =
            OpenAiConfig::from_lookup(lookup(&[("KEEL_CONTEXT_WINDOW", "lots")])).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::InvalidEnv {
                var: "KEEL_CONTEXT_WINDOW",
                ..
            }
        ));
        let err =
            OpenAiConfig::from_lookup(lookup(&[("KEEL_OPENAI_TIMEOUT_SECS", "-1")])).unwrap_err();
        assert!(
            err.to_string().contains("KEEL_OPENAI_TIMEOUT_SECS"),
            "{err}"
        );
        assert_eq!(
            OpenAiConfig::from_lookup(lookup(&[])).unwrap().validate(),
            Err(ConfigError::MissingModel)
        );
        let err = OpenAiConfig::new("m")
            .with_base_url("localhost:8080")
            .validate();
        assert!(matches!(err, Err(ConfigError::InvalidBaseUrl { .. })));
        let err = OpenAiConfig::new("m")
            .with_header("x-bad", "a\nb")
            .validate();
        assert!(matches!(err, Err(ConfigError::InvalidHeader { name, .. }) if name == "x-bad"));
        let err = OpenAiConfig::new("m")
            .with_api_key("sk-\nleak")
            .validate()
            .unwrap_err();
        assert!(!err.to_string().contains("leak"), "{err}");
        let err = OpenAiConfig::new("m")
            .with_timeout(Duration::ZERO)
            .validate();
        assert!(matches!(
            err,
            Err(ConfigError::OutOfRange {
                field: "timeout",
                ..
            })
        ));
    }

    #[test]
    fn debug_hides_the_key() {
        let c = OpenAiConfig::new("m").with_api_key("sk-secret");
        assert!(!format!("{c:?}").contains("sk-secret"));
    }
}
