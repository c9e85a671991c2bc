//! Where and how to reach Anthropic's Messages API (or a server speaking it), from code
//! or the environment.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};

use crate::profile::known_model;

/// Anthropic's public endpoint, used when no base URL is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header sent with every request: the Messages API's only
/// version (<https://docs.anthropic.com/en/api/versioning>).
pub const DEFAULT_API_VERSION: &str = "2023-06-01";

/// The time allowed for a whole non-streaming call, for connecting, and between two
/// reads of a streamed answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// `max_tokens` sent when neither the request nor the configuration sets one and the
/// model's own output limit is higher (or unknown). The Messages API requires the field;
/// a long answer without streaming may outlast HTTP timeouts, so the default stays
/// modest and a request that wants more says so.
pub const DEFAULT_MAX_TOKENS: u32 = 8_192;

/// Environment variables [`AnthropicConfig::from_env`] reads.
pub mod env {
    /// Base URL of the server, e.g. `http://127.0.0.1:4000` (the adapter posts to
    /// `{base}/v1/messages`; a base ending in `/v1` is taken as is).
    pub const BASE_URL: &str = "ANTHROPIC_BASE_URL";
    /// Secret key, sent as `x-api-key`.
    pub const API_KEY: &str = "ANTHROPIC_API_KEY";
    /// The model name; required unless set in code.
    pub const MODEL: &str = "KEEL_MODEL";
    /// Context window in input tokens, for models the built-in table does not know.
    pub const CONTEXT_WINDOW: &str = "KEEL_CONTEXT_WINDOW";
    /// Timeout in seconds (decimals allowed).
    pub const TIMEOUT_SECS: &str = "KEEL_ANTHROPIC_TIMEOUT_SECS";
    /// Prompt-cache lifetime: `5m` (default), `1h`, or `off` for no breakpoints.
    pub const CACHE_TTL: &str = "KEEL_ANTHROPIC_CACHE_TTL";
}

/// How long a prompt-cache entry lives after its last use
/// (<https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching>).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheTtl {
    /// Five minutes, refreshed on every hit; writes bill at 1.25x the input price.
    #[default]
    FiveMinutes,
    /// One hour; writes bill at 2x the input price.
    OneHour,
}

impl CacheTtl {
    /// Reads `5m` or `1h`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "5m" => Some(CacheTtl::FiveMinutes),
            "1h" => Some(CacheTtl::OneHour),
            _ => None,
        }
    }

    /// `5m` or `1h`, as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheTtl::FiveMinutes => "5m",
            CacheTtl::OneHour => "1h",
        }
    }
}

/// A configuration that cannot work. Each variant names the setting and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No model name was given in code or in `KEEL_MODEL`.
    #[error("no model name: set it with .with_model(..) or the KEEL_MODEL environment variable")]
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

/// Everything needed to talk to one Claude model on one server.
///
/// Build it with [`AnthropicConfig::new`] and the `with_*` methods, or read it from the
/// environment with [`AnthropicConfig::from_env`]; [`AnthropicConfig::validate`] runs
/// when the model is built.
#[derive(Clone, PartialEq)]
pub struct AnthropicConfig {
    /// Base URL before `/v1/messages`, e.g. `https://api.anthropic.com`.
    pub base_url: String,
    /// API key, sent as `x-api-key`; `None` sends none (local proxies).
    pub api_key: Option<String>,
    /// The `anthropic-version` header.
    pub api_version: String,
    /// `anthropic-beta` flags, sent comma-separated when there are any.
    pub betas: Vec<String>,
    /// Extra headers sent with every request (proxies, gateways).
    pub headers: Vec<(String, String)>,
    /// Connect timeout, total timeout of a non-streaming call, and the longest silence
    /// allowed between two reads of a stream.
    pub timeout: Duration,
    /// The model name sent in every request.
    pub model: String,
    /// Provider name reported in profiles and response metadata (`anthropic`).
    pub provider: String,
    /// Context window override; `None` uses the built-in table ([`crate::KNOWN_MODELS`]).
    pub context_window: Option<u64>,
    /// `max_tokens` for requests that set none; `None` uses the model's output limit
    /// capped at [`DEFAULT_MAX_TOKENS`].
    pub max_tokens: Option<u32>,
    /// Prompt-cache breakpoints' lifetime; `None` places no breakpoint at all.
    pub cache_ttl: Option<CacheTtl>,
}

impl fmt::Debug for AnthropicConfig {
    // The API key is a secret: logs must never carry it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_version", &self.api_version)
            .field("betas", &self.betas)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("model", &self.model)
            .field("provider", &self.provider)
            .field("context_window", &self.context_window)
            .field("max_tokens", &self.max_tokens)
            .field("cache_ttl", &self.cache_ttl)
            .finish()
    }
}

impl AnthropicConfig {
    /// A configuration for `model` on Anthropic's endpoint with no key, caching with
    /// the 5-minute lifetime.
    pub fn new(model: impl Into<String>) -> Self {
        AnthropicConfig {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            api_version: DEFAULT_API_VERSION.to_owned(),
            betas: Vec::new(),
            headers: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            model: model.into(),
            provider: "anthropic".to_owned(),
            context_window: None,
            max_tokens: None,
            cache_ttl: Some(CacheTtl::FiveMinutes),
        }
    }

    /// Reads the process environment; see [`env`] for the variables.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env) with a custom variable lookup (tests, config files).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut config = AnthropicConfig::new(get(env::MODEL).unwrap_or_default());
        if let Some(url) = get(env::BASE_URL) {
            config.base_url = url;
        }
        config.api_key = get(env::API_KEY);
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
        if let Some(v) = get(env::CACHE_TTL) {
            config.cache_ttl = match v.trim() {
                "off" => None,
                other => Some(CacheTtl::parse(other).ok_or(ConfigError::InvalidEnv {
                    var: env::CACHE_TTL,
                    value: v.clone(),
                    expected: "5m, 1h or off",
                })?),
            };
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

    /// Sets the `anthropic-version` header.
    pub fn with_api_version(mut self, version: impl Into<String>) -> Self {
        self.api_version = version.into();
        self
    }

    /// Adds an `anthropic-beta` flag.
    pub fn with_beta(mut self, flag: impl Into<String>) -> Self {
        self.betas.push(flag.into());
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

    /// Sets `max_tokens` for requests that set none.
    pub fn with_max_tokens(mut self, tokens: u32) -> Self {
        self.max_tokens = Some(tokens);
        self
    }

    /// Sets the prompt-cache lifetime; `None` places no breakpoint.
    pub fn with_cache_ttl(mut self, ttl: Option<CacheTtl>) -> Self {
        self.cache_ttl = ttl;
        self
    }

    /// The base URL without a trailing slash.
    pub fn normalized_base_url(&self) -> &str {
        self.base_url.trim().trim_end_matches('/')
    }

    /// The Messages endpoint: `{base}/v1/messages`, or `{base}/messages` when the base
    /// already ends in `/v1`.
    pub fn messages_url(&self) -> String {
        let base = self.normalized_base_url();
        if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        }
    }

    /// The context window: the configured one, else the known window of the model.
    pub fn resolved_context_window(&self) -> Option<u64> {
        self.context_window
            .or_else(|| known_model(&self.model).map(|k| k.context_window))
    }

    /// The `max_tokens` sent when a request sets none: the configured one, else the
    /// model's output limit capped at [`DEFAULT_MAX_TOKENS`].
    pub fn default_max_tokens(&self) -> u32 {
        self.max_tokens.unwrap_or_else(|| {
            known_model(&self.model)
                .and_then(|k| u32::try_from(k.max_output_tokens).ok())
                .map_or(DEFAULT_MAX_TOKENS, |n| n.min(DEFAULT_MAX_TOKENS))
        })
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
        if self.max_tokens == Some(0) {
            return Err(ConfigError::OutOfRange {
                field: "max_tokens",
                value: "0".to_owned(),
                allowed: "at least 1 token",
            });
        }
        if let Some(key) = &self.api_key {
            // Do not echo the key: the error may be logged.
            HeaderValue::from_str(key).map_err(|_| ConfigError::InvalidHeader {
                name: "x-api-key".to_owned(),
                reason: "the API key contains characters not allowed in a header \
                         (control characters or newlines)"
                    .to_owned(),
            })?;
        }
        check_header("anthropic-version", &self.api_version)?;
        check_header("anthropic-beta", &self.betas.join(","))?;
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        Ok(())
    }

    /// Every header a request carries (the key included), checked.
    pub(crate) fn header_map(&self) -> Result<reqwest::header::HeaderMap, ConfigError> {
        let mut map = reqwest::header::HeaderMap::new();
        let mut put = |name: &str, value: &str, secret: bool| -> Result<(), ConfigError> {
            let (n, mut v) = check_header(name, value)?;
            v.set_sensitive(secret);
            map.append(n, v);
            Ok(())
        };
        put("anthropic-version", &self.api_version, false)?;
        if !self.betas.is_empty() {
            put("anthropic-beta", &self.betas.join(","), false)?;
        }
        if let Some(key) = &self.api_key {
            put("x-api-key", key, true).map_err(|_| ConfigError::InvalidHeader {
                name: "x-api-key".to_owned(),
                reason: "the API key contains characters not allowed in a header".to_owned(),
            })?;
        }
        for (name, value) in &self.headers {
            put(name, value, false)?;
        }
        Ok(map)
    }
}

fn check_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), ConfigError> {
    let n = HeaderName::from_bytes(name.as_bytes()).map_err(|e| ConfigError::InvalidHeader {
        name: name.to_owned(),
        reason: format!("not a valid header name: {e}"),
    })?;
    let v = HeaderValue::from_str(value).map_err(|e| ConfigError::InvalidHeader {
        name: name.to_owned(),
        reason: format!("not a valid header value: {e}"),
    })?;
    Ok((n, v))
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
        let c = AnthropicConfig::from_lookup(lookup(&[
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:4000/"),
            ("ANTHROPIC_API_KEY", "sk-ant-test"),
            ("KEEL_MODEL", "claude-sonnet-4-5"),
            ("KEEL_ANTHROPIC_TIMEOUT_SECS", "2.5"),
            ("KEEL_ANTHROPIC_CACHE_TTL", "1h"),
            // The OpenAI adapter's variables are not read.
            ("OPENAI_API_KEY", "sk-openai"),
        ]))
        .unwrap();
        assert_eq!(c.messages_url(), "http://127.0.0.1:4000/v1/messages");
        assert_eq!(c.api_key.as_deref(), Some("sk-ant-test"));
        assert_eq!(c.resolved_context_window(), Some(200_000));
        assert_eq!(c.default_max_tokens(), DEFAULT_MAX_TOKENS);
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.cache_ttl, Some(CacheTtl::OneHour));
        c.validate().unwrap();
        let c = AnthropicConfig::new("m").with_base_url("https://gw.example/anthropic/v1");
        assert_eq!(c.messages_url(), "https://gw.example/anthropic/v1/messages");
        let off =
            AnthropicConfig::from_lookup(lookup(&[("KEEL_ANTHROPIC_CACHE_TTL", "off")])).unwrap();
        assert_eq!(off.cache_ttl, None);
    }

    #[test]
    fn bad_values_are_named() {
        let err = AnthropicConfig::from_lookup(lookup(&[("KEEL_ANTHROPIC_CACHE_TTL", "10m")]))
            .unwrap_err();
        assert!(err.to_string().contains("5m, 1h or off"), "{err}");
        assert_eq!(
            AnthropicConfig::from_lookup(lookup(&[]))
                .unwrap()
                .validate(),
            Err(ConfigError::MissingModel)
        );
        let err = AnthropicConfig::new("m")
            .with_base_url("localhost:4000")
            .validate();
        assert!(matches!(err, Err(ConfigError::InvalidBaseUrl { .. })));
        let err = AnthropicConfig::new("m")
            .with_api_key("sk-\nleak")
            .validate()
            .unwrap_err();
        assert!(!err.to_string().contains("leak"), "{err}");
        let err = AnthropicConfig::new("m").with_max_tokens(0).validate();
        assert!(matches!(
            err,
            Err(ConfigError::OutOfRange {
                field: "max_tokens",
                ..
            })
        ));
    }

    #[test]
    fn debug_hides_the_key_and_small_models_keep_their_limit() {
        let c = AnthropicConfig::new("claude-3-haiku-20240307").with_api_key("sk-secret");
        assert!(!format!("{c:?}").contains("sk-secret"));
        assert_eq!(c.default_max_tokens(), 4_096);
        assert_eq!(
            AnthropicConfig::new("local").default_max_tokens(),
            DEFAULT_MAX_TOKENS
        );
    }
}
