//! [`ApiError`]: every failure a request can meet, answered in the Agent Server's error
//! shape, `{"detail": "..."}` with the matching status (the shape LangGraph's server
//! returns and the SDKs read, see `langgraph_sdk.errors`). Never a panic or a trace.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A request the server refuses or could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body or a parameter is malformed (422, like the Agent Server's validation).
    #[error("{0}")]
    Invalid(String),
    /// A well-formed request the server cannot honour (400).
    #[error("{0}")]
    BadRequest(String),
    /// No `x-api-key`, or an unknown one (401).
    #[error("{0}")]
    Unauthorized(String),
    /// No such thread, run or assistant for this owner (404). Another owner's thread is
    /// reported the same way, so ids cannot be probed.
    #[error("{what} {id} not found")]
    NotFound {
        /// `Thread`, `Run`, `Assistant`.
        what: &'static str,
        /// The id asked for.
        id: String,
    },
    /// The thread is busy and the multitask strategy is `reject`, or a thread id is
    /// taken (409).
    #[error("{0}")]
    Conflict(String),
    /// A body over the configured cap (413).
    #[error("request body is larger than {limit} bytes; send less or raise --max-body-bytes")]
    TooLarge {
        /// The cap in bytes.
        limit: usize,
    },
    /// A body that is not JSON (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A request from an origin or for a host this server does not serve (403).
    #[error("{0}")]
    Forbidden(String),
    /// Too many runs waiting, or the database stayed busy past its wait (503, with
    /// `Retry-After`); try later.
    #[error("{0}")]
    Busy(String),
    /// Storage failed (500). The detail names the operation, not internals.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A thread that does not exist or belongs to someone else.
    pub fn thread(id: &str) -> Self {
        ApiError::NotFound {
            what: "Thread",
            id: id.to_owned(),
        }
    }

    /// A run that does not exist on that thread.
    pub fn run(id: &str) -> Self {
        ApiError::NotFound {
            what: "Run",
            id: id.to_owned(),
        }
    }

    /// A storage failure while doing `what`. A database that stayed busy past its wait
    /// (SQLite's "database is locked" after the busy timeout, a pool with no free
    /// connection) is [`ApiError::Busy`]: the request did nothing and can be retried.
    pub fn storage(what: &str, error: impl std::fmt::Display) -> Self {
        let text = error.to_string();
        if is_busy(&text) {
            tracing::warn!(error = %text, "database busy while {what}");
            return ApiError::Busy(format!(
                "the database is busy (another request holds its write lock); nothing was \
                 done while {what}: retry after {RETRY_AFTER_SECS} s"
            ));
        }
        tracing::error!(error = %text, "storage failed while {what}");
        ApiError::Internal(format!("storage failed while {what}; see the server log"))
    }
}

/// The `Retry-After` of a 503, in seconds.
pub const RETRY_AFTER_SECS: u64 = 1;

/// True for a driver error that means "busy, try again": SQLite's `SQLITE_BUSY` /
/// `SQLITE_LOCKED` (codes 5 and 6, extended codes end in them) and a pool that had no
/// connection free in time.
fn is_busy(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("database is locked")
        || lower.contains("database is busy")
        || lower.contains("database table is locked")
        || lower.contains("pool timed out")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response =
            (status, axum::Json(json!({ "detail": self.to_string() }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's busy errors, as sqlx and the stores word them, answer 503 with
    /// `Retry-After`; other storage failures stay 500.
    #[test]
    fn a_busy_database_is_a_retryable_503() {
        for text in [
            "error returned from database: (code: 5) database is locked",
            "storage backend error: error returned from database: (code: 517) database is locked (another process kept the file locked past the 5 s busy timeout)",
            "error returned from database: (code: 6) database table is locked",
            "pool timed out while waiting for an open connection",
        ] {
            let e = ApiError::storage("creating the thread", text);
            assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE, "{text}");
            assert!(e.to_string().contains("creating the thread"), "{e}");
            let response = e.into_response();
            assert_eq!(
                response.headers().get(header::RETRY_AFTER),
                Some(&HeaderValue::from(RETRY_AFTER_SECS))
            );
        }
        let e = ApiError::storage("reading the thread", "stored data is corrupt: x");
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            e.into_response()
                .headers()
                .get(header::RETRY_AFTER)
                .is_none()
        );
    }
}
