//! 64 tasks fold the same session at once, on each backend: versions rise by exactly one
//! per save, one winner per version, the cursor never moves back, losers make no extra
//! model call, and the final state equals a sequential run's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::backends::{postgres, sqlite_file, unique_flow};
use common::*;
use keel_core::message::Message;
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile};
use keel_core::store::{ChatHistoryStore, SaveOutcome, SessionMemoryStore, SessionScope};
use keel_core::stream::StreamWriter;
use keel_memory::{FoldOutcome, SessionCompressor, SessionMemorySettings, TurnMemory};
use keel_store::memory::MemoryStore;
use keel_testkit::ScriptedModel;
use tokio::sync::Barrier;

const TASKS: usize = 64;

/// Holds every fold call until all tasks are inside one, so all of them read version 0.
struct GatedModel {
    inner: Arc<ScriptedModel>,
    gate: Arc<Barrier>,
}

#[async_trait]
impl ChatModel for GatedModel {
    fn profile(&self) -> &ModelProfile {
        self.inner.profile()
    }
    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        self.gate.wait().await;
        self.inner.invoke(request).await
    }
}

fn settings(scope: &SessionScope) -> SessionMemorySettings {
    SessionMemorySettings::for_scope(scope.clone()).with_pinned_keys(["project_id", "cluster"])
}

/// Runs the compressor to completion, one turn after another, on a fresh scope.
async fn sequential<S>(
    store: &Arc<S>,
    scope: &SessionScope,
    turns: usize,
) -> keel_core::store::SessionMemoryState
where
    S: ChatHistoryStore + SessionMemoryStore + 'static,
{
    let c = SessionCompressor::new(settings(scope), store.clone(), store.clone()).unwrap();
    let model = fold_model();
    for _ in 0..turns {
        prepare_turn(&c, scope, &model).await;
    }
    store.get_state(scope).await.unwrap().unwrap()
}

fn check_saves(saves: &[SaveRecord]) -> usize {
    let mut won: Vec<&SaveRecord> = saves
        .iter()
        .filter(|s| matches!(s.outcome, SaveOutcome::Saved { .. }))
        .collect();
    won.sort_by_key(|s| s.expected_version);
    for (i, s) in won.iter().enumerate() {
        assert_eq!(
            s.expected_version, i as u64,
            "one winner per version, no gap: {won:?}"
        );
        assert_eq!(
            s.outcome,
            SaveOutcome::Saved {
                version: i as u64 + 1
            },
            "versions rise by exactly one"
        );
        if i > 0 {
            assert!(s.cursor > won[i - 1].cursor, "the cursor never moves back");
        }
    }
    for s in saves.iter().filter(|s| s.outcome == SaveOutcome::Conflict) {
        assert!(
            s.expected_version < won.len() as u64,
            "a conflict only where a winner exists"
        );
    }
    won.len()
}

/// Every task made exactly one model call per fold outcome, and stopped after losing.
fn check_losers(results: &[(TurnMemory, usize)]) {
    for (turn, calls) in results {
        assert_eq!(
            *calls,
            turn.folds.len(),
            "one model call per fold attempt: {:?}",
            turn.folds
        );
        if let Some(i) = turn
            .folds
            .iter()
            .position(|f| matches!(f, FoldOutcome::Superseded { .. }))
        {
            assert_eq!(i, turn.folds.len() - 1, "a loser stops folding");
        }
        assert!(
            turn.folds
                .iter()
                .all(|f| !matches!(f, FoldOutcome::Failed { .. })),
            "{:?}",
            turn.folds
        );
    }
}

async fn race<S>(store: Arc<S>, label: &str)
where
    S: ChatHistoryStore + SessionMemoryStore + 'static,
{
    // Round 1: exactly one fold is due, and all 64 tasks are inside the model call at once.
    let flow = unique_flow(label);
    let scope = SessionScope::new(&flow, "u", "race", "");
    seed(store.as_ref(), &scope, 0..30).await;
    let recording = Arc::new(RecordingStore::new(store.clone()));
    let gate = Arc::new(Barrier::new(TASKS));
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let c = SessionCompressor::new(settings(&scope), store.clone(), recording.clone()).unwrap();
        let model = fold_model();
        let gated: Arc<dyn ChatModel> = Arc::new(GatedModel {
            inner: model.clone(),
            gate: gate.clone(),
        });
        let scope = scope.clone();
        handles.push(tokio::spawn(async move {
            let turn = c
                .prepare(&scope, &input(), &gated, &StreamWriter::disconnected())
                .await
                .unwrap();
            (turn, model.calls())
        }));
    }
    let mut results = Vec::new();
    for h in handles {
        results.push(h.await.unwrap());
    }
    check_losers(&results);
    assert_eq!(
        results.iter().map(|(_, c)| c).sum::<usize>(),
        TASKS,
        "64 calls, none extra"
    );
    let winners = results
        .iter()
        .filter(|(t, _)| matches!(t.folds[..], [FoldOutcome::Folded { .. }]))
        .count();
    assert_eq!(winners, 1, "{label}: exactly one winner");
    assert_eq!(check_saves(&recording.saves.lock()), 1);
    let stored = store.get_state(&scope).await.unwrap().unwrap();
    for (turn, _) in &results {
        assert_eq!(
            essence(&turn.state),
            essence(&stored),
            "every loser uses the winner's state"
        );
    }
    let seq_scope = SessionScope::new(&flow, "u", "race-sequential", "");
    seed(store.as_ref(), &seq_scope, 0..30).await;
    assert_eq!(
        essence(&stored),
        essence(&sequential(&store, &seq_scope, TASKS).await),
        "{label}"
    );

    // Rounds of 64 free-running tasks catch a 200-message session up.
    let scope = SessionScope::new(&flow, "u", "catch-up", "");
    seed(store.as_ref(), &scope, 0..200).await;
    let recording = Arc::new(RecordingStore::new(store.clone()));
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 20, "{label}: catch-up did not converge");
        let mut handles = Vec::new();
        for _ in 0..TASKS {
            let c =
                SessionCompressor::new(settings(&scope), store.clone(), recording.clone()).unwrap();
            let model = fold_model();
            let scope = scope.clone();
            handles.push(tokio::spawn(async move {
                let turn = c
                    .prepare(
                        &scope,
                        &input(),
                        &dyn_model(&model),
                        &StreamWriter::disconnected(),
                    )
                    .await
                    .unwrap();
                (turn, model.calls())
            }));
        }
        let mut results = Vec::new();
        for h in handles {
            results.push(h.await.unwrap());
        }
        check_losers(&results);
        if results.iter().all(|(t, _)| t.folds.is_empty()) {
            break;
        }
    }
    let saves = check_saves(&recording.saves.lock());
    assert_eq!(
        saves, 3,
        "{label}: 180 of 190 older messages in three folds of 60"
    );
    let seq_scope = SessionScope::new(&flow, "u", "catch-up-sequential", "");
    seed(store.as_ref(), &seq_scope, 0..200).await;
    assert_eq!(
        essence(&store.get_state(&scope).await.unwrap().unwrap()),
        essence(&sequential(&store, &seq_scope, 3).await),
        "{label}: the final state equals a sequential run's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_in_memory() {
    race(Arc::new(MemoryStore::new()), "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_on_sqlite_wal_file() {
    let (store, _dir) = sqlite_file().await;
    race(Arc::new(store), "sqlite").await;
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_on_postgres() {
    race(Arc::new(postgres().await), "postgres").await;
}
