//! The three backends the concurrency and sharing tests run on.

use keel_store::Store;

/// The PostgreSQL URL, or a failure that says how to get one. Never a skip.
pub fn postgres_url() -> String {
    match std::env::var("KEEL_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "KEEL_TEST_POSTGRES_URL is not set: run the tests with scripts/test.sh, which \
             provisions a throwaway PostgreSQL and exports it (or export a URL yourself)"
        ),
    }
}

pub async fn postgres() -> Store {
    Store::connect(&postgres_url()).await.unwrap()
}

/// A SQLite file (WAL) in a temporary directory; keep the directory alive.
pub async fn sqlite_file() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("keel.db").display());
    (Store::connect(&url).await.unwrap(), dir)
}

/// A flow id no earlier run used, so tests sharing one PostgreSQL database never meet.
pub fn unique_flow(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{nanos}", std::process::id())
}
