//! [`ApiError`]: every failure a request can meet, answered in the Agent Server's error
//! shape, `{"detail": "..."}` with the matching status (the shape LangGraph's server
//! returns and the SDKs read, see `langgraph_sdk.errors`). Never a panic or a trace.

use axum::http::StatusCode;
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
    /// Too many runs waiting (503); try later.
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

    /// A storage failure while doing `what`.
    pub fn storage(what: &str, error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "storage failed while {what}");
        ApiError::Internal(format!("storage failed while {what}; see the server log"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        (status, axum::Json(json!({ "detail": self.to_string() }))).into_response()
    }
}
