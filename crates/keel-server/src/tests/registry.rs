//! Thread and run records on SQLite: owner scoping and recovery after a restart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use keel_server::registry::{Registry, RunRecord, RunStatus, Strategy, ThreadRecord, ThreadStatus};
use keel_store::Store;
use serde_json::{Map, json};

fn thread(id: &str, owner: &str, status: ThreadStatus) -> ThreadRecord {
    ThreadRecord {
        thread_id: id.into(),
        owner: owner.into(),
        created_at_ms: 1,
        updated_at_ms: 1,
        metadata: Map::new(),
        status,
    }
}

fn run(id: &str, thread_id: &str, status: RunStatus, at: i64) -> RunRecord {
    RunRecord {
        run_id: id.into(),
        thread_id: thread_id.into(),
        assistant_id: "a".into(),
        created_at_ms: at,
        updated_at_ms: at,
        status,
        metadata: Map::new(),
        strategy: Strategy::Enqueue,
        kwargs: json!({}),
        error: None,
    }
}

#[tokio::test]
async fn records_are_scoped_and_a_restart_closes_unfinished_runs() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let registry = Registry::for_store(&store).await.unwrap();
    assert!(!registry.is_shared());
    assert!(
        registry
            .insert_thread(thread("t1", "alice", ThreadStatus::Busy))
            .await
            .unwrap()
    );
    assert!(
        !registry
            .insert_thread(thread("t1", "bob", ThreadStatus::Idle))
            .await
            .unwrap()
    );
    assert!(registry.thread("bob", "t1").await.unwrap().is_none());
    assert_eq!(
        registry.thread("alice", "t1").await.unwrap().unwrap().owner,
        "alice"
    );
    registry
        .insert_run(&run("r1", "t1", RunStatus::Success, 1))
        .await
        .unwrap();
    registry
        .insert_run(&run("r2", "t1", RunStatus::Running, 2))
        .await
        .unwrap();
    let ids: Vec<String> = registry
        .runs("t1", None, 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(ids, ["r2", "r1"], "newest first");

    assert_eq!(registry.recover_after_restart().await.unwrap(), 1);
    let r2 = registry.run("t1", "r2").await.unwrap().unwrap();
    assert_eq!(r2.status, RunStatus::Error);
    assert!(r2.error.unwrap().contains("server stopped"));
    assert_eq!(
        registry.run("t1", "r1").await.unwrap().unwrap().status,
        RunStatus::Success
    );
    assert_eq!(
        registry
            .thread("alice", "t1")
            .await
            .unwrap()
            .unwrap()
            .status,
        ThreadStatus::Idle
    );
    assert_eq!(registry.recover_after_restart().await.unwrap(), 0);

    assert!(!registry.delete_thread("bob", "t1").await.unwrap());
    assert!(registry.delete_thread("alice", "t1").await.unwrap());
    assert!(registry.runs("t1", None, 0, 10).await.unwrap().is_empty());
}

/// Search on SQLite answers as the in-memory registry does (which sorts and pages in
/// Rust): filters by owner, status, metadata and ids; sorts by each key both ways;
/// pages with offset and limit.
#[tokio::test]
async fn search_in_sql_matches_the_in_memory_registry() {
    use keel_server::registry::ThreadFilter;

    let store = Store::connect("sqlite::memory:").await.unwrap();
    let sqlite = Registry::for_store(&store).await.unwrap();
    let memory = Registry::memory();
    for i in 0..40_i64 {
        let mut record = thread(
            &format!("t{:02}", (i * 17) % 40),
            if i % 5 == 0 { "bob" } else { "alice" },
            if i % 3 == 0 {
                ThreadStatus::Busy
            } else {
                ThreadStatus::Idle
            },
        );
        record.created_at_ms = 1000 + i;
        record.updated_at_ms = 5000 - (i % 7) * 10;
        record.metadata.insert("graph_id".into(), json!("agent"));
        record.metadata.insert("n".into(), json!(i % 4));
        for r in [&sqlite, &memory] {
            assert!(r.insert_thread(record.clone()).await.unwrap());
        }
    }
    let filters = [
        ThreadFilter::default(),
        ThreadFilter {
            status: Some(ThreadStatus::Busy),
            ..ThreadFilter::default()
        },
        ThreadFilter {
            metadata: Map::from_iter([("n".to_owned(), json!(2))]),
            ..ThreadFilter::default()
        },
        ThreadFilter {
            metadata: Map::from_iter([("graph_id".to_owned(), json!("agent"))]),
            status: Some(ThreadStatus::Idle),
            ..ThreadFilter::default()
        },
        ThreadFilter {
            ids: Some(vec![
                "t03".into(),
                "t07".into(),
                "t11".into(),
                "nope".into(),
            ]),
            ..ThreadFilter::default()
        },
    ];
    let ids = |v: Vec<ThreadRecord>| v.into_iter().map(|t| t.thread_id).collect::<Vec<_>>();
    for filter in &filters {
        for sort in ["created_at", "updated_at", "thread_id"] {
            for ascending in [true, false] {
                for (offset, limit) in [(0, 100), (0, 1), (3, 5), (30, 10)] {
                    let want = memory
                        .search_threads("alice", filter, sort, ascending, offset, limit)
                        .await
                        .unwrap();
                    let got = sqlite
                        .search_threads("alice", filter, sort, ascending, offset, limit)
                        .await
                        .unwrap();
                    assert!(want.iter().all(|t| t.owner == "alice"));
                    assert_eq!(
                        ids(got),
                        ids(want),
                        "{filter:?} by {sort} asc={ascending} offset={offset} limit={limit}"
                    );
                }
            }
        }
    }
}

/// A database written before the search columns existed is migrated at start: the
/// columns are added and filled from each record.
#[tokio::test]
async fn an_older_threads_table_gains_the_search_columns() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/old.db", dir.path().display());
    let store = Store::connect(&url).await.unwrap();
    let Store::Sqlite(s) = &store else { panic!() };
    sqlx::query("CREATE TABLE keel_server_threads (thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL, record TEXT NOT NULL)")
        .execute(s.pool())
        .await
        .unwrap();
    for (i, id) in ["old-b", "old-a"].iter().enumerate() {
        let mut record = thread(id, "alice", ThreadStatus::Idle);
        record.created_at_ms = i as i64;
        sqlx::query(
            "INSERT INTO keel_server_threads (thread_id, owner, record) VALUES ($1, $2, $3)",
        )
        .bind(*id)
        .bind("alice")
        .bind(serde_json::to_string(&record).unwrap())
        .execute(s.pool())
        .await
        .unwrap();
    }
    let registry = Registry::for_store(&store).await.unwrap();
    let found = registry
        .search_threads("alice", &Default::default(), "created_at", true, 0, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = found.iter().map(|t| t.thread_id.as_str()).collect();
    assert_eq!(ids, ["old-b", "old-a"]);
}
