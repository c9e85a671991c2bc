//! Classifying failures into [`ModelErrorKind`]s the middleware can act on.
//!
//! OpenAI-compatible servers disagree on error shapes: OpenAI and llama-cpp-python send
//! `{"error": {"message", "type", "code": "context_length_exceeded"}}`, vLLM sends
//! `{"object": "error", "message", "code": 400}` (newer versions wrap it in `error`),
//! llama.cpp's own server sends `{"error": {"code": 400, "type": "exceed_context_size_error"}}`
//! and Ollama sends `{"error": "..."}`. [`classify_http`] reads all of them; the status code
//! decides the kind except for context overflow, which is recognised from codes and
//! phrasings first because several servers report it as a plain 400 or even a 500.
//!
//! Overflow also arrives in shapes that are not a plain 400:
//! - OpenAI's 429 for a single request larger than the deployment's tokens-per-minute
//!   limit ("Request too large for gpt-4o ... on tokens per min (TPM): Limit 30000,
//!   Requested 36278. The input or output tokens must be reduced"): waiting never
//!   helps, a smaller request does.
//! - Gateways relaying Anthropic's `prompt is too long: N tokens > M maximum`: LiteLLM
//!   inside its own message, OpenRouter as "Provider returned error" with the
//!   provider's body in `error.metadata.raw`.
//! - Google's OpenAI-compatible endpoint, which wraps the error object in a list.
//! - An error event inside a 200 stream: `data: {"error": {...}}` (OpenAI, OpenRouter,
//!   LiteLLM, vLLM) or an `event: error` frame whose data is `{"type": "error", ...}`
//!   (Anthropic-style and Responses-style streams, Bedrock through proxies).
//!
//! The figures in the provider's message (tokens sent, the window) are read into
//! [`ModelError::overflow`] by [`overflow_figures`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_openai::error::OpenAIError;
use keel_core::model::{ModelError, ModelErrorKind, OverflowFigures};
use serde_json::Value;

/// Error codes and types that mean "the request does not fit the context window".
const OVERFLOW_CODES: &[&str] = &[
    "context_length_exceeded",
    "exceed_context_size_error",
    "context_window_exceeded",
    "string_above_max_length",
];

/// Lower-cased phrasings of context overflow, as servers word them.
const OVERFLOW_PHRASES: &[&str] = &[
    // OpenAI, vLLM and llama-cpp-python.
    "maximum context length",
    "context_length_exceeded",
    "reduce the length of the messages",
    // llama.cpp server.
    "exceeds the available context size",
    "exceed context window",
    "exceeds the context window",
    "context window exceeded",
    // LM Studio, Ollama, TGI and Anthropic-style proxies.
    "context length exceeded",
    "context size has been exceeded",
    "is longer than the model's context length",
    "input is too long",
    "prompt is too long",
    "input validation error: `inputs` tokens + `max_new_tokens`",
    // Google's Gemini API and its OpenAI-compatible endpoint.
    "exceeds the maximum number of tokens allowed",
    // GitHub Models and Azure AI model inference (413 `tokens_limit_reached`).
    "request body too large",
];

/// Lower-cased phrasings of a 429 that no wait can fix: one request larger than the
/// deployment's per-minute token limit. Compacting it is the only way through.
const TOO_LARGE_FOR_RATE_PHRASES: &[&str] = &[
    "request too large for",
    "the input or output tokens must be reduced",
];

/// A non-success HTTP answer, captured with its status, retry hint and raw body before
/// async-openai would drop the headers. Travels inside [`OpenAIError::Boxed`].
#[derive(Debug, thiserror::Error)]
#[error("HTTP {status}: {body}")]
pub(crate) struct HttpFailure {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) body: String,
}

/// Maps an HTTP error answer to a typed error. `retry_after` comes from the response
/// headers; when absent, a "try again in 20s" hint in the message is used.
pub fn classify_http(status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    classify(status, retry_after, parsed.as_ref(), body)
}

fn classify(
    status: u16,
    retry_after: Option<Duration>,
    parsed: Option<&Value>,
    body: &str,
) -> ModelError {
    // Google's OpenAI-compatible endpoint answers `[{"error": {...}}]`.
    let parsed = match parsed {
        Some(Value::Array(items)) => items.first(),
        other => other,
    };
    let detail = parsed.map(ErrorDetail::from_json).unwrap_or_default();
    let message = detail
        .message
        .clone()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| {
            let trimmed = body.trim();
            if trimmed.is_empty() {
                format!("HTTP {status} with an empty body")
            } else {
                trimmed.to_owned()
            }
        });
    let relayed = detail.relayed.as_deref().unwrap_or_default();
    let too_large_for_rate = status == 429 && is_too_large_for_rate(&message);
    let kind = if detail.is_overflow()
        || is_context_overflow(&message)
        || is_context_overflow(relayed)
        || too_large_for_rate
        || status == 413
    {
        ModelErrorKind::ContextOverflow
    } else {
        match status {
            401 | 403 => ModelErrorKind::Authentication,
            // Exhausted billing quota comes as a 429 but waiting does not fix it.
            429 if detail.code.as_deref() == Some("insufficient_quota") => {
                ModelErrorKind::InvalidRequest
            }
            429 => ModelErrorKind::RateLimited,
            408 => ModelErrorKind::Timeout,
            500..=599 => ModelErrorKind::Server,
            _ => ModelErrorKind::InvalidRequest,
        }
    };
    let mut err = ModelError::new(kind, format!("HTTP {status}: {message}")).with_raw(body);
    if kind == ModelErrorKind::ContextOverflow {
        let figures = overflow_figures(&message)
            .or(overflow_figures(relayed))
            .or(detail.figures);
        err = err.with_overflow(figures);
    }
    if kind == ModelErrorKind::RateLimited
        && let Some(wait) = retry_after.or_else(|| retry_hint_in_message(&message))
    {
        err = err.with_retry_after(wait);
    }
    err
}

/// Classifies an `{"error": ...}` object that arrived inside a 200 answer or an SSE
/// event. The status comes from a numeric `code` when the server put one there.
pub fn classify_error_object(value: &Value, raw: &str) -> ModelError {
    let status = ErrorDetail::from_json(value).status.unwrap_or(500);
    classify(status, None, Some(value), raw)
}

/// True when a decoded JSON answer or stream event is an error report rather than a
/// completion: an `error` member that is not `null` (OpenAI, OpenRouter, LiteLLM,
/// vLLM, llama.cpp), or a bare error object (`{"type": "error", ...}` as Anthropic-style
/// and Responses-style `event: error` frames carry, `{"object": "error", ...}` as
/// older vLLM sends).
pub(crate) fn is_error_object(v: &Value) -> bool {
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return true;
    }
    let tag = |k: &str| v.get(k).and_then(Value::as_str) == Some("error");
    (tag("type") || tag("object")) && v.get("choices").is_none()
}

/// True when `message` is one of the known phrasings of a context-window overflow.
pub fn is_context_overflow(message: &str) -> bool {
    let lower = message.to_lowercase();
    OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
}

/// True when a 429's `message` says the one request is over the per-minute token limit
/// (so no wait helps), as OpenAI words it (and OpenAI-style deployments that relay its
/// wording).
fn is_too_large_for_rate(message: &str) -> bool {
    let lower = message.to_lowercase();
    TOO_LARGE_FOR_RATE_PHRASES.iter().any(|p| lower.contains(p))
}

/// Phrases after which a provider states the tokens it was sent, lower-cased.
const SENT_MARKERS: &[&str] = &[
    "prompt is too long: ",       // Anthropic: `N tokens > M maximum`
    "your messages resulted in ", // OpenAI
    "you requested about ",       // OpenRouter
    "you requested ",             // vLLM
    "your request has ",          // vLLM, output-cap form
    "requested tokens (",         // llama-cpp-python
    "the input token count (",    // Google
    ", requested ",               // OpenAI tokens-per-minute 429
    "input length ",              // TGI-style
];

/// Phrases after which a provider states the window (or the per-request limit).
const WINDOW_MARKERS: &[&str] = &[
    "tokens > ",                          // Anthropic: `N tokens > M maximum`
    "maximum context length is ",         // OpenAI, vLLM, OpenRouter
    "exceed context window of ",          // llama-cpp-python
    "maximum number of tokens allowed (", // Google
    "(tpm): limit ",                      // OpenAI tokens-per-minute 429
    "max size: ",                         // GitHub Models, Azure AI inference
    "context length of ",                 // Ollama / LM Studio phrasings
];

/// The tokens sent and the window, as far as a provider's overflow message states them.
///
/// ```
/// use keel_openai::overflow_figures;
/// let f = overflow_figures("prompt is too long: 208310 tokens > 200000 maximum");
/// assert_eq!((f.sent_tokens, f.window_tokens), (Some(208_310), Some(200_000)));
/// let f = overflow_figures("This model's maximum context length is 128000 tokens. However, your messages resulted in 130517 tokens.");
/// assert_eq!((f.sent_tokens, f.window_tokens), (Some(130_517), Some(128_000)));
/// assert_eq!(overflow_figures("Input is too long for requested model.").sent_tokens, None);
/// ```
pub fn overflow_figures(message: &str) -> OverflowFigures {
    let lower = message.to_lowercase();
    let find = |markers: &[&str]| {
        markers.iter().find_map(|m| {
            lower
                .find(m)
                .and_then(|at| leading_number(&lower[at + m.len()..]))
        })
    };
    OverflowFigures {
        sent_tokens: find(SENT_MARKERS),
        window_tokens: find(WINDOW_MARKERS),
    }
}

/// The number `text` starts with (digits, with `,` or `_` thousands separators).
fn leading_number(text: &str) -> Option<u64> {
    let digits: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '_')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Maps an async-openai error to a typed error.
pub(crate) fn from_openai(err: OpenAIError) -> ModelError {
    match err {
        OpenAIError::Boxed(boxed) => match boxed.downcast::<HttpFailure>() {
            Ok(failure) => classify_http(failure.status, failure.retry_after, &failure.body),
            Err(other) => ModelError::new(ModelErrorKind::Connection, other.to_string()),
        },
        OpenAIError::Reqwest(e) => from_reqwest(&e),
        OpenAIError::ApiError(api) => {
            let body = serde_json::json!({ "error": api.api_error }).to_string();
            classify_http(api.status_code.as_u16(), None, &body)
        }
        // A proxy's `event: error` frame may carry plain text rather than JSON.
        OpenAIError::JSONDeserialize(_, content) if is_context_overflow(&content) => {
            ModelError::new(
                ModelErrorKind::ContextOverflow,
                format!("the server reported an error event: {}", content.trim()),
            )
            .with_overflow(overflow_figures(&content))
            .with_raw(content)
        }
        OpenAIError::JSONDeserialize(e, content) => ModelError::new(
            ModelErrorKind::MalformedResponse,
            format!("the server's answer is not valid JSON: {e}"),
        )
        .with_raw(content),
        OpenAIError::StreamError(e) => match *e {
            async_openai::error::StreamError::UnknownEvent(event) => ModelError::new(
                ModelErrorKind::MalformedResponse,
                format!("unexpected server-sent event {:?}", event.event),
            )
            .with_raw(event.data),
            async_openai::error::StreamError::EventStream(msg) => ModelError::new(
                ModelErrorKind::Connection,
                format!("the event stream broke: {msg}"),
            ),
        },
        OpenAIError::InvalidArgument(msg) => ModelError::new(ModelErrorKind::InvalidRequest, msg),
        other => ModelError::new(ModelErrorKind::InvalidRequest, other.to_string()),
    }
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

/// The interesting fields of an error body, whatever its shape.
#[derive(Default)]
struct ErrorDetail {
    message: Option<String>,
    code: Option<String>,
    kind: Option<String>,
    status: Option<u16>,
    /// The upstream provider's own error text, as a gateway relays it (OpenRouter's
    /// `error.metadata.raw`).
    relayed: Option<String>,
    /// Figures the body states as fields (llama.cpp's `n_prompt_tokens` and `n_ctx`).
    figures: OverflowFigures,
}

impl ErrorDetail {
    fn from_json(value: &Value) -> Self {
        // `{"error": {...}}`, `{"error": "text"}`, a bare vLLM/FastAPI object, or `{"detail": ...}`.
        let obj = match value.get("error") {
            Some(inner @ Value::Object(_)) => inner,
            Some(Value::String(s)) => {
                return ErrorDetail {
                    message: Some(s.clone()),
                    ..Default::default()
                };
            }
            _ => value,
        };
        let message = obj
            .get("message")
            .or_else(|| obj.get("detail"))
            .map(|m| match m {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        let (code, status) = match obj.get("code") {
            Some(Value::String(s)) => (Some(s.clone()), s.parse().ok()),
            Some(Value::Number(n)) => (None, n.as_u64().and_then(|n| u16::try_from(n).ok())),
            _ => (None, None),
        };
        let kind = obj.get("type").and_then(Value::as_str).map(str::to_owned);
        let relayed = obj
            .get("metadata")
            .and_then(|m| m.get("raw"))
            .map(|raw| match raw {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        let field = |k: &str| obj.get(k).and_then(Value::as_u64);
        ErrorDetail {
            message,
            code,
            kind,
            status,
            relayed,
            figures: OverflowFigures {
                sent_tokens: field("n_prompt_tokens"),
                window_tokens: field("n_ctx"),
            },
        }
    }

    fn is_overflow(&self) -> bool {
        [self.code.as_deref(), self.kind.as_deref()]
            .into_iter()
            .flatten()
            .any(|c| OVERFLOW_CODES.contains(&c))
    }
}

/// Reads `retry-after-ms` (milliseconds) or `retry-after` (seconds or an HTTP date).
pub(crate) fn retry_after_from_headers(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = parse_http_date(value)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) to seconds since the epoch.
fn parse_http_date(value: &str) -> Option<u64> {
    let mut parts = value.split_whitespace();
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
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::try_from(day).ok()? - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + i64::try_from(h * 3600 + m * 60 + s).ok()?;
    u64::try_from(secs).ok()
}

/// OpenAI's rate-limit messages end with "Please try again in 20s" / "in 1.5s" /
/// "in 350ms" / "in 1m30s"; used when no header says how long to wait.
fn retry_hint_in_message(message: &str) -> Option<Duration> {
    let lower = message.to_lowercase();
    let start = lower.find("try again in ")? + "try again in ".len();
    let rest = &lower[start..];
    let token: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '.')
        .collect();
    let mut total = 0.0f64;
    let mut number = String::new();
    let mut chars = token.chars().peekable();
    let mut matched = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            0.001
        } else {
            match c {
                'h' => 3600.0,
                'm' => 60.0,
                's' => 1.0,
                _ => return None,
            }
        };
        total += number.parse::<f64>().ok()? * unit;
        number.clear();
        matched = true;
    }
    (matched && total.is_finite()).then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(status: u16, body: &str) -> ModelErrorKind {
        classify_http(status, None, body).kind
    }

    #[test]
    fn openai_context_length_code() {
        let body = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130517 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert_eq!(kind(400, body), ModelErrorKind::ContextOverflow);
    }

    #[test]
    fn vllm_phrasings_flat_and_wrapped() {
        let flat = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5023 tokens (4023 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(kind(400, flat), ModelErrorKind::ContextOverflow);
        let wrapped = r#"{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum context length is 2048 tokens and your request has 100 input tokens (2000 > 2048 - 100).","type":"BadRequestError","param":null,"code":400}}"#;
        assert_eq!(kind(400, wrapped), ModelErrorKind::ContextOverflow);
    }

    #[test]
    fn llama_cpp_server_phrasings() {
        let typed = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}"#;
        assert_eq!(kind(400, typed), ModelErrorKind::ContextOverflow);
        // Older builds: a 500 with only the phrasing.
        let old = r#"{"error":{"code":500,"message":"input is too large to process. increase the physical batch size","type":"server_error"}}"#;
        assert_eq!(kind(500, old), ModelErrorKind::Server);
        let plain = r#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"invalid_request_error"}}"#;
        assert_eq!(kind(400, plain), ModelErrorKind::ContextOverflow);
    }

    #[test]
    fn llama_cpp_python_and_others() {
        assert!(is_context_overflow(
            "Requested tokens (3000) exceed context window of 2048"
        ));
        assert!(is_context_overflow(
            "This model's maximum context length is 2048 tokens. However, you requested 3000 tokens (2000 in the messages, 1000 in the completion)."
        ));
        assert_eq!(
            kind(
                400,
                r#"{"error":"prompt is too long: 9000 tokens > 8192 maximum"}"#
            ),
            ModelErrorKind::ContextOverflow
        );
        assert!(!is_context_overflow("Invalid value for 'temperature'"));
    }

    #[test]
    fn status_codes_map_to_kinds() {
        let auth = r#"{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
        assert_eq!(kind(401, auth), ModelErrorKind::Authentication);
        assert_eq!(kind(403, "forbidden"), ModelErrorKind::Authentication);
        assert_eq!(kind(404, "{}"), ModelErrorKind::InvalidRequest);
        assert_eq!(kind(422, "{}"), ModelErrorKind::InvalidRequest);
        assert_eq!(
            kind(502, "<html>bad gateway</html>"),
            ModelErrorKind::Server
        );
        assert_eq!(kind(408, ""), ModelErrorKind::Timeout);
        assert_eq!(kind(413, "too large"), ModelErrorKind::ContextOverflow);
        let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert_eq!(kind(429, quota), ModelErrorKind::InvalidRequest);
    }

    #[test]
    fn rate_limit_wait_from_header_or_message() {
        let body = r#"{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 200000, Used 199000, Requested 3000. Please try again in 1.5s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
        let err = classify_http(429, None, body);
        assert_eq!(err.kind, ModelErrorKind::RateLimited);
        assert_eq!(err.retry_after, Some(Duration::from_millis(1500)));
        let err = classify_http(429, Some(Duration::from_secs(7)), body);
        assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(
            retry_hint_in_message("Please try again in 1m30s."),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            retry_hint_in_message("try again in 350ms"),
            Some(Duration::from_millis(350))
        );
        assert_eq!(retry_hint_in_message("try again later"), None);
    }

    #[test]
    fn retry_after_headers() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("20"));
        assert_eq!(retry_after_from_headers(&h), Some(Duration::from_secs(20)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(
            retry_after_from_headers(&h),
            Some(Duration::from_millis(250))
        );
        let mut past = HeaderMap::new();
        past.insert(
            "retry-after",
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(retry_after_from_headers(&past), Some(Duration::ZERO));
        let mut junk = HeaderMap::new();
        junk.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after_from_headers(&junk), None);
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
    }

    #[test]
    fn error_object_inside_a_stream() {
        let v: Value = serde_json::from_str(
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
        )
        .unwrap();
        let err = classify_error_object(&v, "raw");
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
        let v: Value = serde_json::from_str(r#"{"error":{"message":"boom"}}"#).unwrap();
        assert_eq!(
            classify_error_object(&v, "raw").kind,
            ModelErrorKind::Server
        );
    }

    #[test]
    fn a_429_for_one_request_over_the_token_rate_is_an_overflow() {
        let body = r#"{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 36278. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
        let err = classify_http(429, Some(Duration::from_secs(5)), body);
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
        assert!(!err.is_retryable(), "waiting does not shrink the request");
        assert_eq!(err.retry_after, None);
        let f = err.overflow.unwrap();
        assert_eq!(
            (f.sent_tokens, f.window_tokens),
            (Some(36_278), Some(30_000))
        );
        // An ordinary rate limit stays one.
        let busy = r#"{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 200000, Used 199000, Requested 3000. Please try again in 1.5s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
        assert_eq!(kind(429, busy), ModelErrorKind::RateLimited);
        assert_eq!(classify_http(429, None, busy).overflow, None);
    }

    #[test]
    fn gateways_relaying_anthropic() {
        let litellm = r#"{"error":{"message":"litellm.BadRequestError: litellm.ContextWindowExceededError: AnthropicError - {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 209303 tokens > 200000 maximum\"}}\nReceived Model Group=claude-3-5-sonnet\nAvailable Model Group Fallbacks=None","type":null,"param":null,"code":"400"}}"#;
        let err = classify_http(400, None, litellm);
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
        let f = err.overflow.unwrap();
        assert_eq!(
            (f.sent_tokens, f.window_tokens),
            (Some(209_303), Some(200_000))
        );
        let openrouter = r#"{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 201234 tokens > 200000 maximum\"}}","provider_name":"Anthropic"}}}"#;
        let err = classify_http(400, None, openrouter);
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow, "{err}");
        let f = err.overflow.unwrap();
        assert_eq!(
            (f.sent_tokens, f.window_tokens),
            (Some(201_234), Some(200_000))
        );
        // A relayed error that is not an overflow stays what its status says.
        let other = r#"{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\"error\":{\"message\":\"invalid tool schema\"}}","provider_name":"Anthropic"}}}"#;
        assert_eq!(kind(400, other), ModelErrorKind::InvalidRequest);
    }

    #[test]
    fn google_wraps_the_error_in_a_list() {
        let body = r#"[{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]"#;
        let err = classify_http(400, None, body);
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
        let f = err.overflow.unwrap();
        assert_eq!(
            (f.sent_tokens, f.window_tokens),
            (Some(1_200_293), Some(1_048_576))
        );
    }

    #[test]
    fn figures_from_each_phrasing() {
        for (message, sent, window) in [
            (
                "This model's maximum context length is 4096 tokens. However, you requested 5023 tokens (4023 in the messages, 1000 in the completion).",
                Some(5_023),
                Some(4_096),
            ),
            (
                "This endpoint's maximum context length is 200000 tokens. However, you requested about 250000 tokens (249000 of text input, 1000 in the output).",
                Some(250_000),
                Some(200_000),
            ),
            (
                "Requested tokens (3000) exceed context window of 2048",
                Some(3_000),
                Some(2_048),
            ),
            (
                "Request body too large for gpt-4o model. Max size: 8000 tokens.",
                None,
                Some(8_000),
            ),
            ("Input is too long for requested model.", None, None),
        ] {
            let f = overflow_figures(message);
            assert_eq!(
                (f.sent_tokens, f.window_tokens),
                (sent, window),
                "{message}"
            );
        }
        let llama = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}"#;
        let f = classify_http(400, None, llama).overflow.unwrap();
        assert_eq!((f.sent_tokens, f.window_tokens), (Some(5_000), Some(4_096)));
    }

    #[test]
    fn bare_error_objects_as_event_error_frames_carry_them() {
        let anthropic: Value = serde_json::from_str(r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 9000 tokens > 8192 maximum"}}"#).unwrap();
        assert!(is_error_object(&anthropic));
        assert_eq!(
            classify_error_object(&anthropic, "raw").kind,
            ModelErrorKind::ContextOverflow
        );
        let responses: Value = serde_json::from_str(r#"{"type":"error","code":"context_length_exceeded","message":"Your input exceeds the context window of this model.","param":null,"sequence_number":2}"#).unwrap();
        assert!(is_error_object(&responses));
        assert_eq!(
            classify_error_object(&responses, "raw").kind,
            ModelErrorKind::ContextOverflow
        );
        let overloaded: Value = serde_json::from_str(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .unwrap();
        assert_eq!(
            classify_error_object(&overloaded, "raw").kind,
            ModelErrorKind::Server
        );
        let chunk: Value = serde_json::from_str(r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}"#).unwrap();
        assert!(!is_error_object(&chunk));
        let null_error: Value = serde_json::from_str(r#"{"error":null,"choices":[]}"#).unwrap();
        assert!(!is_error_object(&null_error));
    }

    #[test]
    fn a_plain_text_error_event_is_read_for_overflow() {
        let parse_error = serde_json::from_str::<Value>("Input is too long").unwrap_err();
        let err = from_openai(OpenAIError::JSONDeserialize(
            parse_error,
            "Input is too long for requested model.".into(),
        ));
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow, "{err}");
        assert!(err.overflow.is_some());
        let parse_error = serde_json::from_str::<Value>("garbage").unwrap_err();
        let err = from_openai(OpenAIError::JSONDeserialize(parse_error, "garbage".into()));
        assert_eq!(err.kind, ModelErrorKind::MalformedResponse);
    }
}
