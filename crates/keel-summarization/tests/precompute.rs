//! Speculative summaries (`precompute_at`): the crossing call reuses a summary written
//! in the background, with single flight per thread (and across processes through the
//! store's lease), a bound per process, and cancellation when the thread is deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use keel_core::middleware::Middleware;
use keel_core::store::{StoreError, SummaryStore};
use keel_summarization::cache::SummaryCache;
use keel_summarization::middleware::{Action, SummarizationMiddleware};
use parking_lot::Mutex;
use serde_json::Value;

/// Trigger at 20 messages, keep 6, speculative summaries from 16 on.
fn precomputing(share: Option<f64>) -> SummarizationMiddleware {
    let cfg = config()
        .trigger(msgs(20))
        .keep(msgs(6))
        .precompute_at(share)
        .build()
        .unwrap();
    middleware(cfg).build().unwrap()
}

/// `precomputing(Some(0.8))` with a summary store shared with other "processes".
fn precomputing_with(store: &Arc<LeaseStore>) -> SummarizationMiddleware {
    let cfg = config()
        .trigger(msgs(20))
        .keep(msgs(6))
        .precompute_at(0.8)
        .build()
        .unwrap();
    middleware(cfg)
        .cache(Arc::new(SummaryCache::new(8).with_store(store.clone())))
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_crossing_call_reuses_the_background_summary_and_waits_for_no_model() {
    let mw = precomputing(Some(0.8));
    let model = SummaryModel::slow(Duration::from_millis(200));
    let terminal = Terminal::default();
    // 15 messages: under 0.8 x 20, nothing starts.
    run(&mw, request(chat(15, 20), model.clone(), "t"), &terminal)
        .await
        .unwrap();
    mw.settle("t").await;
    assert_eq!((model.calls(), mw.precomputed_count()), (0, 0));
    // 16 messages: the request passes untouched and the summary is written behind it.
    let (req, mut rx) = request_with_events(chat(16, 20), model.clone(), "t");
    run(&mw, req, &terminal).await.unwrap();
    assert_eq!(
        terminal.last().messages.len(),
        16,
        "the call itself is untouched"
    );
    assert!(
        custom_events(&mut rx).is_empty(),
        "nothing announced for a background summary"
    );
    mw.settle("t").await;
    assert_eq!((model.calls(), mw.precomputed_count()), (1, 1));
    // 20 messages cross the trigger: the precomputed summary serves, no model call.
    let (req, mut rx) = request_with_events(chat(20, 20), model.clone(), "t");
    let started = std::time::Instant::now();
    let prepared = mw.prepare(&req).await;
    let waited = started.elapsed();
    assert_eq!(prepared.report.action, Action::CacheReused);
    assert!(prepared.report.precomputed, "{:?}", prepared.report);
    assert_eq!(model.calls(), 1, "the crossing call made no summary call");
    assert!(
        waited < Duration::from_millis(150),
        "waited {waited:?} for a summary"
    );
    assert!(is_summary(&prepared.request.messages[0]));
    // Every message after the precomputed cut is sent verbatim, the 4 new ones included.
    let sent = ids(&prepared.request.messages[1..]);
    assert!(
        sent.ends_with(&["m16", "m17", "m18", "m19"].map(String::from)),
        "{sent:?}"
    );
    let events = custom_events(&mut rx);
    assert_eq!(event_types(&events), ["context_compacted"], "{events:?}");
    assert_eq!(events[0]["precomputed"], Value::Bool(true), "{events:?}");
}

#[tokio::test]
async fn without_precompute_at_the_crossing_call_blocks_and_announces_it() {
    let mw = precomputing(None);
    let model = SummaryModel::slow(Duration::from_millis(50));
    let terminal = Terminal::default();
    run(&mw, request(chat(16, 20), model.clone(), "t"), &terminal)
        .await
        .unwrap();
    mw.settle("t").await;
    assert_eq!(model.calls(), 0);
    let (req, mut rx) = request_with_events(chat(20, 20), model.clone(), "t");
    let prepared = mw.prepare(&req).await;
    assert_eq!(prepared.report.action, Action::Compacted);
    assert!(!prepared.report.precomputed);
    assert_eq!(model.calls(), 1);
    let events = custom_events(&mut rx);
    assert_eq!(
        event_types(&events),
        ["context_compacting", "context_compacted"],
        "{events:?}"
    );
    assert!(events[1].get("precomputed").is_none(), "{events:?}");
}

#[tokio::test]
async fn a_crossing_call_during_the_background_summary_waits_for_it_instead_of_writing_another() {
    let mw = precomputing(Some(0.8));
    let model = SummaryModel::slow(Duration::from_millis(300));
    let terminal = Terminal::default();
    run(&mw, request(chat(16, 20), model.clone(), "t"), &terminal)
        .await
        .unwrap();
    // Cross at once, while the background summary is still being written.
    let (req, mut rx) = request_with_events(chat(20, 20), model.clone(), "t");
    let prepared = mw.prepare(&req).await;
    assert_eq!(
        prepared.report.action,
        Action::CacheReused,
        "{:?}",
        prepared.report
    );
    assert!(prepared.report.precomputed);
    assert_eq!(model.calls(), 1, "one summary for the thread");
    assert_eq!(event_types(&custom_events(&mut rx)), ["context_compacted"]);
}

#[tokio::test]
async fn a_compacted_thread_writes_its_next_fold_ahead_too() {
    let mw = precomputing(Some(0.8));
    let model = SummaryModel::new();
    let terminal = Terminal::default();
    let mut compacted_blocking = 0;
    let mut reused_precomputed = 0;
    for n in 10..=60 {
        mw.settle("t").await;
        let prepared = mw.prepare(&request(chat(n, 20), model.clone(), "t")).await;
        match prepared.report.action {
            Action::Compacted => compacted_blocking += 1,
            Action::CacheReused if prepared.report.precomputed => reused_precomputed += 1,
            _ => {}
        }
        run(&mw, request(chat(n, 20), model.clone(), "t"), &terminal)
            .await
            .unwrap();
    }
    assert_eq!(compacted_blocking, 0, "no call waited for a summary");
    assert!(reused_precomputed > 30, "{reused_precomputed}");
    assert!(
        mw.precomputed_count() >= 3,
        "{} folds ahead",
        mw.precomputed_count()
    );
}

#[tokio::test]
async fn deleting_the_thread_stops_its_background_summary_and_nothing_comes_back() {
    let store = Arc::new(LeaseStore::default());
    let mw = precomputing_with(&store);
    let model = SummaryModel::slow(Duration::from_millis(300));
    let terminal = Terminal::default();
    run(&mw, request(chat(16, 20), model.clone(), "gone"), &terminal)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(model.calls(), 1, "the background summary started");
    mw.delete_thread_data("gone").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        store.values.lock().is_empty(),
        "a stopped summary wrote back"
    );
    assert!(
        mw.cache()
            .get(&mw.cache_key(
                "gone",
                &request(vec![], model.clone(), "gone"),
                &CharCounter
            ))
            .await
            .is_none()
    );
    assert_eq!(mw.precomputed_count(), 0);
}

#[tokio::test]
async fn processes_sharing_a_store_write_a_thread_ahead_once() {
    let store = Arc::new(LeaseStore::default());
    let build = || precomputing_with(&store);
    // Two "processes": their own middleware and in-process cache, one store.
    let (a, b) = (build(), build());
    let model = SummaryModel::slow(Duration::from_millis(200));
    let terminal = Terminal::default();
    run(&a, request(chat(16, 20), model.clone(), "t"), &terminal)
        .await
        .unwrap();
    run(&b, request(chat(16, 20), model.clone(), "t"), &terminal)
        .await
        .unwrap();
    a.settle("t").await;
    b.settle("t").await;
    assert_eq!(model.calls(), 1, "the lease let one process write it");
    assert_eq!(a.precomputed_count() + b.precomputed_count(), 1);
    // The other process reuses it from the store when its thread crosses.
    let loser = if a.precomputed_count() == 1 { &b } else { &a };
    let prepared = loser
        .prepare(&request(chat(20, 20), model.clone(), "t"))
        .await;
    assert_eq!(prepared.report.action, Action::CacheReused);
    assert!(prepared.report.precomputed);
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn background_summaries_are_bounded_per_process() {
    let cfg = config()
        .trigger(msgs(20))
        .keep(msgs(6))
        .precompute_at(0.8)
        .precompute_max_concurrent(1)
        .build()
        .unwrap();
    // Two middleware with one setting share the process's single slot.
    let (a, b) = (
        middleware(cfg.clone()).build().unwrap(),
        middleware(cfg).build().unwrap(),
    );
    let model = SummaryModel::slow(Duration::from_millis(200));
    let terminal = Terminal::default();
    run(&a, request(chat(16, 20), model.clone(), "t1"), &terminal)
        .await
        .unwrap();
    run(&b, request(chat(16, 20), model.clone(), "t2"), &terminal)
        .await
        .unwrap();
    a.settle("t1").await;
    b.settle("t2").await;
    assert_eq!(model.calls(), 1, "the second thread found the slot busy");
    // The slot is free again: the next call near the trigger starts one.
    run(&b, request(chat(17, 20), model.clone(), "t2"), &terminal)
        .await
        .unwrap();
    b.settle("t2").await;
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn a_failed_background_summary_leaves_the_blocking_path_to_the_crossing_call() {
    let mw = precomputing(Some(0.8));
    let model = SummaryModel::with(|n| {
        if n == 1 {
            Err(keel_core::model::ModelError::new(
                keel_core::model::ModelErrorKind::InvalidRequest,
                "refused",
            ))
        } else {
            Ok(format!("- summary #{n}"))
        }
    });
    let terminal = Terminal::default();
    run(&mw, request(chat(16, 20), model.clone(), "t"), &terminal)
        .await
        .unwrap();
    mw.settle("t").await;
    assert_eq!(mw.precomputed_count(), 0);
    let prepared = mw.prepare(&request(chat(20, 20), model.clone(), "t")).await;
    assert_eq!(
        prepared.report.action,
        Action::Compacted,
        "{:?}",
        prepared.report
    );
    assert!(!prepared.report.precomputed);
}

/// A summary store with real leases, as the SQL stores have.
#[derive(Default)]
struct LeaseStore {
    values: Mutex<std::collections::HashMap<String, Value>>,
    leases: Mutex<std::collections::HashMap<String, String>>,
}

#[async_trait::async_trait]
impl SummaryStore for LeaseStore {
    async fn get_summary(&self, key: &str) -> Result<Option<Value>, StoreError> {
        Ok(self.values.lock().get(key).cloned())
    }
    async fn put_summary(&self, key: &str, value: &Value) -> Result<(), StoreError> {
        self.values.lock().insert(key.to_owned(), value.clone());
        Ok(())
    }
    async fn delete_summaries(&self, prefix: &str) -> Result<u64, StoreError> {
        let mut map = self.values.lock();
        let before = map.len();
        map.retain(|k, _| !k.starts_with(prefix));
        self.leases.lock().retain(|k, _| !k.starts_with(prefix));
        Ok((before - map.len()) as u64)
    }
    async fn try_lease(&self, key: &str, holder: &str, _: Duration) -> Result<bool, StoreError> {
        let mut leases = self.leases.lock();
        match leases.get(key) {
            Some(h) if h != holder => Ok(false),
            _ => {
                leases.insert(key.to_owned(), holder.to_owned());
                Ok(true)
            }
        }
    }
    async fn release_lease(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        let mut leases = self.leases.lock();
        if leases.get(key).is_some_and(|h| h == holder) {
            leases.remove(key);
        }
        Ok(())
    }
}

/// The prefix a provider caches (system prompt, tools, summary message) is the same
/// bytes whether the summary was written ahead or on crossing, and stays the same on
/// every call the summary serves.
#[tokio::test]
async fn the_precomputed_and_the_blocking_request_are_the_same_bytes() {
    let system = keel_core::message::Message::system("You are a support assistant.");
    let tools = vec![keel_core::tool::ToolSpec::new(
        "lookup",
        "looks something up",
        serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    )];
    let with = |mut r: keel_core::middleware::ModelRequest| {
        r.system = Some(system.clone());
        r.tools = Arc::new(tools.clone());
        r
    };
    // Trigger 20, keep 6: the blocking path cuts at 14 on crossing; written ahead at 16,
    // the speculative cut keeps 6 - (20 - 16) = 2, also at 14.
    let (ahead, blocking) = (precomputing(Some(0.8)), precomputing(None));
    let (model_a, model_b) = (SummaryModel::new(), SummaryModel::new());
    let terminal = Terminal::default();
    run(
        &ahead,
        with(request(chat(16, 20), model_a.clone(), "t")),
        &terminal,
    )
    .await
    .unwrap();
    ahead.settle("t").await;
    let a = ahead
        .prepare(&with(request(chat(20, 20), model_a.clone(), "t")))
        .await;
    let b = blocking
        .prepare(&with(request(chat(20, 20), model_b.clone(), "t")))
        .await;
    assert!(a.report.precomputed && !b.report.precomputed);
    assert_eq!(
        model_a.last_prompt(),
        model_b.last_prompt(),
        "the same fold"
    );
    let bytes = |p: &keel_summarization::middleware::Prepared| {
        serde_json::to_string(&(&p.request.system, &*p.request.tools, &*p.request.messages))
            .unwrap()
    };
    assert_eq!(bytes(&a), bytes(&b));
    // Later calls served by the same summary send the same prefix.
    let prefix = |p: &keel_summarization::middleware::Prepared| {
        serde_json::to_string(&(&p.request.system, &*p.request.tools, &p.request.messages[0]))
            .unwrap()
    };
    for n in 21..24 {
        let later = ahead
            .prepare(&with(request(chat(n, 20), model_a.clone(), "t")))
            .await;
        assert_eq!(prefix(&later), prefix(&a), "call at {n} messages");
    }
}

/// A process whose thread crosses while another process writes its summary ahead
/// waits for that summary (through the store's lease) instead of writing a second one.
#[tokio::test]
async fn a_crossing_call_in_another_process_waits_for_the_summary_written_ahead() {
    let store = Arc::new(LeaseStore::default());
    let build = || precomputing_with(&store);
    let (a, b) = (build(), build());
    let model = SummaryModel::slow(Duration::from_millis(400));
    let terminal = Terminal::default();
    run(&a, request(chat(16, 20), model.clone(), "t"), &terminal)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(model.calls(), 1, "A is writing ahead");
    let (req, mut rx) = request_with_events(chat(20, 20), model.clone(), "t");
    let prepared = b.prepare(&req).await;
    assert_eq!(
        prepared.report.action,
        Action::CacheReused,
        "{:?}",
        prepared.report
    );
    assert!(prepared.report.precomputed);
    assert_eq!(model.calls(), 1, "one summary for the thread across both");
    assert_eq!(event_types(&custom_events(&mut rx)), ["context_compacted"]);
    a.settle("t").await;
}
