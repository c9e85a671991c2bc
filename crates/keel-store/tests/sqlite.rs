//! The conformance suite and schema checks on SQLite: a WAL file in a temp dir, and
//! `sqlite::memory:`.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use keel_core::message::Message;
use keel_core::store::{SessionMemoryState, SessionMemoryStore, SessionScope, SummaryStore};
use keel_store::sqlite::SqliteStore;
use keel_store::{Backend, Storage, Store, conformance};
use serde_json::json;

fn file_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}?mode=rwc", dir.path().join("keel.db").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_file_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&file_url(&dir)).await.unwrap();
    assert_eq!(store.backend(), Backend::Sqlite);
    conformance::run_all(Arc::new(store)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_memory_conforms() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    conformance::run_all(Arc::new(store)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_recall_index_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&file_url(&dir)).await.unwrap();
    conformance::run_recall(Arc::new(store)).await.unwrap();
    let store = Store::connect("sqlite::memory:").await.unwrap();
    conformance::run_recall(Arc::new(store)).await.unwrap();
}

/// sqlx's bundled libsqlite3 is built with FTS5, and a deleted session leaves no row in
/// the index tables (the FTS5 table follows its content table through triggers, the term
/// counts are deleted with the session).
#[tokio::test]
async fn recall_index_uses_fts5_and_deletes_its_rows() {
    use keel_core::recall::{RecallDocument, RecallIndex};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::connect(&file_url(&dir)).await.unwrap();
    let (fts5,): (i64,) = sqlx::query_as("SELECT sqlite_compileoption_used('ENABLE_FTS5')")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(fts5, 1);
    let scope = SessionScope::new("f", "u", "s", "");
    let doc = RecallDocument::new("m1", 0, "user", "主数据库是db-1。");
    store.index_documents(&scope, &[doc]).await.unwrap();
    let count = |sql: &'static str| {
        let pool = store.pool().clone();
        async move {
            let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&pool).await.unwrap();
            n
        }
    };
    assert_eq!(count("SELECT count(*) FROM recall_documents").await, 1);
    // Terms are indexed with the scope's tag (`s` and 16 hex digits) in front.
    let db = "SELECT COALESCE(sum(doc), 0) FROM recall_vocab WHERE substr(term, 18) = 'db'";
    assert_eq!(count(db).await, 1);
    // The document frequencies a search reads, kept beside the index.
    let counted = "SELECT COALESCE(sum(documents), 0) FROM recall_term_counts WHERE term = 'db'";
    assert_eq!(count(counted).await, 1);
    assert_eq!(count("SELECT documents FROM recall_scopes").await, 1);
    assert_eq!(store.delete_session_index("f", "u", "s").await.unwrap(), 1);
    assert_eq!(count("SELECT count(*) FROM recall_documents").await, 0);
    assert_eq!(count(db).await, 0);
    assert_eq!(count("SELECT count(*) FROM recall_vocab").await, 0);
    assert_eq!(count("SELECT count(*) FROM recall_scopes").await, 0);
    assert_eq!(count("SELECT count(*) FROM recall_term_counts").await, 0);
}

#[tokio::test]
async fn file_database_is_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::connect(&file_url(&dir)).await.unwrap();
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

async fn tables(store: &SqliteStore) -> Vec<String> {
    sqlx::query_as::<_, (String,)>(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') \
         AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(store.pool())
    .await
    .unwrap()
    .into_iter()
    .map(|(n,)| n)
    .collect()
}

async fn applied(store: &SqliteStore) -> i64 {
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(store.pool())
        .await
        .unwrap();
    n
}

#[tokio::test]
async fn migrations_run_from_empty_and_again_as_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(&dir);
    let scope = SessionScope::new("f", "u", "s", "");
    let first = SqliteStore::connect(&url).await.unwrap();
    let schema = tables(&first).await;
    for t in [
        "_sqlx_migrations",
        "chat_messages",
        "chat_messages_by_position",
        "checkpoint_entries",
        "checkpoint_entries_live",
        "checkpoint_heads",
        "checkpoint_messages",
        "checkpoint_steps",
        "checkpoints",
        "recall_documents",
        "recall_documents_seq",
        "recall_scopes",
        "recall_term_counts",
        "recall_terms",
        "recall_vocab",
        "session_memory_state",
        "summary_cache",
        "summary_leases",
    ] {
        assert!(schema.iter().any(|n| n == t), "{t} missing from {schema:?}");
    }
    assert_eq!(applied(&first).await, 7);
    first
        .save_state(&scope, &SessionMemoryState::default(), 0)
        .await
        .unwrap();
    first.put_summary("k", &json!({"s": 1})).await.unwrap();
    first.migrate().await.unwrap();
    drop(first);

    // A restarted process: connect migrates again; nothing changes, nothing is lost.
    let second = SqliteStore::connect(&url).await.unwrap();
    assert_eq!(tables(&second).await, schema);
    assert_eq!(applied(&second).await, 7);
    assert_eq!(second.get_state(&scope).await.unwrap().unwrap().version, 1);
    assert_eq!(
        second.get_summary("k").await.unwrap(),
        Some(json!({"s": 1}))
    );
}

#[tokio::test]
async fn a_missing_directory_is_a_connect_error() {
    let err = Store::connect("sqlite:///nonexistent-dir/x/keel.db?mode=rwc")
        .await
        .unwrap_err();
    assert!(
        matches!(err, keel_store::ConnectError::Path { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("the folder /nonexistent-dir/x does not exist; create it"),
        "{err}"
    );
}

/// What a user types for `--db` and what they are told.
#[tokio::test]
async fn database_paths_are_checked_and_explained() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().display().to_string();

    // A path without a scheme: the suggestion keeps the user's spelling.
    let err = Store::connect(&format!("{base}/My.DB")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "\"{base}/My.DB\" is not a database URL (it has no scheme); did you mean \
             sqlite://{base}/My.DB? PostgreSQL URLs look like postgres://user:password@host:5432/db"
        )
    );
    assert!(!dir.path().join("My.DB").exists());

    // A folder.
    let err = Store::connect(&format!("sqlite://{base}"))
        .await
        .unwrap_err();
    assert!(err.to_string().ends_with(&format!(
        "{base} is a folder; name a database file inside it, for example sqlite://{base}/keel.db"
    )), "{err}");

    // No mode: created on first use.
    let url = format!("sqlite://{base}/new.db");
    Store::connect(&url).await.unwrap();
    assert!(dir.path().join("new.db").exists());

    // mode=ro does not create, and says so; on an existing file it opens.
    let err = Store::connect(&format!("sqlite://{base}/other.db?mode=ro"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("mode=ro does not create it"),
        "{err}"
    );
    Store::connect(&format!("{url}?mode=ro")).await.unwrap();
}

/// A database file that cannot be written is found when it is opened. Root ignores file
/// permissions, so the test only runs for other users.
#[tokio::test]
async fn a_read_only_database_is_detected_at_open() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.db");
    let url = format!("sqlite://{}", path.display());
    drop(Store::connect(&url).await.unwrap());
    for p in [path.clone(), dir.path().to_owned()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let writable = std::fs::OpenOptions::new().append(true).open(&path).is_ok();
    if !writable {
        let err = Store::connect(&url).await.unwrap_err();
        assert!(
            matches!(err, keel_store::ConnectError::ReadOnly { .. }),
            "{err:?}"
        );
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Several processes starting at once on a brand-new database file: each opens its own
/// pool and migrates. SQLite has no migration lock, so they race; every one of them must
/// still come up, with the schema applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_start_on_a_new_file_all_succeed() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let url = file_url(&dir);
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { SqliteStore::connect(&url).await })
            })
            .collect();
        let mut stores = Vec::new();
        for open in opens {
            match open.await.unwrap() {
                Ok(store) => stores.push(store),
                Err(e) => panic!("round {round}: a concurrent first start failed: {e}"),
            }
        }
        assert_eq!(applied(&stores[0]).await, applied(&stores[7]).await);
        assert!(applied(&stores[0]).await >= 1);
    }
}

/// A database written before checkpoints became deltas (migration 0001 only): its
/// threads continue from their latest checkpoint after the upgrade.
#[tokio::test]
async fn threads_written_before_the_delta_schema_continue_from_their_latest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let url = file_url(&dir);
    {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::raw_sql(include_str!("../migrations/sqlite/0001_init.sql"))
            .execute(&pool)
            .await
            .unwrap();
        let a = serde_json::to_string(&Message::human("old question").with_id("a")).unwrap();
        let b = serde_json::to_string(&Message::ai("old answer").with_id("b")).unwrap();
        for (hash, body) in [("ha", &a), ("hb", &b)] {
            sqlx::query("INSERT INTO checkpoint_messages VALUES ('t', $1, $2)")
                .bind(hash)
                .bind(body)
                .execute(&pool)
                .await
                .unwrap();
        }
        for (seq, hashes) in [(0, r#"["ha"]"#), (1, r#"["ha","hb"]"#)] {
            sqlx::query(
                "INSERT INTO checkpoints VALUES ('t', $1, 'r0', 'model', $2, '{\"k\":1}', 5)",
            )
            .bind(seq)
            .bind(hashes)
            .execute(&pool)
            .await
            .unwrap();
        }
        pool.close().await;
    }
    let store = SqliteStore::connect(&url).await.unwrap();
    common::continues_the_pre_delta_thread(&store).await;
}

/// SQLite's search reads the same candidates as the memory index and so returns the same
/// hits: on a thread longer than `MAX_POSTINGS`, a question whose rarest term alone passes
/// the budget (its newest `MAX_CANDIDATES` documents), questions whose terms' weights tie
/// across more than `MAX_CANDIDATES` documents (ties to the newest), and rare terms. The
/// limit is `MAX_CANDIDATES`, so every candidate is a hit and any difference shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_candidates_match_the_memory_index() {
    use keel_core::recall::{MAX_CANDIDATES, MAX_POSTINGS, RecallDocument, RecallIndex};
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::connect(&file_url(&dir)).await.unwrap();
    let memory = Store::memory();
    let scope = SessionScope::new("f", "u", "long", "");
    // SplitMix64, so the thread is the same on every run.
    let mut state = 0x5eed_u64;
    let mut next = move |n: u64| {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    };
    let documents = MAX_POSTINGS as usize + 900;
    let mut previous = String::new();
    let docs: Vec<RecallDocument> = (0..documents)
        .map(|i| {
            // "common" in six of seven messages (past the budget alone); 40 other words,
            // the k-th drawn about 1/k as often as the first.
            let mut words: Vec<String> = Vec::new();
            if i % 7 != 0 {
                words.push("common".to_owned());
            }
            for _ in 0..3 + next(4) {
                let k = (1..=40).find(|&k| next(k * 3) == 0).unwrap_or(40);
                words.push(format!("word{k}"));
            }
            let text = words.join(" ");
            let mut d = RecallDocument::new(format!("m{i}"), i as u64, "user", text.clone());
            d.context = std::mem::replace(&mut previous, text);
            d
        })
        .collect();
    for batch in docs.chunks(1_000) {
        sqlite.index_documents(&scope, batch).await.unwrap();
        memory.index_documents(&scope, batch).await.unwrap();
    }
    let mut questions: Vec<Vec<String>> = vec![
        vec!["common".to_owned()],
        vec!["word1".to_owned()],
        vec!["common".to_owned(), "word1".to_owned(), "word2".to_owned()],
        vec![
            "word39".to_owned(),
            "word40".to_owned(),
            "word38".to_owned(),
        ],
        vec!["word20".to_owned(), "word21".to_owned()],
    ];
    for _ in 0..40 {
        let n = 1 + next(5);
        let mut q: Vec<String> = (0..n).map(|_| format!("word{}", 1 + next(40))).collect();
        if next(2) == 0 {
            q.push("common".to_owned());
        }
        questions.push(q);
    }
    let mut full = 0;
    for q in &questions {
        let want = memory.search(&scope, q, MAX_CANDIDATES).await.unwrap();
        let got = sqlite.search(&scope, q, MAX_CANDIDATES).await.unwrap();
        let ids = |hits: &[keel_core::recall::RecallHit]| {
            hits.iter()
                .map(|h| h.document.message_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&got), ids(&want), "question {q:?}");
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g.score - w.score).abs() < 1e-9 && (g.coverage - w.coverage).abs() < 1e-9,
                "question {q:?}: {} scored {} / {} on SQLite, {} / {} in memory",
                g.document.message_id,
                g.score,
                g.coverage,
                w.score,
                w.coverage
            );
        }
        if want.len() == MAX_CANDIDATES {
            full += 1;
        }
    }
    // The budgets were reached (the case where which candidates are read decides).
    assert!(
        full >= 5,
        "only {full} questions reached {MAX_CANDIDATES} candidates"
    );
}
