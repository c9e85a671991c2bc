//! `prepare` checks every input before it opens the database: a replay that fails to
//! start creates no database file and writes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::{Path, PathBuf};

use keel_replay::{MemoryOptions, Quiet, ReplayOptions, prepare};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn session() -> PathBuf {
    root().join("examples/sessions/support-prj123.jsonl")
}

fn with_memory(db: &Path) -> ReplayOptions {
    ReplayOptions {
        memory: Some(MemoryOptions {
            n_messages: Some(10),
            pinned_keys: vec!["project_id".into()],
        }),
        db: Some(format!("sqlite://{}?mode=rwc", db.display())),
        ..ReplayOptions::default()
    }
}

async fn fails_without_touching_the_database(
    transcript: &Path,
    options: &ReplayOptions,
    db: &Path,
) -> String {
    let err = match prepare(transcript, options).await {
        Ok(_) => panic!("expected the replay to refuse to start"),
        Err(e) => e,
    };
    assert!(
        !db.exists(),
        "{} was created by a replay that failed to start",
        db.display()
    );
    err.to_string()
}

#[tokio::test]
async fn bad_transcripts_are_refused_before_the_database_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let options = with_memory(&db);

    let err =
        fails_without_touching_the_database(&dir.path().join("missing.jsonl"), &options, &db).await;
    assert!(err.contains("missing.jsonl"), "{err}");

    let bad_json = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad_json,
        "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"1\"}\n{\"role\":\"assistant\",\n",
    )
    .unwrap();
    let err = fails_without_touching_the_database(&bad_json, &options, &db).await;
    assert!(err.contains("bad.jsonl:2:"), "{err}");

    let orphan = dir.path().join("orphan.jsonl");
    std::fs::write(
        &orphan,
        "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"1\"}\n\
         {\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":\"c7\",\"id\":\"2\"}\n\
         {\"role\":\"assistant\",\"content\":\"ok\",\"id\":\"3\"}\n",
    )
    .unwrap();
    let err = fails_without_touching_the_database(&orphan, &options, &db).await;
    assert!(
        err.contains("orphan.jsonl:2: ") && err.contains("c7"),
        "{err}"
    );
}

#[tokio::test]
async fn bad_settings_are_refused_before_the_database_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");

    let mut options = with_memory(&db);
    options.memory = Some(MemoryOptions {
        n_messages: Some(5000),
        pinned_keys: vec![],
    });
    let err = fails_without_touching_the_database(&session(), &options, &db).await;
    assert!(err.contains("n_messages") && err.contains("5000"), "{err}");

    let mut options = with_memory(&db);
    options.memory = Some(MemoryOptions {
        n_messages: None,
        pinned_keys: vec!["project id".into()],
    });
    let err = fails_without_touching_the_database(&session(), &options, &db).await;
    assert!(err.contains("project id"), "{err}");

    let yaml = dir.path().join("summarization.yaml");
    std::fs::write(
        &yaml,
        "summarization:\n  enabled: true\n  trigerr:\n    type: tokens\n    value: 10\n",
    )
    .unwrap();
    let mut options = with_memory(&db);
    options.config = Some(yaml);
    let err = fails_without_touching_the_database(&session(), &options, &db).await;
    assert!(err.contains("trigerr"), "{err}");
}

#[tokio::test]
async fn a_replay_with_session_memory_stores_its_session_in_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let prepared = prepare(session(), &with_memory(&db)).await.unwrap();
    assert!(matches!(
        prepared.thread_id.split_once('-'),
        Some(("replay", _))
    ));
    let replay = prepared.run(&mut Quiet).await.unwrap();
    assert!(db.exists());
    let summary = replay
        .report
        .summary
        .expect("session memory summarized the session");
    assert!(summary.contains("PRJ-123"), "{summary}");
    assert!(replay.report.totals.summary_calls > 0);

    // A second replay of the same file is a new session: nothing collides.
    let again = prepare(session(), &with_memory(&db)).await.unwrap();
    assert_ne!(again.thread_id, prepared.thread_id);
    again.run(&mut Quiet).await.unwrap();
}

#[tokio::test]
async fn without_session_memory_or_db_no_database_is_needed() {
    let options = ReplayOptions {
        config: Some(root().join("examples/summarization.yaml")),
        ..ReplayOptions::default()
    };
    let prepared = prepare(session(), &options).await.unwrap();
    let replay = prepared.run(&mut Quiet).await.unwrap();
    assert!(replay.report.totals.sent_tokens < replay.report.totals.full_history_tokens);
    assert!(
        !Path::new("keel.db").exists(),
        "no default database without session memory"
    );
}

/// `--session ID`: two replays running at once into one session of one SQLite file, each
/// with its own connection pool (as two processes would have), both finish and the
/// session holds every message of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_replays_on_one_session_lose_nothing() {
    use keel_core::store::{ChatHistoryStore, SessionMemoryStore, SessionScope};

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    // The bundled session, and a copy with every id renamed (ids are unique per scope).
    let copy = dir.path().join("copy.jsonl");
    let text = std::fs::read_to_string(session()).unwrap();
    let renamed: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let id = format!("b-{}", v["id"].as_str().unwrap());
            v["id"] = id.into();
            if let Some(c) = v.get("tool_call_id").and_then(|c| c.as_str()) {
                v["tool_call_id"] = format!("b-{c}").into();
            }
            if let Some(calls) = v.get_mut("tool_calls").and_then(|c| c.as_array_mut()) {
                for call in calls {
                    let id = format!("b-{}", call["id"].as_str().unwrap());
                    call["id"] = id.into();
                }
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&copy, renamed.join("\n") + "\n").unwrap();

    let mut options = with_memory(&db);
    options.db = Some(format!("sqlite://{}", db.display()));
    options.session = Some("shared-session".into());
    let runs = [session(), copy.clone()].map(|path| {
        let options = options.clone();
        tokio::spawn(async move {
            let prepared = prepare(&path, &options).await.unwrap();
            prepared.run(&mut Quiet).await.unwrap().report.totals.calls
        })
    });
    let mut calls = 0;
    for run in runs {
        calls += run.await.unwrap();
    }
    assert_eq!(calls, 2 * 102);

    let store = keel_store::Store::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let scope = SessionScope::new(
        keel_replay::setup::REPLAY_FLOW_ID,
        keel_replay::setup::REPLAY_USER_ID,
        "shared-session",
        "",
    );
    let stored = store.last_n(&scope, 10_000).await.unwrap();
    let messages = text.lines().count() - 1; // the system prompt is not history
    assert_eq!(stored.len(), 2 * messages);
    let state = store.get_state(&scope).await.unwrap().unwrap();
    assert!(state.version >= 2, "both replays folded into one state");
}
