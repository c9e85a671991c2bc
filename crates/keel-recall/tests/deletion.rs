//! `Agent::delete_thread` with recall in the stack, on SQLite and PostgreSQL: every index
//! row of the thread goes (table and full-text index), another thread's stay, and the
//! thread id re-created finds nothing of the old one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use common::*;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::recall::{RecallIndex, terms};
use keel_recall::RecallSettings;
use keel_store::Store;

fn with_secret(secret: &str) -> Vec<Message> {
    let mut t =
        vec![Message::human(format!("The vault word is {secret}, keep it.")).with_id("secret")];
    t.extend(thread());
    t
}

/// Rows of `thread` in the table, rows naming `word` in the table, and rows the
/// full-text index itself still finds for `word`.
async fn rows(store: &Store, thread: &str, word: &str) -> (i64, i64, i64) {
    let term = terms(word).remove(0);
    let in_table = count(
        store,
        "SELECT count(*) FROM recall_documents WHERE session_id = $1",
        thread,
    )
    .await;
    let like = count(
        store,
        "SELECT count(*) FROM recall_documents WHERE document LIKE $1",
        &format!("%{word}%"),
    )
    .await;
    let fts = match store {
        Store::Sqlite(_) => {
            count(
                store,
                // Terms are indexed with their scope's tag (17 characters) in front.
                "SELECT COALESCE(sum(doc), 0) FROM recall_vocab WHERE substr(term, 18) = $1",
                &term,
            )
            .await
        }
        _ => {
            count(
                store,
                "SELECT count(*) FROM recall_documents, unnest(tsvector_to_array(tsv)) AS t \
                 WHERE substr(t, 18) = $1",
                &term,
            )
            .await
        }
    };
    (in_table, like, fts)
}

async fn deletion_on(store: Store) {
    let store = Arc::new(store);
    let model = model();
    let agent = Agent::builder()
        .model(model.clone())
        .checkpointer(store.clone())
        .middleware_shared(recall(store.clone()))
        .middleware_shared(Arc::new(KeepLast(4)))
        .build()
        .unwrap();
    agent
        .invoke("doomed", with_secret("Quokkasaurus"))
        .await
        .unwrap();
    agent
        .invoke("kept", with_secret("Wombatron"))
        .await
        .unwrap();
    let doomed_before = rows(&store, "doomed", "Quokkasaurus").await;
    let kept_before = rows(&store, "kept", "Wombatron").await;
    // The secret's message, and the reply after it, whose context quotes it.
    assert_eq!(doomed_before, (23, 2, 2));
    assert_eq!(kept_before, (23, 2, 2));

    let deleted = agent.delete_thread("doomed").await.unwrap();
    assert!(
        deleted >= 23,
        "the index rows count as deleted records: {deleted}"
    );
    assert_eq!(
        rows(&store, "doomed", "Quokkasaurus").await,
        (0, 0, 0),
        "nothing of the thread is left"
    );
    assert_eq!(
        rows(&store, "kept", "Wombatron").await,
        kept_before,
        "the other thread is untouched"
    );

    // The thread id re-created: the old secret is not recalled, the index holds only
    // the new thread's messages.
    agent
        .invoke(
            "doomed",
            vec![Message::human("What is the vault word Quokkasaurus about?").with_id("q-new")],
        )
        .await
        .unwrap();
    let req = user_requests(&model).pop().unwrap();
    assert_eq!(recall_message(&req.messages), None, "{:?}", req.messages);
    assert_eq!(indexed_ids(&store, "doomed").await, ["q-new"]);
    let scope = RecallSettings::default().scope_for_thread("doomed");
    let hits = store
        .search(&scope, &terms("vault word"), 10)
        .await
        .unwrap();
    assert!(
        hits.iter().all(|h| h.document.message_id == "q-new"),
        "{hits:?}"
    );
    // And the other thread still recalls its secret.
    agent
        .invoke(
            "kept",
            vec![Message::human("Which vault word did I give?").with_id("q-kept")],
        )
        .await
        .unwrap();
    let req = user_requests(&model).pop().unwrap();
    let (_, text) = recall_message(&req.messages).expect("recalled");
    assert!(text.contains("Wombatron"), "{text}");
}

#[tokio::test]
async fn deleting_a_thread_removes_its_index_on_sqlite() {
    let (url, _dir) = sqlite_url();
    deletion_on(Store::connect(&url).await.unwrap()).await;
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_thread_removes_its_index_on_postgres() {
    let options = postgres_schema().await;
    deletion_on(postgres_store(&options).await).await;
}
