//! Generated sessions with parallel tool calls, grown turn by turn under generated
//! settings: every request is pair-safe, folds are contiguous and never skip or repeat a
//! message, the cursor only moves forward, and nothing folded is also sent verbatim.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::sync::Arc;

use keel_core::message::{Message, ToolCall};
use keel_core::model::ChatModel;
use keel_core::pairs::check_pairs;
use keel_core::store::{ChatHistoryStore, SessionScope, StoredMessage};
use keel_core::stream::StreamWriter;
use keel_memory::{SessionCompressor, SessionMemorySettings};
use keel_store::memory::MemoryStore;
use keel_testkit::ScriptedModel;
use proptest::prelude::*;
use serde_json::json;

/// One exchange: a user message, then `calls` rounds of parallel tool calls (sizes
/// given), then an answer.
fn exchange(i: usize, rounds: &[usize]) -> Vec<Message> {
    let mut out = vec![Message::human(format!("question {i}"))];
    for (r, &width) in rounds.iter().enumerate() {
        let ids: Vec<String> = (0..width).map(|k| format!("c{i}-{r}-{k}")).collect();
        out.push(
            Message::ai("").with_tool_calls(
                ids.iter()
                    .map(|id| ToolCall::new(id.as_str(), "lookup", json!({})))
                    .collect(),
            ),
        );
        // Results in reverse order: providers accept any order within a tool run.
        for id in ids.iter().rev() {
            out.push(Message::tool(id.as_str(), "result"));
        }
    }
    out.push(Message::ai(format!("answer {i}")));
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn sessions_stay_pair_safe_and_folds_are_contiguous(
        exchanges in prop::collection::vec(prop::collection::vec(1usize..4, 0..3), 5..40),
        turn_sizes in prop::collection::vec(1usize..6, 1..20),
        n in 1usize..12,
        fold_batch in 1usize..8,
        extra_batch in 0usize..10,
        max_folds in 1usize..4,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let all: Vec<Message> = exchanges.iter().enumerate().flat_map(|(i, r)| exchange(i, r)).collect();
            let rows: Vec<StoredMessage> = all
                .iter()
                .enumerate()
                .map(|(i, m)| StoredMessage { timestamp_ms: 1_000 + i as i64, message: m.clone().with_id(format!("m{i:05}")) })
                .collect();
            let store = Arc::new(MemoryStore::new());
            let scope = SessionScope::new("flow-prop", "u", "s", "");
            let mut settings = SessionMemorySettings::for_scope(scope.clone());
            settings.n_messages = n;
            settings.fold_batch = fold_batch;
            settings.max_batch_messages = fold_batch + extra_batch;
            let settings_max_batch = settings.max_batch_messages;
            settings.max_folds_per_turn = max_folds;
            let c = SessionCompressor::new(settings, store.clone(), store.clone()).unwrap();
            let model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::from_fn(|_| Ok(Message::ai(r#"{"summary": "- folded"}"#))));
            let current = [Message::human("now").with_id("current")];

            let mut appended = 0;
            let mut last_cursor = None;
            for size in turn_sizes.iter().cycle().take(60) {
                if appended >= rows.len() { break; }
                let end = (appended + size).min(rows.len());
                store.append(&scope, &rows[appended..end]).await.unwrap();
                appended = end;

                let turn = c.prepare(&scope, &current, &model, &StreamWriter::disconnected()).await.unwrap();
                let mut request = turn.messages();
                request.extend(current.iter().cloned());
                check_pairs(&request).unwrap();
                let cap = n + fold_batch + settings_max_batch;

                let stored = &rows[..appended];
                let cursor = turn.state.covered_until.clone();
                let folded = stored.iter().filter(|m| cursor.as_ref().is_some_and(|c| m.cursor() <= *c)).count();
                assert_eq!(turn.state.absorbed_count as usize, folded, "folds are contiguous from the start");
                assert!(cursor >= last_cursor, "the cursor never moves back");
                last_cursor = cursor.clone();
                for m in &turn.recent {
                    assert!(cursor.as_ref().is_none_or(|c| m.cursor() > *c), "nothing folded is sent verbatim");
                }
                // Summary and window cover the session: every stored message is folded or
                // sent verbatim (the window holds all unfolded ones while under its cap).
                let unfolded: Vec<&str> = stored.iter().filter(|m| cursor.as_ref().is_none_or(|c| m.cursor() > *c)).map(|m| m.message.id()).collect();
                // A step appended half-way has calls without results: they are answered
                // with synthetic results, which are sent, never stored.
                let recent: Vec<&str> = turn.recent.iter().filter(|m| !m.message.flag(keel_core::dangling::PATCHED)).map(|m| m.message.id()).collect();
                assert!(recent.len() <= cap);
                if unfolded.len() <= cap {
                    assert_eq!(recent, unfolded, "the window is every unfolded message");
                } else {
                    // Folds fell behind (more added per turn than they may absorb): the
                    // newest up to the cap, from a whole tool run on.
                    assert_eq!(recent, unfolded[unfolded.len() - recent.len()..].to_vec(), "the newest up to the cap");
                    assert!(recent.len() + 4 >= cap, "at most a tool run's results dropped");
                }
            }
        });
    }
}
