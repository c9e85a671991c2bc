//! Classifying Anthropic's errors into [`ModelErrorKind`]s the middleware acts on.
//!
//! The Messages API answers a failure with
//! `{"type": "error", "error": {"type": "...", "message": "..."}, "request_id": "..."}`
//! and the same object arrives as an `event: error` frame inside a stream that has
//! already started (<https://docs.anthropic.com/en/api/errors>). The `error.type`
//! decides the kind, the HTTP status when the type is missing (a proxy's own error):
//!
//! | type | status | kind |
//! |---|---|---|
//! | `invalid_request_error` | 400 | invalid request, with the API's message |
//! | ... "prompt is too long: N tokens > M maximum" | 400 | context overflow, with N and M |
//! | `authentication_error`, `permission_error` | 401, 403 | authentication |
//! | `not_found_error`, `billing_error` | 404, 402 | invalid request |
//! | `request_too_large` | 413 | context overflow (the request is over the byte limit) |
//! | `rate_limit_error` | 429 | rate limited, waiting `retry-after` |
//! | `api_error` | 500 | server |
//! | `timeout_error` | 504 | timeout |
//! | `overloaded_error` | 529 | server: retried as a 503 is |

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use keel_core::model::{ModelError, ModelErrorKind, OverflowFigures};
use serde_json::Value;

/// Lower-cased phrasings of a context overflow: Anthropic's own, and how proxies in
/// front of another backend word theirs.
const OVERFLOW_PHRASES: &[&str] = &[
    "prompt is too long",
    "input is too long",
    "exceed context limit",
    "maximum context length",
    "context_length_exceeded",
    "context window",
    "exceeds the available context size",
];

/// Maps an HTTP error answer to a typed error. `retry_after` comes from the response
/// headers.
///
/// ```
/// use keel_anthropic::classify_http;
/// use keel_core::model::ModelErrorKind;
/// let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
/// assert_eq!(classify_http(529, None, body).kind, ModelErrorKind::Server);
/// let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
/// let err = classify_http(400, None, body);
/// assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
/// assert_eq!(err.overflow.unwrap().sent_tokens, Some(208_310));
/// ```
pub fn classify_http(status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    classify(Some(status), retry_after, parsed.as_ref(), body)
}

/// Classifies an error object that arrived as a stream's `event: error` frame (or in a
/// 200 answer): the status is implied by its type.
pub fn classify_error_object(value: &Value, raw: &str) -> ModelError {
    classify(None, None, Some(value), raw)
}

/// True when a decoded answer or event is an error report.
pub(crate) fn is_error_object(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("error")
        || v.get("error").is_some_and(|e| !e.is_null())
}

fn classify(
    status: Option<u16>,
    retry_after: Option<Duration>,
    parsed: Option<&Value>,
    body: &str,
) -> ModelError {
    let error = parsed.map(|v| match v.get("error") {
        Some(inner @ Value::Object(_)) => inner,
        _ => v,
    });
    let kind_text = error
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .filter(|t| *t != "error");
    let message = error
        .and_then(|e| e.get("message"))
        .map(|m| match m {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .or_else(|| {
            parsed
                .and_then(|v| v.get("error"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| {
            let trimmed = body.trim();
            if trimmed.is_empty() {
                "an empty error body".to_owned()
            } else {
                trimmed.to_owned()
            }
        });
    let status = status.or(match kind_text {
        Some("invalid_request_error") => Some(400),
        Some("authentication_error") => Some(401),
        Some("billing_error") => Some(402),
        Some("permission_error") => Some(403),
        Some("not_found_error") => Some(404),
        Some("request_too_large") => Some(413),
        Some("rate_limit_error") => Some(429),
        Some("api_error") => Some(500),
        Some("timeout_error") => Some(504),
        Some("overloaded_error") => Some(529),
        _ => None,
    });
    let kind = if is_context_overflow(&message) || kind_text == Some("request_too_large") {
        ModelErrorKind::ContextOverflow
    } else {
        match (kind_text, status) {
            (Some("overloaded_error" | "api_error"), _) => ModelErrorKind::Server,
            (Some("rate_limit_error"), _) => ModelErrorKind::RateLimited,
            (Some("timeout_error"), _) => ModelErrorKind::Timeout,
            (Some("authentication_error" | "permission_error"), _) => {
                ModelErrorKind::Authentication
            }
            (Some("invalid_request_error" | "not_found_error" | "billing_error"), _) => {
                ModelErrorKind::InvalidRequest
            }
            (_, Some(401 | 403)) => ModelErrorKind::Authentication,
            (_, Some(413)) => ModelErrorKind::ContextOverflow,
            (_, Some(429)) => ModelErrorKind::RateLimited,
            (_, Some(408)) => ModelErrorKind::Timeout,
            (_, Some(500..=599) | None) => ModelErrorKind::Server,
            _ => ModelErrorKind::InvalidRequest,
        }
    };
    let label = match (status, kind_text) {
        (Some(s), Some(t)) => format!("HTTP {s} {t}"),
        (Some(s), None) => format!("HTTP {s}"),
        (None, Some(t)) => t.to_owned(),
        (None, None) => "error".to_owned(),
    };
    let mut err = ModelError::new(kind, format!("{label}: {message}")).with_raw(body);
    if kind == ModelErrorKind::ContextOverflow {
        err = err.with_overflow(overflow_figures(&message));
    }
    if matches!(kind, ModelErrorKind::RateLimited | ModelErrorKind::Server)
        && let Some(wait) = retry_after
    {
        err = err.with_retry_after(wait);
    }
    err
}

/// True when `message` is a phrasing of a context-window overflow.
pub fn is_context_overflow(message: &str) -> bool {
    let lower = message.to_lowercase();
    OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
}

/// The tokens sent and the window of Anthropic's
/// `prompt is too long: 208310 tokens > 200000 maximum`.
pub fn overflow_figures(message: &str) -> OverflowFigures {
    let lower = message.to_lowercase();
    let after = |marker: &str| {
        lower
            .find(marker)
            .and_then(|at| leading_number(&lower[at + marker.len()..]))
    };
    OverflowFigures {
        sent_tokens: after("prompt is too long: "),
        window_tokens: after("tokens > "),
    }
}

fn leading_number(text: &str) -> Option<u64> {
    let digits: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '_')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The wait a `retry-after` header asks for: seconds, or an HTTP date.
pub(crate) fn retry_after_from_headers(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, SystemTime::now())
}

fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate_to_unix(value)?;
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Seconds since the epoch of an IMF-fixdate (`Wed, 21 Oct 2015 07:28:00 GMT`).
fn httpdate_to_unix(text: &str) -> Option<u64> {
    let mut parts = text.split_whitespace();
    let _weekday = parts.next()?;
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|p| p.parse::<u64>().ok());
    let (h, mi, s) = (hms.next()??, hms.next()??, hms.next()??);
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * mo as i64 + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days)
        .ok()
        .map(|d| d * 86_400 + h * 3600 + mi * 60 + s)
}

/// Maps a transport failure: timeouts and connection failures are retryable kinds.
pub(crate) fn from_reqwest(e: &reqwest::Error) -> ModelError {
    let kind = if e.is_timeout() {
        ModelErrorKind::Timeout
    } else if e.is_decode() {
        ModelErrorKind::MalformedResponse
    } else if e.is_builder() {
        ModelErrorKind::InvalidRequest
    } else {
        ModelErrorKind::Connection
    };
    // reqwest's Display hides the cause ("error sending request"); the chain says why.
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    ModelError::new(kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error type of <https://docs.anthropic.com/en/api/errors>, as the API sends it.
    #[test]
    fn each_documented_error_type() {
        for (status, kind, want) in [
            (400, "invalid_request_error", ModelErrorKind::InvalidRequest),
            (401, "authentication_error", ModelErrorKind::Authentication),
            (402, "billing_error", ModelErrorKind::InvalidRequest),
            (403, "permission_error", ModelErrorKind::Authentication),
            (404, "not_found_error", ModelErrorKind::InvalidRequest),
            (413, "request_too_large", ModelErrorKind::ContextOverflow),
            (429, "rate_limit_error", ModelErrorKind::RateLimited),
            (500, "api_error", ModelErrorKind::Server),
            (504, "timeout_error", ModelErrorKind::Timeout),
            (529, "overloaded_error", ModelErrorKind::Server),
        ] {
            let body = format!(
                r#"{{"type":"error","error":{{"type":"{kind}","message":"Something about {kind}"}},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}}"#
            );
            let err = classify_http(status, Some(Duration::from_secs(7)), &body);
            assert_eq!(err.kind, want, "{kind}");
            assert!(
                err.message.contains(&format!("Something about {kind}")),
                "{}",
                err.message
            );
            assert_eq!(err.raw.as_deref(), Some(body.as_str()));
            // The same object as a stream's error event.
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(classify_error_object(&v, &body).kind, want, "{kind} event");
        }
    }

    #[test]
    fn retry_after_and_overflow() {
        let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
        let err = classify_http(429, Some(Duration::from_secs(12)), body);
        assert_eq!(err.retry_after, Some(Duration::from_secs(12)));
        assert!(err.is_retryable());
        let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert!(classify_http(529, None, body).is_retryable());
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208,310 tokens > 200,000 maximum"}}"#;
        let err = classify_http(400, None, body);
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
        let figures = err.overflow.unwrap();
        assert_eq!(
            (figures.sent_tokens, figures.window_tokens),
            (Some(208_310), Some(200_000))
        );
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.tool_use.id: Field required"}}"#;
        let err = classify_http(400, None, body);
        assert_eq!(err.kind, ModelErrorKind::InvalidRequest);
        assert!(
            err.message
                .contains("messages.1.content.0.tool_use.id: Field required")
        );
        // A proxy's plain-text 502 and an empty 503.
        assert_eq!(
            classify_http(502, None, "Bad Gateway").kind,
            ModelErrorKind::Server
        );
        assert!(
            classify_http(503, None, "")
                .message
                .contains("an empty error body")
        );
        // LiteLLM's own error shape.
        let litellm = r#"{"error":{"message":"Authentication Error, Invalid proxy server token passed","type":"auth_error","param":"None","code":"401"}}"#;
        assert_eq!(
            classify_http(401, None, litellm).kind,
            ModelErrorKind::Authentication
        );
    }

    #[test]
    fn http_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_470);
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
