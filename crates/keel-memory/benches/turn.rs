//! Per-turn cost of session memory when no fold is due (the common case: 19 turns out of
//! 20), on the in-memory and SQLite (file, WAL) backends, plus PostgreSQL when
//! `KEEL_TEST_POSTGRES_URL` is set; and the cost of parsing a fold answer.
//!
//! ```sh
//! cargo bench -p keel-memory --bench turn
//! ```

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)] // bench harness code

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use keel_core::message::Message;
use keel_core::model::ChatModel;
use keel_core::store::{
    ChatHistoryStore, Cursor, SessionMemoryState, SessionMemoryStore, SessionScope, StoredMessage,
};
use keel_core::stream::StreamWriter;
use keel_memory::fold::parse::parse_fold_output;
use keel_memory::{SessionCompressor, SessionMemorySettings};
use keel_store::Store;
use keel_testkit::ScriptedModel;

const HISTORY: usize = 1_000;

/// A 1,000-message session folded up to message 979: 10 unfolded older messages, then
/// the last 10. A turn loads the state and the window and counts; it does not fold.
async fn session(store: &Store, flow: &str) -> SessionScope {
    let scope = SessionScope::new(flow, "bench", "s", "");
    let rows: Vec<StoredMessage> = (0..HISTORY)
        .map(|i| StoredMessage {
            timestamp_ms: 1_700_000_000_000 + i as i64,
            message: Message::human(format!("message {i} with a few words of content"))
                .with_id(format!("m{i:05}")),
        })
        .collect();
    for chunk in rows.chunks(200) {
        store.append(&scope, chunk).await.unwrap();
    }
    let state = SessionMemoryState {
        summary: "- the user works on PRJ-123 on the EU cluster\n".repeat(20),
        covered_until: Some(Cursor {
            timestamp_ms: 1_700_000_000_000 + 979,
            message_id: "m00979".into(),
        }),
        absorbed_count: 980,
        ..Default::default()
    };
    store.save_state(&scope, &state, 0).await.unwrap();
    scope
}

fn prepare_without_fold(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut backends = vec![
        ("memory", "memory:".to_owned()),
        (
            "sqlite",
            format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("bench.db").display()
            ),
        ),
    ];
    if let Ok(url) = std::env::var("KEEL_TEST_POSTGRES_URL") {
        backends.push(("postgres", url));
    }
    let model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([]));
    let current = [Message::human("Which cluster were we on again?").with_id("current")];
    let flow = format!("bench-{}", std::process::id());
    let mut group = c.benchmark_group("session_memory_turn_without_fold");
    for (name, url) in backends {
        let store = Arc::new(rt.block_on(Store::connect(&url)).unwrap());
        let scope = rt.block_on(session(&store, &flow));
        let settings =
            SessionMemorySettings::for_scope(scope.clone()).with_pinned_keys(["project_id"]);
        let compressor = SessionCompressor::new(settings, store.clone(), store.clone()).unwrap();
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async {
                let turn = compressor
                    .prepare(&scope, &current, &model, &StreamWriter::disconnected())
                    .await
                    .unwrap();
                assert!(turn.folds.is_empty());
                black_box(turn.messages())
            })
        });
    }
    group.finish();
}

fn parse_answer(c: &mut Criterion) {
    let summary: String = (0..300).map(|i| format!("word{i} ")).collect();
    let answer = format!(
        "Here is the updated memory:\n```json\n{{\"pinned\": {{\"project_id\": \"PRJ-123\", \"cluster\": \"EU\",}}, \"summary\": \"{summary}\",}}\n```\nDone."
    );
    c.bench_function("session_memory_parse_fold_answer_300_words", |b| {
        b.iter(|| black_box(parse_fold_output(black_box(&answer)).unwrap()))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = prepare_without_fold, parse_answer
}
criterion_main!(benches);
