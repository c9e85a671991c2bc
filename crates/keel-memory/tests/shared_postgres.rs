//! Two independent connection pools on one database (as two processes would have): a
//! summary folded through one is reused by the other with no model call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use common::backends::{postgres, postgres_url, unique_flow};
use common::*;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::store::{SessionMemoryStore, SessionScope};
use keel_memory::{SessionCompressor, SessionMemoryMiddleware, SessionMemorySettings};
use keel_store::Store;
use keel_testkit::ScriptedModel;

fn settings(scope: &SessionScope) -> SessionMemorySettings {
    SessionMemorySettings::for_scope(scope.clone()).with_pinned_keys(["project_id", "cluster"])
}

async fn shared(a: Arc<Store>, b: Arc<Store>, label: &str) {
    let scope = SessionScope::new(unique_flow(label), "ada", "shared", "");
    seed(a.as_ref(), &scope, 0..30).await;

    let model_a = fold_model();
    let ca = SessionCompressor::new(settings(&scope), a.clone(), a.clone()).unwrap();
    let turn_a = prepare_turn(&ca, &scope, &model_a).await;
    assert_eq!(model_a.calls(), 1);
    assert_eq!(turn_a.state.version, 1);

    // The other pool's model has no answer: any call would fail the fold.
    let model_b = Arc::new(ScriptedModel::new([]));
    let cb = SessionCompressor::new(settings(&scope), b.clone(), b.clone()).unwrap();
    let turn_b = prepare_turn(&cb, &scope, &model_b).await;
    assert_eq!(
        model_b.calls(),
        0,
        "{label}: the second pool reuses the summary"
    );
    assert!(turn_b.folds.is_empty());
    assert_eq!(essence(&turn_b.state), essence(&turn_a.state));
    assert_eq!(
        serde_json::to_string(&turn_b.messages()).unwrap(),
        serde_json::to_string(&turn_a.messages()).unwrap(),
        "{label}: the same request prefix, byte for byte"
    );

    // Messages written through B are folded through B, and A then reuses that fold.
    seed(b.as_ref(), &scope, 30..50).await;
    let model_b = fold_model();
    prepare_turn(&cb, &scope, &model_b).await;
    assert_eq!(model_b.calls(), 1);
    let model_a2 = Arc::new(ScriptedModel::new([]));
    let again = prepare_turn(&ca, &scope, &model_a2).await;
    assert_eq!(model_a2.calls(), 0);
    assert_eq!(again.state.version, 2);
    assert_eq!(again.state.absorbed_count, 40);
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_pools_share_folds() {
    let a = Arc::new(postgres().await);
    let b = Arc::new(Store::connect(&postgres_url()).await.unwrap());
    shared(a, b, "pg-pools").await;
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_agents_share_a_session() {
    // Two agents (as two processes), each with its own pool and middleware.
    let flow = unique_flow("pg-agents");
    let agents: Vec<(Agent, Arc<ScriptedModel>, Arc<Store>)> = {
        let mut v = Vec::new();
        for _ in 0..2 {
            let store = Arc::new(Store::connect(&postgres_url()).await.unwrap());
            let mut s = SessionMemorySettings::for_scope(SessionScope::new(&flow, "ada", "", ""))
                .with_pinned_keys(["project_id", "cluster"]);
            s.n_messages = 4;
            s.fold_batch = 4;
            let mw = SessionMemoryMiddleware::builder(s)
                .store(store.clone())
                .build()
                .unwrap();
            let model = fold_model();
            let agent = Agent::builder()
                .model(model.clone())
                .middleware(mw)
                .build()
                .unwrap();
            v.push((agent, model, store));
        }
        v
    };
    let (a, model_a, store) = &agents[0];
    let (b, model_b, _) = &agents[1];
    a.invoke(
        "s",
        vec![Message::human(
            "I'm working on project PRJ-123 on the EU cluster.",
        )],
    )
    .await
    .unwrap();
    for i in 0..4 {
        a.invoke("s", vec![Message::human(format!("question {i}"))])
            .await
            .unwrap();
    }
    assert_eq!(model_a.internal_calls(), 1, "agent A folded the session");
    // Agent B continues the session on another thread object but the same session id.
    b.invoke("s", vec![Message::human("Which cluster were we on again?")])
        .await
        .unwrap();
    assert_eq!(model_b.internal_calls(), 0, "agent B reuses A's fold");
    let sent = &model_b.requests()[0].messages;
    assert!(
        sent[0].text().contains("- cluster: EU"),
        "{:?}",
        sent[0].text()
    );
    let scope = SessionScope::new(&flow, "ada", "s", "");
    assert_eq!(store.get_state(&scope).await.unwrap().unwrap().version, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sqlite_pools_on_one_file_share_folds() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("keel.db").display());
    let a = Arc::new(Store::connect(&url).await.unwrap());
    let b = Arc::new(Store::connect(&url).await.unwrap());
    shared(a, b, "sqlite-pools").await;
}
