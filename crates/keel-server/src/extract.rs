//! Extractors that answer bad input with the protocol's error shape ([`ApiError`])
//! instead of axum's plain-text rejections.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body; an empty body reads as `{}` (the SDKs send none for some calls).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

/// Bytes of an oversized body read and thrown away before answering 413, so the client,
/// still sending, receives the answer instead of a reset connection. Past this the
/// connection is dropped.
const DRAIN_BYTES: usize = 16 * 1024 * 1024;

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(usize::MAX, |l| l.0);
        let content_type = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("?").to_owned());
        let mut stream = req.into_body().into_data_stream();
        let mut bytes = Vec::new();
        let mut total = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::BadRequest(format!("could not read the request body: {e}"))
            })?;
            total = total.saturating_add(chunk.len());
            if total <= limit {
                bytes.extend_from_slice(&chunk);
            } else if total > limit.saturating_add(DRAIN_BYTES) {
                break;
            }
        }
        if total > limit {
            return Err(ApiError::TooLarge { limit });
        }
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            // A body is JSON only when it says so: a page on another origin can send a
            // `text/plain` form post without asking first (no CORS preflight), so
            // accepting any type would let any web page start runs.
            if !content_type.as_deref().is_some_and(is_json) {
                return Err(ApiError::UnsupportedMediaType(format!(
                    "the request body must be sent with Content-Type: application/json (got {})",
                    content_type
                        .as_deref()
                        .map_or("none".to_owned(), |t| format!("{t:?}"))
                )));
            }
            // Every body of the protocol is an object; serde would also read a struct
            // from an array of its fields.
            if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
                return Err(ApiError::Invalid(
                    "the request body must be a JSON object ({...})".into(),
                ));
            }
            &bytes
        };
        serde_json::from_slice(text)
            .map(JsonBody)
            .map_err(|e| ApiError::Invalid(format!("the request body is not valid: {e}")))
    }
}

/// `application/json`, or a `+json` type, with any parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The body cap in force, so a rejection can name it.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

/// Path parameters as strings.
#[derive(Debug)]
pub struct Ids<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Ids<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| Ids(t))
            .map_err(|e| ApiError::Invalid(format!("bad path parameter: {e}")))
    }
}

/// Query parameters, repeated keys kept (`?stream_mode=values&stream_mode=updates`).
#[derive(Debug, Default)]
pub struct QueryPairs(pub Vec<(String, String)>);

impl QueryPairs {
    /// The last value of a key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a key.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A whole number, or the default when absent.
    pub fn usize_or(&self, key: &str, default: usize) -> Result<usize, ApiError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                ApiError::Invalid(format!("query parameter {key}={v:?} is not a whole number"))
            }),
        }
    }

    /// `true`/`1` or `false`/`0`, or the default when absent.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, ApiError> {
        match self.get(key) {
            None => Ok(default),
            Some("1" | "true" | "True") => Ok(true),
            Some("0" | "false" | "False") => Ok(false),
            Some(v) => Err(ApiError::Invalid(format!(
                "query parameter {key}={v:?} is not true, false, 1 or 0"
            ))),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        Ok(QueryPairs(
            form_urlencoded::parse(query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        ))
    }
}
