//! API-key authentication: the `x-api-key` header the SDKs send (from
//! `LANGGRAPH_API_KEY` or the `api_key` argument) names an owner, and every thread is
//! scoped to its owner. Without configured keys the server is open and every request
//! has the same, empty owner. The MCP endpoint (`/mcp`) also takes the key as
//! `Authorization: Bearer KEY`, the header MCP clients send.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Who is calling: the owner of the API key ("" when auth is off).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner(pub Arc<str>);

/// Separates an owner from a thread id in a [thread key](Owner::thread_key). Neither
/// an owner name nor a thread id may hold a control character, so the key is
/// unambiguous.
const KEY_SEPARATOR: char = '\u{1f}';

impl Owner {
    /// The key a thread id of this owner is stored under: checkpoints, session memory,
    /// cached summaries, leases and run records are all kept by it. Every owner has a
    /// namespace of its own, so two owners may use the same thread id without either
    /// learning that the other did, and nothing one owner stored is ever read for
    /// another. Without auth (owner "") the key is the thread id itself.
    pub fn thread_key(&self, thread_id: &str) -> String {
        if self.0.is_empty() {
            thread_id.to_owned()
        } else {
            format!("{}{KEY_SEPARATOR}{thread_id}", self.0)
        }
    }
}

/// The thread id a client sees for a [thread key](Owner::thread_key).
pub fn public_thread_id(key: &str) -> &str {
    key.split_once(KEY_SEPARATOR).map_or(key, |(_, id)| id)
}

/// Checks a thread id a client chose: 1 to 256 characters, none of them a control
/// character (NUL cannot be stored by PostgreSQL, and the others have no place in an
/// id).
pub fn check_thread_id(thread_id: &str) -> Result<(), String> {
    let chars = thread_id.chars().count();
    if chars == 0 || chars > 256 {
        return Err(format!(
            "thread_id must have between 1 and 256 characters; it has {chars}"
        ));
    }
    if let Some(c) = thread_id.chars().find(|c| c.is_control()) {
        return Err(format!(
            "thread_id {thread_id:?} contains the control character U+{:04X}; use letters, digits and punctuation",
            u32::from(c)
        ));
    }
    Ok(())
}

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
            if owner.chars().any(char::is_control) {
                return Err(format!(
                    "API key entry {}: the owner {owner:?} contains a control character",
                    i + 1
                ));
            }
            match keys.insert(key.to_owned(), owner.to_owned()) {
                // The same key for two owners: whichever was read last would win, and the
                // other owner's threads would be served to the wrong person.
                Some(previous) if previous != owner => {
                    return Err(format!(
                        "API key entry {}: this key is already given to owner {previous:?}; every key must name one owner",
                        i + 1
                    ));
                }
                _ => {}
            }
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

/// The token of an `Authorization: Bearer TOKEN` value (the scheme is
/// case-insensitive, RFC 9110 section 11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
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
        let bearer = (request.uri().path() == crate::mcp::MCP_PATH)
            .then(|| request.headers().get(axum::http::header::AUTHORIZATION))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .and_then(|v| axum::http::HeaderValue::from_str(v).ok());
        match request
            .headers()
            .get("x-api-key")
            .cloned()
            .or(bearer)
            .as_ref()
        {
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

    #[test]
    fn bearer_tokens_are_read_whatever_the_scheme_case() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    #[test]
    fn a_key_names_one_owner() {
        let err = ApiKeys::parse("shared-key-1=alice,shared-key-1=bob").unwrap_err();
        assert!(err.contains("already given to owner \"alice\""), "{err}");
        // Listing a key twice for the same owner is harmless.
        assert!(ApiKeys::parse("shared-key-1=alice,shared-key-1=alice").is_ok());
        assert!(ApiKeys::parse("some-key-12=al\u{1f}ice").is_err());
    }

    #[test]
    fn owners_have_separate_namespaces() {
        let alice = Owner(Arc::from("alice"));
        let bob = Owner(Arc::from("bob"));
        let open = Owner(Arc::from(""));
        assert_ne!(alice.thread_key("t1"), bob.thread_key("t1"));
        assert_eq!(open.thread_key("t1"), "t1");
        for owner in [&alice, &bob, &open] {
            assert_eq!(public_thread_id(&owner.thread_key("t/1:x")), "t/1:x");
        }
        assert!(check_thread_id("ok-id").is_ok());
        assert!(check_thread_id("").is_err());
        assert!(check_thread_id("nul\0id").unwrap_err().contains("U+0000"));
        assert!(check_thread_id(&"x".repeat(257)).is_err());
        assert!(check_thread_id(&"é".repeat(256)).is_ok());
    }
}
