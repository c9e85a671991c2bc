//! [`OriginPolicy`]: which web pages may call the server, and under which host names
//! it answers.
//!
//! A server without API keys on a developer's machine is reachable by every page the
//! developer's browser opens: a page can send requests to `http://127.0.0.1:2024`, and
//! with DNS rebinding (a name of the attacker's that first resolves to the attacker's
//! server, then to 127.0.0.1) it can even read the answers as same-origin. So without
//! keys, by default, the server answers only requests whose `Host` is a loopback name
//! (`localhost`, `127.0.0.0/8`, `[::1]`) and whose `Origin`, when a browser sends one,
//! is a loopback origin or one of the allowed hosts; `--allowed-hosts` and
//! `--cors-origin` widen that. Request bodies must be `application/json`
//! (`JsonBody`), so a cross-origin page cannot skip the
//! CORS preflight with a `text/plain` form post.
//!
//! With API keys the key is the boundary (it is a header, never sent by a browser on
//! its own): any origin may call, as before, unless the lists are given.

use std::net::Ipv4Addr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Which origins and host names the server accepts besides loopback ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginPolicy {
    /// Origins (`https://app.example.com`) whose pages may call the server; `*` for any.
    pub cors_origins: Vec<String>,
    /// Host names (`agents.internal`, without a port) the server answers to; `*` for any.
    pub allowed_hosts: Vec<String>,
}

/// The policy as the router applies it: with or without API keys.
#[derive(Clone, Debug)]
pub struct OriginGuard {
    policy: Arc<OriginPolicy>,
    keys_enabled: bool,
}

impl OriginGuard {
    /// The policy for a server with (`keys_enabled`) or without API keys.
    pub fn new(policy: OriginPolicy, keys_enabled: bool) -> Self {
        OriginGuard {
            policy: Arc::new(policy),
            keys_enabled,
        }
    }

    /// True when a request for `host` (the `Host` header) is answered.
    pub fn allows_host(&self, host: &str) -> bool {
        let hosts = &self.policy.allowed_hosts;
        if hosts.iter().any(|h| h == "*") || (self.keys_enabled && hosts.is_empty()) {
            return true;
        }
        let name = host_name(host);
        is_loopback(name) || hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
    }

    /// True when a page of `origin` (the `Origin` header) may call the server.
    pub fn allows_origin(&self, origin: &str) -> bool {
        let origins = &self.policy.cors_origins;
        if origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
            || (self.keys_enabled && origins.is_empty())
        {
            return true;
        }
        // An origin is scheme://host[:port]; `null` (a file, a sandboxed frame) has none.
        let Some((_, authority)) = origin.split_once("://") else {
            return false;
        };
        let name = host_name(authority);
        is_loopback(name)
            || self
                .policy
                .allowed_hosts
                .iter()
                .any(|h| h != "*" && h.eq_ignore_ascii_case(name))
    }
}

/// The host part of `host[:port]` or `[v6]:port`.
fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => authority,
    }
}

fn is_loopback(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    name.eq_ignore_ascii_case("localhost")
        || name.to_ascii_lowercase().ends_with(".localhost")
        || name == "::1"
        || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// The middleware: refuses a request for a host or from an origin the policy does not
/// accept (403, naming the flag that would allow it).
pub async fn guard(State(guard): State<OriginGuard>, request: Request, next: Next) -> Response {
    let text = |v: &HeaderValue| v.to_str().unwrap_or("?").to_owned();
    if let Some(host) = request.headers().get(header::HOST).map(text)
        && !guard.allows_host(&host)
    {
        return ApiError::Forbidden(format!(
            "host {host:?} is not served: without API keys this server answers loopback names only; start it with --allowed-hosts {} to serve this name",
            host_name(&host)
        ))
        .into_response();
    }
    if let Some(origin) = request.headers().get(header::ORIGIN).map(text)
        && !guard.allows_origin(&origin)
    {
        return ApiError::Forbidden(format!(
            "origin {origin:?} is not allowed to call this server; start it with --cors-origin {origin} (or API keys) to allow it"
        ))
        .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_keys_only_loopback_is_served() {
        let open = OriginGuard::new(OriginPolicy::default(), false);
        for host in [
            "127.0.0.1:2024",
            "localhost",
            "LOCALHOST:80",
            "[::1]:2024",
            "127.8.0.1",
            "app.localhost:3000",
        ] {
            assert!(open.allows_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:2024",
            "192.168.1.4:2024",
            "127.0.0.1.evil.example",
        ] {
            assert!(!open.allows_host(host), "{host}");
        }
        for origin in [
            "http://127.0.0.1:2024",
            "http://localhost:3000",
            "http://[::1]:5173",
        ] {
            assert!(open.allows_origin(origin), "{origin}");
        }
        for origin in [
            "https://evil.example",
            "null",
            "http://localhost.evil.example",
        ] {
            assert!(!open.allows_origin(origin), "{origin}");
        }
    }

    #[test]
    fn flags_widen_and_keys_open_origins() {
        let widened = OriginGuard::new(
            OriginPolicy {
                cors_origins: vec!["https://ui.example".into()],
                allowed_hosts: vec!["agents.internal".into()],
            },
            false,
        );
        assert!(widened.allows_host("agents.internal:2024"));
        assert!(!widened.allows_host("other.internal"));
        assert!(widened.allows_origin("https://ui.example"));
        assert!(
            widened.allows_origin("http://agents.internal:2024"),
            "the page served under an allowed host"
        );
        assert!(!widened.allows_origin("https://evil.example"));

        let keyed = OriginGuard::new(OriginPolicy::default(), true);
        assert!(keyed.allows_host("evil.example"));
        assert!(keyed.allows_origin("https://anywhere.example"));
        let any = OriginGuard::new(
            OriginPolicy {
                cors_origins: vec!["*".into()],
                allowed_hosts: vec!["*".into()],
            },
            false,
        );
        assert!(any.allows_host("evil.example") && any.allows_origin("https://evil.example"));
    }
}
