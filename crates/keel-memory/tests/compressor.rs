//! The per-turn work with an in-memory store and a scripted model: threshold, cursor,
//! merge rules, failures, conflicts, catch-up, memory off.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::*;
use keel_core::message::{Message, ToolCall};
use keel_core::model::{ChatModel, ModelError, ModelErrorKind};
use keel_core::pairs::check_pairs;
use keel_core::store::{
    ChatHistoryStore, SaveOutcome, SessionMemoryState, SessionMemoryStore, SessionScope,
    StoreError, StoredMessage,
};
use keel_core::stream::StreamWriter;
use keel_memory::events::{EVENT_FOLD_FAILED, EVENT_FOLD_SUPERSEDED, EVENT_FOLDED};
use keel_memory::{FoldOutcome, SessionCompressor, SessionMemorySettings};
use keel_store::memory::MemoryStore;
use keel_testkit::ScriptedModel;
use parking_lot::Mutex;
use serde_json::json;

fn compressor(store: &Arc<MemoryStore>, settings: SessionMemorySettings) -> SessionCompressor {
    SessionCompressor::new(settings, store.clone(), store.clone()).unwrap()
}

fn settings(scope: &SessionScope) -> SessionMemorySettings {
    SessionMemorySettings::for_scope(scope.clone()).with_pinned_keys([
        "project_id",
        "cluster",
        "customer",
    ])
}

#[tokio::test]
async fn fold_threshold_is_twenty_older_messages() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "threshold");
    let c = compressor(&store, settings(&s));
    let model = fold_model();
    // 29 stored: the last 10 are recent, 19 are older: no fold. The 19 are not folded
    // yet, so they are sent verbatim too: no message reaches the model through neither
    // the summary nor the window.
    seed(store.as_ref(), &s, 0..29).await;
    let turn = prepare_turn(&c, &s, &model).await;
    assert_eq!(model.calls(), 0);
    assert!(turn.folds.is_empty());
    assert_eq!(
        turn.messages().len(),
        29,
        "no summary yet: everything verbatim"
    );
    assert_eq!(turn.messages()[0].id(), "m00000");
    assert_eq!(store.get_state(&s).await.unwrap(), None);

    // One more: 20 older: one fold of exactly those 20.
    seed(store.as_ref(), &s, 29..30).await;
    let turn = prepare_turn(&c, &s, &model).await;
    assert_eq!(model.calls(), 1);
    assert_eq!(model.internal_calls(), 1, "the fold call is internal");
    assert_eq!(
        model.requests()[0].settings.max_tokens,
        Some(keel_memory::compressor::fold_output_cap(&settings(&s))),
        "fold output is capped by default (sized from the word budget)"
    );
    let prompt = model.requests()[0].messages[0].text().into_owned();
    assert_eq!(batch_numbers(&prompt), (0..20).collect::<Vec<_>>());
    assert_eq!(
        turn.folds,
        vec![FoldOutcome::Folded {
            messages: 20,
            version: 1
        }]
    );
    let sent = turn.messages();
    assert_eq!(sent.len(), 11);
    assert_eq!(sent[1].id(), "m00020");
}

#[tokio::test]
async fn current_input_is_excluded_even_when_stored() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "current");
    let c = compressor(&store, settings(&s));
    let model = fold_model();
    seed(store.as_ref(), &s, 0..29).await;
    // The application stored the input before the run (as Langflow does).
    let current = input();
    store
        .append(
            &s,
            &[StoredMessage {
                timestamp_ms: 1_800_000_000_000,
                message: current[0].clone(),
            }],
        )
        .await
        .unwrap();
    let turn = c
        .prepare(
            &s,
            &current,
            &dyn_model(&model),
            &StreamWriter::disconnected(),
        )
        .await
        .unwrap();
    let ids: Vec<String> = turn.messages().iter().map(|m| m.id().to_owned()).collect();
    assert!(!ids.contains(&"current".to_owned()));
    assert_eq!(ids.len(), 29, "19 unfolded older + the last 10");
    assert_eq!(
        model.calls(),
        0,
        "19 older messages: the stored input does not count"
    );
}

#[tokio::test]
async fn cursor_advances_and_the_next_fold_starts_after_it() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "cursor");
    let c = compressor(&store, settings(&s));
    let model = fold_model();
    seed(store.as_ref(), &s, 0..30).await;
    prepare_turn(&c, &s, &model).await;
    let st = store.get_state(&s).await.unwrap().unwrap();
    assert_eq!(st.covered_until, Some(cursor(19)));
    assert_eq!((st.absorbed_count, st.version), (20, 1));
    assert_eq!(st.summary_model.as_deref(), Some("fold-model"));

    // 19 more older messages pending: nothing happens.
    seed(store.as_ref(), &s, 30..49).await;
    prepare_turn(&c, &s, &model).await;
    assert_eq!(model.calls(), 1);
    seed(store.as_ref(), &s, 49..50).await;
    let turn = prepare_turn(&c, &s, &model).await;
    assert_eq!(model.calls(), 2);
    let prompt = model.requests()[1].messages[0].text().into_owned();
    assert_eq!(
        batch_numbers(&prompt),
        (20..40).collect::<Vec<_>>(),
        "only messages after the cursor"
    );
    assert!(
        prompt.contains("- messages 0 to 19"),
        "the previous summary is folded in"
    );
    assert!(
        prompt.contains("\"project_id\":\"PRJ-123\""),
        "the previous pinned keys are sent"
    );
    let st = turn.state;
    assert_eq!(st.covered_until, Some(cursor(39)));
    assert_eq!((st.absorbed_count, st.version), (40, 2));
    assert_eq!(st.summary, "- messages 0 to 19\n- messages 20 to 39");
}

#[tokio::test]
async fn pinned_merge_rules_and_word_budget() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "merge");
    let mut cfg = settings(&s);
    cfg.summary_word_budget = 50;
    let c = compressor(&store, cfg);
    let long_summary = (0..400)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let model = Arc::new(ScriptedModel::new([
        Message::ai(
            json!({"pinned": {"project_id": "PRJ-123", "cluster": "EU", "customer": "ACME", "invented": "x"}, "summary": long_summary})
                .to_string(),
        ),
        Message::ai(r#"{"pinned": {"cluster": null, "customer": "  "}, "summary": "- moved on"}"#),
    ]));
    seed(store.as_ref(), &s, 0..30).await;
    let turn = prepare_turn(&c, &s, &model).await;
    let st = &turn.state;
    assert_eq!(
        serde_json::Value::Object(st.pinned.clone()),
        json!({"project_id": "PRJ-123", "cluster": "EU", "customer": "ACME"}),
        "unconfigured keys are ignored"
    );
    assert_eq!(
        keel_memory::fold::merge::count_words(&st.summary),
        50,
        "clipped to the word budget"
    );

    seed(store.as_ref(), &s, 30..50).await;
    let turn = prepare_turn(&c, &s, &model).await;
    assert_eq!(
        serde_json::Value::Object(turn.state.pinned.clone()),
        json!({"project_id": "PRJ-123", "customer": "ACME"}),
        "omitted keeps, null clears, blank keeps"
    );
    assert_eq!(turn.state.summary, "- moved on");
    assert_eq!(
        turn.messages()[0].text(),
        "Here is a summary of the conversation to date:\n\nPinned:\n- project_id: PRJ-123\n- customer: ACME\n\nSummary:\n- moved on"
    );
}

#[tokio::test]
async fn tolerant_parsing_of_real_model_output() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "tolerant");
    let c = compressor(&store, settings(&s));
    let model = Arc::new(ScriptedModel::new([
        Message::ai(
            "Here is the updated memory:\n```json\n{\n  \"pinned\": {\"project_id\": \"PRJ-123\",},\n  \"summary\": \"- on EU\",\n}\n```\nLet me know!",
        ),
        // Missing `pinned`: keeps the previous keys.
        Message::ai("{\"summary\": \"- still on EU\"}"),
    ]));
    seed(store.as_ref(), &s, 0..30).await;
    let turn = prepare_turn(&c, &s, &model).await;
    assert_eq!(turn.state.pinned["project_id"], json!("PRJ-123"));
    assert_eq!(turn.state.summary, "- on EU");
    seed(store.as_ref(), &s, 30..50).await;
    let turn = prepare_turn(&c, &s, &model).await;
    assert_eq!(turn.state.pinned["project_id"], json!("PRJ-123"));
    assert_eq!(turn.state.summary, "- still on EU");
    assert_eq!(turn.state.version, 2);
}

async fn folded_once(
    name: &str,
) -> (
    Arc<MemoryStore>,
    SessionScope,
    SessionCompressor,
    SessionMemoryState,
) {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", name);
    let c = compressor(&store, settings(&s));
    seed(store.as_ref(), &s, 0..30).await;
    c.prepare(
        &s,
        &input(),
        &dyn_model(&fold_model()),
        &StreamWriter::disconnected(),
    )
    .await
    .unwrap();
    seed(store.as_ref(), &s, 30..50).await;
    let before = store.get_state(&s).await.unwrap().unwrap();
    (store, s, c, before)
}

#[tokio::test]
async fn model_failure_keeps_the_previous_state_and_emits_an_event() {
    let (store, s, c, before) = folded_once("failure").await;
    let model = Arc::new(ScriptedModel::with_results([Err(ModelError::new(
        ModelErrorKind::InvalidRequest,
        "model is down",
    ))]));
    let events = Events::new();
    let turn = c
        .prepare(&s, &input(), &dyn_model(&model), &events.writer)
        .await
        .unwrap();
    assert_eq!(model.calls(), 1);
    assert_eq!(turn.state, before, "the turn runs with the previous state");
    assert_eq!(
        store.get_state(&s).await.unwrap().unwrap(),
        before,
        "nothing saved"
    );
    assert!(matches!(
        &turn.folds[..],
        [FoldOutcome::Failed {
            reason: keel_memory::events::FoldFailure::Model,
            messages: 20,
            ..
        }]
    ));
    let ev = events.custom();
    let failed = of_type(&ev, EVENT_FOLD_FAILED);
    assert_eq!(failed.len(), 1, "{ev:?}");
    assert_eq!(failed[0]["reason"], "model");
    assert!(
        failed[0]["error"]
            .as_str()
            .unwrap()
            .contains("model is down")
    );
    assert_eq!(failed[0]["version"], 1);
    assert!(of_type(&ev, EVENT_FOLDED).is_empty());
    assert_eq!(
        of_type(&ev, "context_compacting").len(),
        1,
        "the blocking call was announced"
    );
    // The previous summary still reaches the model.
    assert!(turn.messages()[0].text().contains("- messages 0 to 19"));
}

#[tokio::test]
async fn unparseable_output_is_a_failed_fold() {
    let (store, s, c, before) = folded_once("unparseable").await;
    let model = Arc::new(ScriptedModel::new([Message::ai(
        "The conversation covered many topics. {not json at all}",
    )]));
    let events = Events::new();
    let turn = c
        .prepare(&s, &input(), &dyn_model(&model), &events.writer)
        .await
        .unwrap();
    assert_eq!(turn.state, before);
    assert_eq!(store.get_state(&s).await.unwrap().unwrap(), before);
    let ev = events.custom();
    let failed = of_type(&ev, EVENT_FOLD_FAILED);
    assert_eq!(failed.len(), 1, "{ev:?}");
    assert_eq!(failed[0]["reason"], "unparseable");
}

#[tokio::test]
async fn first_fold_without_summary_fails_rather_than_losing_the_batch() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "nosummary");
    let c = compressor(&store, settings(&s));
    let model = Arc::new(ScriptedModel::new([Message::ai(
        r#"{"pinned": {"project_id": "P"}}"#,
    )]));
    seed(store.as_ref(), &s, 0..30).await;
    let turn = prepare_turn(&c, &s, &model).await;
    assert!(matches!(&turn.folds[..], [FoldOutcome::Failed { .. }]));
    assert_eq!(store.get_state(&s).await.unwrap(), None);
}

/// A store where another process saves first, right before this run's first save.
struct RacingStore {
    inner: Arc<MemoryStore>,
    rival: Mutex<Option<SessionMemoryState>>,
}

#[async_trait]
impl SessionMemoryStore for RacingStore {
    async fn get_state(
        &self,
        scope: &SessionScope,
    ) -> Result<Option<SessionMemoryState>, StoreError> {
        self.inner.get_state(scope).await
    }
    async fn save_state(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        expected: u64,
    ) -> Result<SaveOutcome, StoreError> {
        let rival = self.rival.lock().take();
        if let Some(rival) = rival {
            assert_eq!(
                self.inner.save_state(scope, &rival, expected).await?,
                SaveOutcome::Saved {
                    version: expected + 1
                }
            );
        }
        self.inner.save_state(scope, state, expected).await
    }
    async fn delete_session_states(&self, f: &str, u: &str, s: &str) -> Result<u64, StoreError> {
        self.inner.delete_session_states(f, u, s).await
    }
}

#[tokio::test]
async fn version_conflict_uses_the_winner_without_a_second_call() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "conflict");
    // A session needing several folds, so a loser that kept folding would call again.
    seed(store.as_ref(), &s, 0..200).await;
    let winner = SessionMemoryState {
        summary: "- the winner's summary".into(),
        pinned: json!({"project_id": "WIN-1"}).as_object().cloned().unwrap(),
        covered_until: Some(cursor(59)),
        absorbed_count: 60,
        summary_model: Some("other-process".into()),
        ..Default::default()
    };
    let racing = Arc::new(RacingStore {
        inner: store.clone(),
        rival: Mutex::new(Some(winner.clone())),
    });
    let c = SessionCompressor::new(settings(&s), store.clone(), racing).unwrap();
    let model = fold_model();
    let events = Events::new();
    let turn = c
        .prepare(&s, &input(), &dyn_model(&model), &events.writer)
        .await
        .unwrap();
    assert_eq!(model.calls(), 1, "the loser makes no second model call");
    assert_eq!(
        turn.folds,
        vec![FoldOutcome::Superseded {
            expected_version: 0,
            winner_version: 1
        }]
    );
    assert_eq!(turn.state.summary, winner.summary);
    assert_eq!(turn.state.version, 1);
    assert!(turn.messages()[0].text().contains("WIN-1"));
    let stored = store.get_state(&s).await.unwrap().unwrap();
    assert_eq!(
        stored.summary, winner.summary,
        "the winner's state was never overwritten"
    );
    assert_eq!(of_type(&events.custom(), EVENT_FOLD_SUPERSEDED).len(), 1);
}

#[tokio::test]
async fn catch_up_on_a_500_message_session() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "catchup");
    seed(store.as_ref(), &s, 0..500).await;
    let c = compressor(&store, settings(&s));
    let model = fold_model();
    // 490 older messages; 60 per fold; 3 folds per turn.
    let mut absorbed = Vec::new();
    let mut absorbed_windows = Vec::new();
    for _turn in 0..4 {
        let turn = prepare_turn(&c, &s, &model).await;
        assert!(turn.folds.len() <= 3, "bounded per turn");
        absorbed.push(turn.state.absorbed_count);
        absorbed_windows.push((turn.messages().len(), turn.messages()[1].id().to_owned()));
    }
    // While the backlog is over the window cap (10 + 20 + 60), the window holds the
    // newest 90; once caught up, everything after the cursor.
    assert_eq!(
        absorbed_windows,
        vec![
            (91, "m00410".to_owned()),
            (91, "m00410".to_owned()),
            (21, "m00480".to_owned()),
            (21, "m00480".to_owned())
        ]
    );
    assert_eq!(
        absorbed,
        vec![180, 360, 480, 480],
        "successive turns catch up; the 10 left wait for 20"
    );
    assert_eq!(model.calls(), 8);
    for (i, r) in model.requests().iter().enumerate() {
        let nums = batch_numbers(&r.messages[0].text());
        assert_eq!(
            nums,
            (i * 60..i * 60 + 60).collect::<Vec<_>>(),
            "fold {i} takes the next 60"
        );
    }
    let st = store.get_state(&s).await.unwrap().unwrap();
    assert_eq!(st.covered_until, Some(cursor(479)));
    assert_eq!(st.version, 8);
    assert_eq!(
        st.pinned["project_id"],
        json!("PRJ-123"),
        "the first message's facts survive"
    );
    // One turn catches up fully when allowed to.
    let store2 = Arc::new(MemoryStore::new());
    seed(store2.as_ref(), &s, 0..500).await;
    let mut cfg = settings(&s);
    cfg.max_folds_per_turn = 100;
    let turn = compressor(&store2, cfg)
        .prepare(
            &s,
            &input(),
            &dyn_model(&fold_model()),
            &StreamWriter::disconnected(),
        )
        .await
        .unwrap();
    assert_eq!(turn.folds.len(), 8);
    assert_eq!(turn.state.absorbed_count, 480);
}

#[tokio::test]
async fn long_messages_are_cut_in_the_fold_prompt() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "long");
    let log = format!("ERROR start {} end of log", "x".repeat(50_000));
    let mut rows: Vec<StoredMessage> = (0..30).map(stored).collect();
    rows[5].message = Message::ai(log).with_id("m00005");
    store.append(&s, &rows).await.unwrap();
    let c = compressor(&store, settings(&s));
    let model = fold_model();
    prepare_turn(&c, &s, &model).await;
    let prompt = model.requests()[0].messages[0].text().into_owned();
    assert!(prompt.contains("ERROR start") && prompt.contains("end of log"));
    assert!(
        prompt.len() < 20 * 100 + 4_000 + 4_000,
        "the 50,000-character log was cut to 4,000: {}",
        prompt.len()
    );
}

#[tokio::test]
async fn n_messages_zero_turns_memory_off() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "off");
    seed(store.as_ref(), &s, 0..100).await;
    let c = compressor(&store, settings(&s).with_n_messages(0));
    let model = fold_model();
    let turn = prepare_turn(&c, &s, &model).await;
    assert!(turn.messages().is_empty());
    assert_eq!(model.calls(), 0);
    assert_eq!(store.get_state(&s).await.unwrap(), None);
}

#[tokio::test]
async fn the_recent_window_never_starts_inside_a_tool_run() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "pairs");
    let mut rows: Vec<StoredMessage> = (0..40).map(stored).collect();
    // Messages 28..=31: an AI message with two parallel calls, their results, an answer.
    rows[28].message = Message::ai("")
        .with_tool_calls(vec![
            ToolCall::new("c1", "ls", json!({})),
            ToolCall::new("c2", "ls", json!({})),
        ])
        .with_id("m00028");
    rows[29].message = Message::tool("c1", "a").with_id("m00029");
    rows[30].message = Message::tool("c2", "b").with_id("m00030");
    store.append(&s, &rows).await.unwrap();
    // n = 10 would start at message 30, a tool result whose call is message 28.
    let c = compressor(&store, settings(&s));
    let model = fold_model();
    let turn = prepare_turn(&c, &s, &model).await;
    let recent: Vec<&str> = turn.recent.iter().map(|m| m.message.id()).collect();
    // The fold batch ends before the tool run instead of splitting it.
    assert_eq!(recent.first(), Some(&"m00028"));
    let mut sent = turn.messages();
    sent.extend(input());
    check_pairs(&sent).unwrap();
    assert_eq!(turn.state.absorbed_count, 28);
}

#[tokio::test]
async fn the_summary_message_is_byte_identical_between_folds() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "stable");
    seed(store.as_ref(), &s, 0..30).await;
    let c = compressor(&store, settings(&s));
    let model = fold_model();
    let first = prepare_turn(&c, &s, &model).await;
    let a = serde_json::to_vec(first.summary_message().unwrap()).unwrap();
    seed(store.as_ref(), &s, 30..35).await;
    let second = prepare_turn(&c, &s, &model).await;
    let b = serde_json::to_vec(second.summary_message().unwrap()).unwrap();
    assert_eq!(a, b);
    let m = second.summary_message().unwrap();
    assert_eq!(m.name(), Some("summary"));
    assert!(m.flag("hide_from_ui"));
    assert!(m.is_human(), "a user-role message, never the system prompt");
    // And it is never stored as a chat message.
    let stored = store.last_n(&s, 1000).await.unwrap();
    assert!(stored.iter().all(|m| m.message.name() != Some("summary")));
}

#[tokio::test]
async fn deleting_a_session_deletes_its_history_and_state_and_nothing_else() {
    let store = Arc::new(MemoryStore::new());
    let a = SessionScope::new("flow-test", "u", "del", "ctx-a");
    let b = SessionScope::new("flow-test", "u", "del", "ctx-b");
    let other = scope("u", "keep");
    for sc in [&a, &b, &other] {
        seed(store.as_ref(), sc, 0..30).await;
        compressor(&store, settings(sc))
            .prepare(
                sc,
                &input(),
                &dyn_model(&fold_model()),
                &StreamWriter::disconnected(),
            )
            .await
            .unwrap();
        assert!(store.get_state(sc).await.unwrap().is_some());
    }
    assert_eq!(
        compressor(&store, settings(&a))
            .delete_session(&a)
            .await
            .unwrap(),
        30 + 30 + 2,
        "two contexts' history and state"
    );
    assert_eq!(store.get_state(&a).await.unwrap(), None);
    assert_eq!(store.get_state(&b).await.unwrap(), None);
    assert!(store.get_state(&other).await.unwrap().is_some());
    for sc in [&a, &b] {
        assert!(store.last_n(sc, 100).await.unwrap().is_empty(), "{sc:?}");
    }
    assert_eq!(store.last_n(&other, 100).await.unwrap().len(), 30);
}

#[tokio::test]
async fn a_failing_summary_model_falls_back_to_the_run_model() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "fallback");
    seed(store.as_ref(), &s, 0..30).await;
    let broken: Arc<dyn ChatModel> = Arc::new(ScriptedModel::with_results([Err(ModelError::new(
        ModelErrorKind::Authentication,
        "bad key",
    ))]));
    let run = fold_model();
    let c = compressor(&store, settings(&s)).with_summary_model(broken);
    let turn = c
        .prepare(
            &s,
            &input(),
            &dyn_model(&run),
            &StreamWriter::disconnected(),
        )
        .await
        .unwrap();
    assert_eq!(turn.state.version, 1);
    assert_eq!(turn.state.summary_model.as_deref(), Some("fold-model"));
    assert_eq!(run.internal_calls(), 1);
}

#[tokio::test]
async fn extractive_folds_need_no_model() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "extractive");
    seed(store.as_ref(), &s, 0..50).await;
    let c = compressor(&store, settings(&s)).with_engine(keel_memory::FoldEngine::Extractive);
    let model = Arc::new(ScriptedModel::new([]));
    let events = Events::new();
    let turn = c
        .prepare(&s, &input(), &dyn_model(&model), &events.writer)
        .await
        .unwrap();
    assert_eq!(model.calls(), 0);
    assert_eq!(turn.state.absorbed_count, 40);
    assert_eq!(turn.state.version, 1);
    assert_eq!(turn.state.summary_model.as_deref(), Some("extractive"));
    assert!(
        turn.state.summary.contains("PRJ-123"),
        "{}",
        turn.state.summary
    );
    assert!(keel_memory::fold::merge::count_words(&turn.state.summary) <= 300);
    let ev = events.custom();
    assert!(
        of_type(&ev, "context_compacting").is_empty(),
        "no blocking model call"
    );
    assert_eq!(of_type(&ev, EVENT_FOLDED).len(), 1);
    // Deterministic: the same session folds to the same summary.
    let store2 = Arc::new(MemoryStore::new());
    seed(store2.as_ref(), &s, 0..50).await;
    let again = compressor(&store2, settings(&s))
        .with_engine(keel_memory::FoldEngine::Extractive)
        .prepare(
            &s,
            &input(),
            &dyn_model(&model),
            &StreamWriter::disconnected(),
        )
        .await
        .unwrap();
    assert_eq!(again.state.summary, turn.state.summary);
}

#[tokio::test]
async fn a_winner_that_folded_into_the_window_is_not_sent_twice() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "winner-window");
    seed(store.as_ref(), &s, 0..30).await;
    // Another process with N = 5 folded messages 0..=24; this one (N = 10) would send 20..29.
    let winner = SessionMemoryState {
        summary: "- folded by a process with N = 5".into(),
        covered_until: Some(cursor(24)),
        absorbed_count: 25,
        ..Default::default()
    };
    let racing = Arc::new(RacingStore {
        inner: store.clone(),
        rival: Mutex::new(Some(winner)),
    });
    let c = SessionCompressor::new(settings(&s), store.clone(), racing).unwrap();
    let turn = c
        .prepare(
            &s,
            &input(),
            &dyn_model(&fold_model()),
            &StreamWriter::disconnected(),
        )
        .await
        .unwrap();
    assert!(matches!(turn.folds[..], [FoldOutcome::Superseded { .. }]));
    let ids: Vec<&str> = turn.recent.iter().map(|m| m.message.id()).collect();
    assert_eq!(ids, ["m00025", "m00026", "m00027", "m00028", "m00029"]);
}

/// The compressor keeps each session's newest rows between turns and checks them with a
/// count before use: rows another writer stored in the meantime are in the next window,
/// even one stamped before rows this compressor recorded since (two writers racing on
/// PostgreSQL can stamp that way).
#[tokio::test]
async fn rows_from_another_writer_reach_the_next_window() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "two-writers");
    let c = compressor(&store, settings(&s));
    let model = fold_model();
    let turn: Vec<Message> = (0..6).map(message).collect();
    c.record(&s, &turn[..5]).await.unwrap();
    let first = prepare_turn(&c, &s, &model).await;
    assert_eq!(first.messages().len(), 5);

    // This compressor records a message; another writer then stores one between two of
    // the rows this compressor already holds, and one after everything.
    c.record(&s, &turn[5..]).await.unwrap();
    let rows = store.after(&s, None, 100).await.unwrap();
    let between = StoredMessage {
        timestamp_ms: rows[2].timestamp_ms,
        message: Message::human("from another process")
            .with_id(format!("{}~b", rows[2].message.id())),
    };
    let after = StoredMessage {
        timestamp_ms: rows[5].timestamp_ms + 10,
        message: Message::human("later, from another process").with_id("zz-after"),
    };
    store.append(&s, &[between.clone(), after]).await.unwrap();

    let ids: Vec<String> = prepare_turn(&c, &s, &model)
        .await
        .messages()
        .iter()
        .map(|m| m.id().to_owned())
        .collect();
    let expected: Vec<String> = store
        .after(&s, None, 100)
        .await
        .unwrap()
        .iter()
        .map(|m| m.message.id().to_owned())
        .collect();
    assert_eq!(ids, expected, "the window is the store's history, in order");
    assert!(ids.contains(&between.message.id().to_owned()));
    assert!(ids.contains(&"zz-after".to_owned()));
}

/// A model that never lets go: every fold answers with everything it wrote before plus
/// forty new words. Across 50 successive folds the stored summary never grows past its
/// budget, and the extractive engine holds the same line.
#[tokio::test]
async fn fifty_successive_folds_never_grow_past_the_budget() {
    let budget = 120;
    for engine in [
        keel_memory::FoldEngine::Model,
        keel_memory::FoldEngine::Extractive,
    ] {
        let store = Arc::new(MemoryStore::new());
        let s = scope("u", &format!("fifty-{engine:?}"));
        let mut cfg = settings(&s);
        cfg.summary_word_budget = budget;
        let c = compressor(&store, cfg).with_engine(engine);
        let longest = Arc::new(Mutex::new(0usize));
        let seen = longest.clone();
        let grown = Arc::new(Mutex::new(String::new()));
        let model = Arc::new(ScriptedModel::from_fn(move |r| {
            // Everything it wrote before, plus forty new words.
            let mut summary = grown.lock();
            let fresh: Vec<String> = (0..40)
                .map(|i| format!("fact{}-{i}", r.messages.len()))
                .collect();
            summary.push_str(&format!("\n- {}", fresh.join(" ")));
            let summary = summary.clone();
            let words = keel_memory::fold::merge::count_words(&summary);
            let mut longest = seen.lock();
            *longest = (*longest).max(words);
            Ok(Message::ai(
                json!({"pinned": {}, "summary": summary}).to_string(),
            ))
        }));
        seed(store.as_ref(), &s, 0..30).await;
        let mut versions = Vec::new();
        for fold in 0..50 {
            let turn = prepare_turn(&c, &s, &model).await;
            let words = keel_memory::fold::merge::count_words(&turn.state.summary);
            assert!(
                words <= budget,
                "{engine:?} fold {fold}: {words} words > {budget}"
            );
            versions.push(turn.state.version);
            seed(store.as_ref(), &s, 30 + fold * 20..50 + fold * 20).await;
        }
        if engine == keel_memory::FoldEngine::Model {
            // The model did re-send everything it read: the budget is what held.
            assert!(*longest.lock() > budget, "{}", *longest.lock());
        }
        assert_eq!(
            versions.last().copied(),
            Some(50),
            "{engine:?}: one fold per 20 older messages, 50 in all"
        );
    }
}

/// A fold that records a corrected value reports it in its event: the ledger of current
/// values, with the message that stated the new one.
#[tokio::test]
async fn a_fold_reports_the_current_values_its_summary_records() {
    let store = Arc::new(MemoryStore::new());
    let s = scope("u", "ledger");
    let mut rows: Vec<StoredMessage> = (0..40).map(stored).collect();
    rows[2].message = Message::human("Deploy the nightly exports to eu-west-1.").with_id("m00002");
    rows[12].message =
        Message::human("Change of plan: deploy the nightly exports to eu-central-1 instead.")
            .with_id("m00012");
    store.append(&s, &rows).await.unwrap();
    let c = compressor(&store, settings(&s)).with_engine(keel_memory::FoldEngine::Extractive);
    let model = Arc::new(ScriptedModel::new([]));
    let events = Events::new();
    let turn = c
        .prepare(&s, &input(), &dyn_model(&model), &events.writer)
        .await
        .unwrap();
    assert!(
        turn.state.summary.contains("eu-central-1"),
        "{}",
        turn.state.summary
    );
    let ev = events.custom();
    let folded = of_type(&ev, EVENT_FOLDED);
    let current = &folded[0]["current_values"];
    assert_eq!(current[0]["value"], "eu-central-1", "{ev:?}");
    assert_eq!(current[0]["was"], "eu-west-1");
    assert_eq!(current[0]["reference"], "m00012");
}

/// A state store that counts its reads.
struct CountingStates<S> {
    inner: Arc<S>,
    reads: std::sync::atomic::AtomicUsize,
}

impl<S> CountingStates<S> {
    fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl<S: SessionMemoryStore> SessionMemoryStore for CountingStates<S> {
    async fn get_state(
        &self,
        scope: &SessionScope,
    ) -> Result<Option<SessionMemoryState>, StoreError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get_state(scope).await
    }
    async fn save_state(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        expected: u64,
    ) -> Result<SaveOutcome, StoreError> {
        self.inner.save_state(scope, state, expected).await
    }
    async fn delete_session_states(&self, f: &str, u: &str, s: &str) -> Result<u64, StoreError> {
        self.inner.delete_session_states(f, u, s).await
    }
}

/// One turn as the middleware runs it: the input recorded, the memory prepared, the
/// answer recorded. Returns the turn's memory.
async fn recorded_turn(
    c: &SessionCompressor,
    s: &SessionScope,
    i: usize,
    model: &Arc<ScriptedModel>,
) -> keel_memory::TurnMemory {
    let input = message(i);
    c.record(s, std::slice::from_ref(&input)).await.unwrap();
    let turn = c
        .prepare(
            s,
            std::slice::from_ref(&input),
            &dyn_model(model),
            &StreamWriter::disconnected(),
        )
        .await
        .unwrap();
    c.record(s, &[input, message(i + 1)]).await.unwrap();
    turn
}

#[tokio::test]
async fn the_state_is_read_again_only_after_another_writer_stored_rows() {
    for url in ["memory:", "sqlite::memory:"] {
        let store = Arc::new(keel_store::Store::connect(url).await.unwrap());
        let s = scope("u", "writers");
        let states = Arc::new(CountingStates {
            inner: store.clone(),
            reads: Default::default(),
        });
        let first = SessionCompressor::new(settings(&s), store.clone(), states.clone()).unwrap();
        let model = fold_model();
        recorded_turn(&first, &s, 0, &model).await;
        assert_eq!(states.reads(), 1, "{url}: the first turn reads the state");
        for i in [2, 4, 6] {
            let turn = recorded_turn(&first, &s, i, &model).await;
            assert_eq!(
                turn.recent.len(),
                i,
                "{url}: every earlier message is recent"
            );
        }
        assert_eq!(
            states.reads(),
            1,
            "{url}: while only this compressor writes, its own state is current"
        );

        // Another writer (a second compressor on the same database) stores a turn and
        // a state.
        let second = SessionCompressor::new(settings(&s), store.clone(), store.clone()).unwrap();
        second
            .record(
                &s,
                &[
                    message(8).with_id("other-in"),
                    message(9).with_id("other-out"),
                ],
            )
            .await
            .unwrap();
        let theirs = SessionMemoryState {
            summary: "- the other writer's summary".into(),
            ..Default::default()
        };
        assert_eq!(
            store.save_state(&s, &theirs, 0).await.unwrap(),
            SaveOutcome::Saved { version: 1 }
        );

        let turn = recorded_turn(&first, &s, 10, &model).await;
        assert_eq!(
            states.reads(),
            2,
            "{url}: rows it did not write make it read again"
        );
        assert_eq!(turn.state.summary, theirs.summary);
        // Messages 0 to 7 of its own turns, then the other writer's two.
        assert_eq!(
            turn.recent.len(),
            10,
            "{url}: the other writer's rows are in the window"
        );
        recorded_turn(&first, &s, 12, &model).await;
        assert_eq!(states.reads(), 2, "{url}: and then it is current again");
    }
}
