//! Where to export, read from the standard OpenTelemetry variables
//! (<https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/>
//! and <https://opentelemetry.io/docs/specs/otel/protocol/exporter/>).

use std::time::Duration;

/// The base URL of the OTLP/HTTP receiver (`http://127.0.0.1:4318`); the signal paths
/// `/v1/traces` and `/v1/metrics` are appended.
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The `service.name` resource attribute (default `keel`).
pub const SERVICE_NAME_VAR: &str = "OTEL_SERVICE_NAME";
/// `true` turns the exporter off whatever else is set.
pub const SDK_DISABLED_VAR: &str = "OTEL_SDK_DISABLED";
/// `otlp` (the default) or `none`: whether counters are exported too.
pub const METRICS_EXPORTER_VAR: &str = "OTEL_METRICS_EXPORTER";
/// `true` records message content (prompts, answers, tool arguments and results) on
/// the spans; off by default, as the GenAI conventions require.
pub const CAPTURE_CONTENT_VAR: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
/// The export timeout in milliseconds (default 10000).
pub const TIMEOUT_VAR: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";

/// A bad value of a variable or option.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The endpoint is not an `http://` or `https://` URL with a host.
    #[error(
        "{variable} = {value:?}: expected an http:// or https:// URL with a host, such as http://127.0.0.1:4318"
    )]
    Endpoint {
        /// The variable or option (`OTEL_EXPORTER_OTLP_ENDPOINT`, `--otlp`).
        variable: String,
        /// The value given.
        value: String,
    },
    /// A value outside the allowed ones.
    #[error("{variable} = {value:?}: allowed values are {allowed}")]
    Value {
        /// The variable.
        variable: &'static str,
        /// The value given.
        value: String,
        /// What it may be.
        allowed: &'static str,
    },
}

/// Where and what to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtelConfig {
    /// The receiver's base URL, without a trailing slash.
    pub endpoint: String,
    /// The `service.name` of the spans.
    pub service_name: String,
    /// Whether counters are exported (to `{endpoint}/v1/metrics`).
    pub metrics: bool,
    /// Whether message content is recorded.
    pub capture_content: bool,
    /// How long one export may take.
    pub timeout: Duration,
}

impl OtelConfig {
    /// The configuration the environment asks for, or `None` when it asks for no
    /// export: `OTEL_EXPORTER_OTLP_ENDPOINT` unset or empty, or `OTEL_SDK_DISABLED=true`.
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok(), None)
    }

    /// The environment's configuration with `endpoint` (the `--otlp` option) in place of
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; `None` only under `OTEL_SDK_DISABLED=true`.
    pub fn from_env_with_endpoint(endpoint: &str) -> Result<Option<Self>, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok(), Some(endpoint))
    }

    /// [`from_env`](Self::from_env) with the variables read through `var`, and an
    /// endpoint given by an option (`--otlp`) taking precedence over the variable.
    pub fn from_lookup(
        var: impl Fn(&str) -> Option<String>,
        option: Option<&str>,
    ) -> Result<Option<Self>, ConfigError> {
        if flag(&var, SDK_DISABLED_VAR)? {
            return Ok(None);
        }
        let (variable, endpoint) = match option {
            Some(value) => ("--otlp", value.to_owned()),
            None => match var(ENDPOINT_VAR).filter(|v| !v.trim().is_empty()) {
                Some(value) => (ENDPOINT_VAR, value),
                None => return Ok(None),
            },
        };
        let endpoint = check_endpoint(variable, endpoint.trim())?;
        let metrics = match var(METRICS_EXPORTER_VAR).as_deref().map(str::trim) {
            None | Some("") | Some("otlp") => true,
            Some("none") => false,
            Some(other) => {
                return Err(ConfigError::Value {
                    variable: METRICS_EXPORTER_VAR,
                    value: other.to_owned(),
                    allowed: "otlp, none",
                });
            }
        };
        let timeout = match var(TIMEOUT_VAR).filter(|v| !v.trim().is_empty()) {
            None => Duration::from_secs(10),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(ms) if (1..=600_000).contains(&ms) => Duration::from_millis(ms),
                _ => {
                    return Err(ConfigError::Value {
                        variable: TIMEOUT_VAR,
                        value: v,
                        allowed: "a whole number of milliseconds from 1 to 600000",
                    });
                }
            },
        };
        Ok(Some(OtelConfig {
            endpoint,
            service_name: var(SERVICE_NAME_VAR)
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "keel".to_owned()),
            metrics,
            capture_content: flag(&var, CAPTURE_CONTENT_VAR)?,
            timeout,
        }))
    }

    /// The URL of one signal (`traces`, `metrics`).
    pub fn signal_endpoint(&self, signal: &str) -> String {
        format!("{}/v1/{signal}", self.endpoint)
    }
}

fn flag(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<bool, ConfigError> {
    match var(name).as_deref().map(str::trim) {
        None | Some("") => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(ConfigError::Value {
            variable: name,
            value: v.to_owned(),
            allowed: "true, false",
        }),
    }
}

fn check_endpoint(variable: &str, value: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::Endpoint {
        variable: variable.to_owned(),
        value: value.to_owned(),
    };
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
        .ok_or_else(bad)?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || host.starts_with(':') || rest.contains(char::is_whitespace) {
        return Err(bad());
    }
    Ok(value.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint_or_when_disabled() {
        assert_eq!(OtelConfig::from_lookup(env(&[]), None), Ok(None));
        assert_eq!(
            OtelConfig::from_lookup(env(&[(ENDPOINT_VAR, " ")]), None),
            Ok(None)
        );
        let disabled = [
            (ENDPOINT_VAR, "http://127.0.0.1:4318"),
            (SDK_DISABLED_VAR, "true"),
        ];
        assert_eq!(
            OtelConfig::from_lookup(env(&disabled), Some("http://x:1")),
            Ok(None)
        );
    }

    #[test]
    fn the_standard_variables_configure_it_and_the_option_wins() {
        let vars = [
            (ENDPOINT_VAR, "http://127.0.0.1:6006/"),
            (SERVICE_NAME_VAR, "support-bot"),
            (METRICS_EXPORTER_VAR, "none"),
            (CAPTURE_CONTENT_VAR, "TRUE"),
            (TIMEOUT_VAR, "2500"),
        ];
        let config = OtelConfig::from_lookup(env(&vars), None).unwrap().unwrap();
        assert_eq!(config.endpoint, "http://127.0.0.1:6006");
        assert_eq!(
            config.signal_endpoint("traces"),
            "http://127.0.0.1:6006/v1/traces"
        );
        assert_eq!(config.service_name, "support-bot");
        assert!(!config.metrics);
        assert!(config.capture_content);
        assert_eq!(config.timeout, Duration::from_millis(2500));
        let option = OtelConfig::from_lookup(env(&vars), Some("https://collector:4318"))
            .unwrap()
            .unwrap();
        assert_eq!(option.endpoint, "https://collector:4318");
        let defaults = OtelConfig::from_lookup(env(&[]), Some("http://h:1"))
            .unwrap()
            .unwrap();
        assert_eq!(defaults.service_name, "keel");
        assert!(defaults.metrics && !defaults.capture_content);
    }

    #[test]
    fn bad_values_name_the_variable_the_value_and_what_is_allowed() {
        let err = OtelConfig::from_lookup(env(&[]), Some("127.0.0.1:4318")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--otlp = \"127.0.0.1:4318\": expected an http:// or https:// URL with a host, such as http://127.0.0.1:4318"
        );
        for bad in ["http://", "http://:4318", "ftp://h", "http://h x"] {
            assert!(
                OtelConfig::from_lookup(env(&[(ENDPOINT_VAR, bad)]), None).is_err(),
                "{bad}"
            );
        }
        let base = (ENDPOINT_VAR, "http://h:1");
        let err = OtelConfig::from_lookup(env(&[base, (METRICS_EXPORTER_VAR, "prometheus")]), None)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "OTEL_METRICS_EXPORTER = \"prometheus\": allowed values are otlp, none"
        );
        let err =
            OtelConfig::from_lookup(env(&[base, (CAPTURE_CONTENT_VAR, "yes")]), None).unwrap_err();
        assert!(
            err.to_string().contains("allowed values are true, false"),
            "{err}"
        );
        let err = OtelConfig::from_lookup(env(&[base, (TIMEOUT_VAR, "0")]), None).unwrap_err();
        assert!(err.to_string().contains("from 1 to 600000"), "{err}");
    }
}
