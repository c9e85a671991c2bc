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
