//! `keel recall-index rebuild` end to end: a database written by `keel replay` with
//! session memory and recall loses its recall index, the command builds it again from
//! the stored chat history, and search finds a fact of the session; bad databases are
//! refused with a message naming the problem.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use keel_core::recall::{RecallIndex, query_terms};
use keel_core::store::SessionScope;
use keel_store::Store;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn keel(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keel"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The bundled summarization configuration with recall on (its defaults).
fn recall_config(dir: &Path) -> String {
    let bundled = std::fs::read_to_string(root().join("examples/summarization.yaml")).unwrap();
    let mut config = match bundled.find("\nrecall:") {
        Some(i) => bundled[..i + 1].to_owned(),
        None => bundled,
    };
    config.push_str("\nrecall: {}\n");
    let path = dir.join("recall.yaml");
    std::fs::write(&path, config).unwrap();
    path.display().to_string()
}

/// The scope `keel replay --session prj` indexes under.
fn scope() -> SessionScope {
    SessionScope::new("keel-replay", "replay", "prj", "")
}

/// Documents of the index that the question finds, as (id, text).
async fn found(store: &Store, question: &str) -> Vec<(String, String)> {
    store
        .search(&scope(), &query_terms(question), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.document.message_id, h.document.text))
        .collect()
}

#[tokio::test]
async fn rebuild_restores_the_index_a_replay_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("keel.db").display());
    let session = root().join("examples/sessions/support-prj123.jsonl");
    let config = recall_config(dir.path());
    let out = keel(
        dir.path(),
        &[
            "replay",
            &session.display().to_string(),
            "--memory",
            "session",
            "--db",
            &url,
            "--session",
            "prj",
            "--config",
            &config,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let question = "Which customer is affected on project PRJ-123?";
    let store = Store::connect(&url).await.unwrap();
    let written = store.indexed_count(&scope()).await.unwrap();
    assert!(written > 100, "the replay indexed the session: {written}");
    let before = found(&store, question).await;
    assert!(
        before
            .iter()
            .any(|(_, t)| t.contains("Northwind Logistics")),
        "{before:?}"
    );

    // The index is lost (a restore from a backup without it, say).
    assert_eq!(store.clear_recall_index().await.unwrap(), written);
    assert_eq!(store.indexed_count(&scope()).await.unwrap(), 0);
    assert!(found(&store, question).await.is_empty());

    let out = keel(dir.path(), &["recall-index", "rebuild", "--db", &url]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("recall index rebuilt"), "{stdout}");
    assert!(stdout.contains("1 chat histories"), "{stdout}");

    // Every message of the stored history is back, the ones the replay indexed among
    // them, and the fact is found again.
    let rebuilt = store.indexed_count(&scope()).await.unwrap();
    assert!(rebuilt >= written, "rebuilt {rebuilt} of {written}");
    let after = found(&store, question).await;
    assert!(
        after.iter().any(|(_, t)| t.contains("Northwind Logistics")),
        "{after:?}"
    );
    assert_eq!(after[0], before[0], "the same best match");

    // A second rebuild replaces, it does not add.
    let out = keel(dir.path(), &["recall-index", "rebuild", "--db", &url]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(store.indexed_count(&scope()).await.unwrap(), rebuilt);
    assert!(
        text(&out.stdout).contains(&format!("({rebuilt} old entries removed)")),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn rebuild_refuses_an_unknown_scheme_a_missing_file_and_a_bare_path() {
    let dir = tempfile::tempdir().unwrap();
    let out = keel(
        dir.path(),
        &["recall-index", "rebuild", "--db", "ftp://host/keel.db"],
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("ftp"), "names the scheme: {err}");

    let missing = dir.path().join("missing.db");
    let url = format!("sqlite://{}?mode=rw", missing.display());
    let out = keel(dir.path(), &["recall-index", "rebuild", "--db", &url]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("missing.db"), "names the file: {err}");
    assert!(!missing.exists(), "nothing was created");

    let out = keel(dir.path(), &["recall-index", "rebuild", "--db", "keel.db"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("sqlite://keel.db"), "suggests the URL: {err}");

    let out = keel(dir.path(), &["recall-index", "rebuild"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("--db"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
