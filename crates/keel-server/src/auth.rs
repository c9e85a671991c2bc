//! API-key authentication: the `x-api-key` header the SDKs send (from
//! `LANGGRAPH_API_KEY` or the `api_key` argument) names an owner, and every thread is
//! scoped to its owner. Without configured keys the server is open and every request
//! has the same, empty owner.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Who is calling: the owner of the API key ("" when auth is off).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner(pub Arc<str>);

/// The configured API keys and their owners.
#[derive(Clone, Debug, Default)]
pub struct ApiKeys {
    keys: Arc<Vec<(Vec<u8>, Arc<str>)>>,
}

impl ApiKeys {
    /// Keys mapped to owners; empty means no authentication.
    pub fn new(keys: HashMap<String, String>) -> Self {
        ApiKeys {
            keys: Arc::new(
                keys.into_iter()
                    .map(|(k, o)| (k.into_bytes(), Arc::from(o)))
                    .collect(),
            ),
        }
    }

    /// Reads `KEY=OWNER` pairs separated by commas or newlines (blank lines and `#`
    /// comments skipped).
    pub fn parse(text: &str) -> Result<ApiKeys, String> {
        let mut keys = HashMap::new();
        for (i, entry) in text
            .split([',', '\n'])
            .map(str::trim)
            .enumerate()
            .filter(|(_, e)| !e.is_empty() && !e.starts_with('#'))
        {
            let Some((key, owner)) = entry.split_once('=') else {
                return Err(format!(
                    "API key entry {} has no '=': write KEY=OWNER",
                    i + 1
                ));
            };
            let (key, owner) = (key.trim(), owner.trim());
            if key.len() < 8 || owner.is_empty() {
                return Err(format!(
                    "API key entry {}: the key needs at least 8 characters and an owner",
                    i + 1
                ));
            }
            keys.insert(key.to_owned(), owner.to_owned());
        }
        Ok(ApiKeys::new(keys))
    }

    /// True when keys are required.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The owner of a key. Every configured key is compared in full, so the time taken
    /// does not tell how much of a guess was right.
    pub fn owner(&self, presented: &[u8]) -> Option<Arc<str>> {
        let mut found = None;
        for (key, owner) in self.keys.iter() {
            if constant_time_eq(key, presented) {
                found = Some(owner.clone());
            }
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Paths anyone may read: health, server info, and the chat page (which asks for a key
/// itself).
fn is_public(path: &str) -> bool {
    matches!(path, "/ok" | "/info" | "/" | "/favicon.ico") || path.starts_with("/static/")
}

/// The middleware: resolves the owner or answers 401.
pub async fn authenticate(
    State(keys): State<ApiKeys>,
    mut request: Request,
    next: Next,
) -> Response {
    let owner = if !keys.enabled() || is_public(request.uri().path()) {
        Owner(Arc::from(""))
    } else {
        match request.headers().get("x-api-key") {
            None => {
                return ApiError::Unauthorized(
                    "missing x-api-key header: this server requires an API key".into(),
                )
                .into_response();
            }
            Some(value) => match keys.owner(value.as_bytes()) {
                Some(owner) => Owner(owner),
                None => {
                    return ApiError::Unauthorized("invalid API key".into()).into_response();
                }
            },
        }
    };
    request.extensions_mut().insert(owner);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_finds_owners() {
        let keys = ApiKeys::parse("alice-key-1=alice\n# comment\n, bob-key-22=bob").unwrap();
        assert_eq!(keys.owner(b"alice-key-1").as_deref(), Some("alice"));
        assert_eq!(keys.owner(b"bob-key-22").as_deref(), Some("bob"));
        assert_eq!(keys.owner(b"bob-key-2"), None);
        assert!(ApiKeys::parse("short=x").is_err());
        assert!(ApiKeys::parse("no-equals-sign").is_err());
        assert!(!ApiKeys::parse("").unwrap().enabled());
    }
}
