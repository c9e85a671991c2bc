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
    /// A path with no `scheme:` in front.
    #[error(
        "{url:?} is not a database URL (it has no scheme); did you mean {suggestion}? \
         PostgreSQL URLs look like postgres://user:password@host:5432/db"
    )]
    MissingScheme {
        /// What was given, with any password replaced by `***`.
        url: String,
        /// The SQLite URL for that path, in the user's spelling.
        suggestion: String,
    },
    /// The path of a SQLite database cannot hold one.
    #[error("cannot open sqlite database {url:?}: {problem}")]
    Path {
        /// The URL.
        url: String,
        /// What is wrong with the path and what to do.
        problem: String,
    },
    /// The database opened but cannot be written.
    #[error(
        "the sqlite database {url:?} is read-only (file or folder permissions, or a \
         read-only disk), and keel writes sessions and summaries to it; make the file and \
         its folder writable, or choose another file. To only read it, add ?mode=ro"
    )]
    ReadOnly {
        /// The URL.
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

/// A driver's message with what to do about the common causes appended.
pub fn with_hint(detail: &str) -> String {
    // The OS error number says nothing the words do not.
    let detail = match detail.find(" (os error ") {
        Some(at) => {
            let end = detail[at..].find(')').map_or(detail.len(), |e| at + e + 1);
            format!("{}{}", &detail[..at], &detail[end..])
        }
        None => detail.to_owned(),
    };
    let detail = detail.as_str();
    let lower = detail.to_ascii_lowercase();
    let hint = if lower.contains("connection refused") {
        "nothing listens at that host and port: is the server running, and are host and port right?"
    } else if lower.contains("password authentication failed") {
        "check the user name and password in the URL"
    } else if lower.contains("does not exist") && lower.contains("database") {
        "create the database first (createdb NAME) or name an existing one"
    } else if lower.contains("failed to lookup address")
        || lower.contains("name or service not known")
    {
        "the host name does not resolve: check the host in the URL"
    } else if lower.contains("database is locked") {
        "another process kept the file locked past the 5 s busy timeout; retry, or give each process its own file (or use PostgreSQL for several writers)"
    } else if lower.contains("unable to open database file") {
        "check that the folder exists and is writable"
    } else if lower.contains("disk is full") || lower.contains("database or disk is full") {
        "free disk space"
    } else if lower.contains("pool timed out") {
        "no connection became free in time: is the database reachable and not overloaded?"
    } else {
        return detail.to_owned();
    };
    format!("{detail} ({hint})")
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
