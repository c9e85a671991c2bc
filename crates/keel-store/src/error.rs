//! Errors of [`Store::connect`](crate::Store::connect).

use crate::Backend;

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL's scheme names no backend.
    #[error(
        "unknown database URL scheme {scheme:?} in {url:?}; expected one of `sqlite:` \
         (sqlite://path?mode=rwc, sqlite::memory:), `postgres:` / `postgresql:`, or `memory:`"
    )]
    UnknownScheme {
        /// The scheme found (text before the first `:`).
        scheme: String,
        /// The URL, with any password replaced by `***`.
        url: String,
    },
    /// The URL names a backend this build of `keel-store` does not contain.
    #[error(
        "the {backend} backend is not compiled into keel-store; enable its cargo feature \
         `{feature}` (keel-store = {{ features = [\"{feature}\"] }})"
    )]
    BackendDisabled {
        /// The backend the URL asked for.
        backend: Backend,
        /// The cargo feature of `keel-store` that compiles it in.
        feature: &'static str,
    },
    /// The URL is for a known backend but its options could not be parsed.
    #[error("invalid {backend} URL {url:?}: {detail}")]
    InvalidUrl {
        /// The backend.
        backend: Backend,
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What the driver said.
        detail: String,
    },
    /// The database could not be reached or opened.
    #[error("cannot connect to {backend} at {url:?}: {detail}")]
    Connect {
        /// The backend.
        backend: Backend,
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What the driver said.
        detail: String,
    },
    /// The embedded migrations failed.
    #[error("migrating the {backend} schema failed: {detail}")]
    Migrate {
        /// The backend.
        backend: Backend,
        /// What the migrator said.
        detail: String,
    },
}

/// The URL with the password of its user-info part (`user:password@`) replaced by `***`,
/// so that errors and logs can show which database was meant without leaking secrets.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        return url.to_owned();
    };
    format!(
        "{}{}:***{}",
        &url[..scheme_end + 3],
        &userinfo[..colon],
        &rest[at..]
    )
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact_url("postgres://keel:s3cret@db:5432/keel?sslmode=disable"),
            "postgres://keel:***@db:5432/keel?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgres://keel@db/keel"),
            "postgres://keel@db/keel"
        );
        assert_eq!(redact_url("sqlite://a@b.db"), "sqlite://a@b.db");
        assert_eq!(redact_url("sqlite::memory:"), "sqlite::memory:");
    }
}
