//! The conformance suite on the in-memory backend.

use std::sync::Arc;

use keel_store::{Backend, Storage, Store, conformance, memory::MemoryStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_conforms() {
    conformance::run_all(Arc::new(MemoryStore::new()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_url_store_conforms() {
    let store = Store::connect("memory:").await.unwrap();
    assert_eq!(store.backend(), Backend::Memory);
    conformance::run_all(Arc::new(store)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_recall_index_conforms() {
    conformance::run_recall(Arc::new(MemoryStore::new()))
        .await
        .unwrap();
    conformance::run_recall(Arc::new(Store::memory()))
        .await
        .unwrap();
}

#[tokio::test]
async fn clones_share_data() {
    use keel_core::store::{SessionMemoryState, SessionMemoryStore, SessionScope};
    let a = MemoryStore::new();
    let b = a.clone();
    let scope = SessionScope::new("f", "u", "s", "");
    a.save_state(&scope, &SessionMemoryState::default(), 0)
        .await
        .unwrap();
    assert_eq!(b.get_state(&scope).await.unwrap().unwrap().version, 1);
}
