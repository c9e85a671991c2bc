//! The middleware inside a real agent loop: what the model is sent, what is stored, scope
//! isolation, memory off, the no-store fallback and session deletion.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::io::Write;
use std::sync::Arc;

use common::*;
use futures::StreamExt;
use keel_agent::Agent;
use keel_core::message::{Message, ToolCall};
use keel_core::model::ModelProfile;
use keel_core::pairs::check_pairs;
use keel_core::store::{ChatHistoryStore, SessionMemoryStore, SessionScope};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_memory::{SessionMemoryMiddleware, SessionMemorySettings};
use keel_store::memory::MemoryStore;
use keel_testkit::{FnTool, RecordedRequest, ScriptedModel};
use parking_lot::Mutex;
use serde_json::json;

/// A model that folds deterministically and answers user calls with "answer"; when the
/// user says "use the tool", it calls `lookup` once first.
fn agent_model() -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::from_fn(|r: &RecordedRequest| {
            if r.internal {
                return Ok(Message::ai(fold_answer(r)));
            }
            let last = r.messages.last().unwrap();
            if last.is_human() && last.text().contains("use the tool") {
                return Ok(Message::ai("").with_tool_calls(vec![ToolCall::new(
                    format!("call-{}", last.id()),
                    "lookup",
                    json!({}),
                )]));
            }
            Ok(Message::ai(format!(
                "answer to {}",
                r.messages
                    .iter()
                    .rev()
                    .find(|m| m.is_human())
                    .unwrap()
                    .text()
            )))
        })
        .with_profile(ModelProfile::new("agent-model", "scripted")),
    )
}

fn settings(scope: SessionScope, n: usize) -> SessionMemorySettings {
    let mut s = SessionMemorySettings::for_scope(scope).with_pinned_keys(["project_id", "cluster"]);
    s.n_messages = n;
    s.fold_batch = 4;
    s.max_batch_messages = 8;
    s
}

fn agent(model: &Arc<ScriptedModel>, mw: Arc<SessionMemoryMiddleware>) -> Agent {
    Agent::builder()
        .model(model.clone())
        .system_prompt("You are a support assistant.")
        .tool(FnTool::new("lookup", |_| Ok("found it".into())))
        .middleware_shared(mw)
        .build()
        .unwrap()
}

fn user_requests(model: &ScriptedModel) -> Vec<RecordedRequest> {
    model
        .requests()
        .into_iter()
        .filter(|r| !r.internal)
        .collect()
}

#[tokio::test]
async fn the_model_sees_summary_then_last_n_and_nothing_is_stored_in_state() {
    let store = Arc::new(MemoryStore::new());
    // Empty session id: the thread id is the session.
    let scope = SessionScope::new("flow-mw", "ada", "", "");
    let mw = Arc::new(
        SessionMemoryMiddleware::builder(settings(scope.clone(), 4))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    let model = agent_model();
    let agent = agent(&model, mw.clone());
    agent
        .invoke(
            "s1",
            vec![Message::human(
                "I'm working on project PRJ-123 on the EU cluster.",
            )],
        )
        .await
        .unwrap();
    for i in 1..10 {
        agent
            .invoke("s1", vec![Message::human(format!("question {i}"))])
            .await
            .unwrap();
    }
    let stored_scope = mw.scope_for_thread("s1");
    assert_eq!(stored_scope.session_id, "s1");
    let history = store.last_n(&stored_scope, 1000).await.unwrap();
    assert_eq!(
        history.len(),
        20,
        "each turn recorded once: input and answer"
    );
    assert!(history.iter().all(|m| m.message.name() != Some("summary")));

    let state = store.get_state(&stored_scope).await.unwrap().unwrap();
    assert!(state.absorbed_count >= 8, "{state:?}");
    assert_eq!(state.pinned["project_id"], json!("PRJ-123"));

    let last = user_requests(&model).pop().unwrap();
    assert_eq!(
        last.system.as_ref().unwrap().text(),
        "You are a support assistant.",
        "the system prompt is unchanged"
    );
    let sent = &last.messages;
    assert_eq!(sent[0].name(), Some("summary"));
    assert!(sent[0].flag("hide_from_ui"));
    assert!(sent[0].text().contains("- project_id: PRJ-123"));
    // 18 stored before the current input: one fold of the first 8 (fold_batch 8 in
    // these settings), the rest verbatim.
    let unfolded = 18 - state.absorbed_count as usize;
    assert_eq!(
        sent.len(),
        1 + unfolded + 1,
        "summary, every unfolded message (the last 4 and the older ones not folded yet), the current input"
    );
    assert!(unfolded >= 4);
    assert_eq!(sent.last().unwrap().text(), "question 9");

    // State and checkpoints hold the whole thread and never the summary.
    let thread = agent.state("s1").await.unwrap().unwrap();
    assert_eq!(thread.messages.len(), 20);
    assert!(thread.messages.iter().all(|m| m.name() != Some("summary")));
}

#[tokio::test]
async fn a_tool_loop_sends_the_same_prefix_and_folds_at_most_once() {
    let store = Arc::new(MemoryStore::new());
    let scope = SessionScope::new("flow-mw", "ada", "tools", "");
    let mw = Arc::new(
        SessionMemoryMiddleware::builder(settings(scope.clone(), 4))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    // 12 stored messages: 8 older than the last 4, enough to fold.
    seed(store.as_ref(), &scope, 0..12).await;
    let model = agent_model();
    let agent = agent(&model, mw);
    let out = agent
        .invoke("tools", vec![Message::human("please use the tool")])
        .await
        .unwrap();
    assert_eq!(
        out.last_message().unwrap().text(),
        "answer to please use the tool"
    );
    assert_eq!(model.internal_calls(), 1, "one fold for the whole run");
    let calls = user_requests(&model);
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0].messages[..5],
        calls[1].messages[..5],
        "same summary and window on both calls"
    );
    assert_eq!(
        calls[1].messages.len(),
        5 + 3,
        "then input, tool call, tool result"
    );
    for c in &calls {
        check_pairs(&c.messages).unwrap();
    }
    // The whole turn was recorded, tool messages included.
    assert_eq!(store.last_n(&scope, 100).await.unwrap().len(), 12 + 4);
}

#[tokio::test]
async fn n_messages_zero_sends_only_the_current_turn() {
    let store = Arc::new(MemoryStore::new());
    let scope = SessionScope::new("flow-mw", "ada", "off", "");
    let mw = Arc::new(
        SessionMemoryMiddleware::builder(settings(scope.clone(), 0))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    seed(store.as_ref(), &scope, 0..40).await;
    let model = agent_model();
    let agent = agent(&model, mw);
    agent
        .invoke("off", vec![Message::human("first")])
        .await
        .unwrap();
    agent
        .invoke("off", vec![Message::human("second")])
        .await
        .unwrap();
    let calls = user_requests(&model);
    assert_eq!(
        calls[1].messages.len(),
        1,
        "the checkpointed thread is not sent either"
    );
    assert_eq!(calls[1].messages[0].text(), "second");
    assert_eq!(model.internal_calls(), 0);
    assert_eq!(store.get_state(&scope).await.unwrap(), None);
}

/// A log sink for the fallback message.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn without_a_store_it_falls_back_to_last_n_and_logs_once() {
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let scope = SessionScope::new("flow-mw", "ada", "", "");
        let mw = Arc::new(
            SessionMemoryMiddleware::builder(settings(scope, 4))
                .build()
                .unwrap(),
        );
        let model = agent_model();
        let agent = agent(&model, mw.clone());
        for i in 0..6 {
            agent
                .invoke("nostore", vec![Message::human(format!("q{i}"))])
                .await
                .unwrap();
        }
        agent
            .invoke("nostore", vec![Message::human("please use the tool")])
            .await
            .unwrap();
        let calls = user_requests(&model);
        let texts: Vec<String> = calls[5]
            .messages
            .iter()
            .map(|m| m.text().into_owned())
            .collect();
        assert_eq!(
            texts,
            ["q3", "answer to q3", "q4", "answer to q4", "q5"],
            "last 4 earlier messages, then the input"
        );
        for c in &calls {
            check_pairs(&c.messages).unwrap();
            assert!(c.messages.iter().all(|m| m.name() != Some("summary")));
        }
        assert_eq!(model.internal_calls(), 0);
        assert_eq!(
            mw.delete_session(&mw.scope_for_thread("nostore"))
                .await
                .unwrap(),
            0
        );
    });
    let log = String::from_utf8(sink.0.lock().clone()).unwrap();
    assert_eq!(log.matches("no store configured").count(), 1, "{log}");
}

/// A middleware that can never fold says so when it is built, not only at the first
/// run: through `tracing`, and through `inactive()`.
#[test]
fn a_middleware_that_never_folds_warns_when_built() {
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let scope = SessionScope::new("flow-mw", "ada", "", "");
    let no_store = SessionMemoryMiddleware::builder(settings(scope.clone(), 4))
        .build()
        .unwrap();
    assert_eq!(
        no_store.inactive(),
        Some(keel_memory::Inactive::NoStore { n_messages: 4 })
    );
    let off = SessionMemoryMiddleware::builder(settings(scope.clone(), 0))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    assert_eq!(off.inactive(), Some(keel_memory::Inactive::Off));
    let log = String::from_utf8(sink.0.lock().clone()).unwrap();
    assert!(log.contains("WARN"), "{log}");
    assert_eq!(
        log.matches("session memory has no store").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("session memory is off (n_messages = 0)")
            .count(),
        1,
        "{log}"
    );

    let working = SessionMemoryMiddleware::builder(settings(scope, 4))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    assert_eq!(working.inactive(), None);
    let after = String::from_utf8(sink.0.lock().clone()).unwrap();
    assert_eq!(after, log, "a working middleware logs nothing");
}

#[tokio::test]
async fn scopes_are_isolated_at_middleware_level() {
    let store = Arc::new(MemoryStore::new());
    let model = agent_model();
    let ada = Arc::new(
        SessionMemoryMiddleware::builder(settings(SessionScope::new("flow-mw", "ada", "", ""), 4))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    let bob = Arc::new(
        SessionMemoryMiddleware::builder(settings(SessionScope::new("flow-mw", "bob", "", ""), 4))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    let other_flow = Arc::new(
        SessionMemoryMiddleware::builder(settings(
            SessionScope::new("flow-other", "ada", "", ""),
            4,
        ))
        .store(store.clone())
        .build()
        .unwrap(),
    );
    let ada_agent = agent(&model, ada);
    ada_agent
        .invoke(
            "shared-thread",
            vec![Message::human(
                "I'm working on project PRJ-123 on the EU cluster.",
            )],
        )
        .await
        .unwrap();
    for i in 0..8 {
        ada_agent
            .invoke(
                "shared-thread",
                vec![Message::human(format!("ada secret {i}"))],
            )
            .await
            .unwrap();
    }
    assert!(model.internal_calls() > 0, "ada's session folded");
    for (name, mw) in [("bob", bob), ("other flow", other_flow)] {
        let m2 = agent_model();
        // Same thread id, so same session id: only the user or flow differs.
        agent(&m2, mw)
            .invoke("shared-thread", vec![Message::human("hello")])
            .await
            .unwrap();
        let sent = &user_requests(&m2)[0].messages;
        assert_eq!(
            sent.len(),
            1,
            "{name} sees nothing of ada's session: {sent:?}"
        );
        assert_eq!(m2.internal_calls(), 0);
    }
}

#[tokio::test]
async fn deleting_the_session_through_the_middleware_drops_the_summary_and_history() {
    let store = Arc::new(MemoryStore::new());
    let scope = SessionScope::new("flow-mw", "ada", "del", "");
    let mw = Arc::new(
        SessionMemoryMiddleware::builder(settings(scope.clone(), 4))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    seed(store.as_ref(), &scope, 0..12).await;
    let model = agent_model();
    let agent = agent(&model, mw.clone());
    agent
        .invoke("del", vec![Message::human("hi")])
        .await
        .unwrap();
    assert!(store.get_state(&scope).await.unwrap().is_some());
    // 12 seeded messages, the turn's input and answer, and the state row.
    assert_eq!(mw.delete_session(&scope).await.unwrap(), 12 + 2 + 1);
    assert_eq!(store.get_state(&scope).await.unwrap(), None);
    assert!(store.last_n(&scope, 100).await.unwrap().is_empty());
}

#[tokio::test]
async fn fold_events_reach_stream_consumers() {
    let store = Arc::new(MemoryStore::new());
    let scope = SessionScope::new("flow-mw", "ada", "events", "");
    let mw = Arc::new(
        SessionMemoryMiddleware::builder(settings(scope.clone(), 4))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    seed(store.as_ref(), &scope, 0..12).await;
    let model = agent_model();
    let agent = agent(&model, mw);
    let mut stream = agent.stream("events", vec![Message::human("hi")], &[StreamMode::Custom]);
    let mut kinds = Vec::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Custom { payload, .. } = event {
            kinds.push(payload["type"].as_str().unwrap_or_default().to_owned());
        }
    }
    stream.finish().await.unwrap();
    assert_eq!(kinds, ["context_compacting", "session_memory_folded"]);
}

/// The input is recorded when the run starts: a run whose model fails still leaves it
/// in history, and the next turn (or a retry of the same one) records nothing twice.
#[tokio::test]
async fn a_failed_run_leaves_its_input_in_history_and_a_retry_writes_nothing_twice() {
    let store = Arc::new(MemoryStore::new());
    let scope = SessionScope::new("flow-mw", "ada", "", "");
    let mw = Arc::new(
        SessionMemoryMiddleware::builder(settings(scope, 4))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    let model = Arc::new(ScriptedModel::with_results([
        Err(keel_core::model::ModelError::new(
            keel_core::model::ModelErrorKind::Connection,
            "the provider is down",
        )),
        Ok(Message::ai("back again").with_id("a1")),
    ]));
    let agent = agent(&model, mw.clone());
    let input = Message::human("are you there?").with_id("q1");
    let err = agent.invoke("s9", vec![input.clone()]).await.unwrap_err();
    assert!(err.to_string().contains("provider is down"), "{err}");
    let stored_scope = mw.scope_for_thread("s9");
    let ids = |h: Vec<keel_core::store::StoredMessage>| {
        h.into_iter()
            .map(|m| m.message.id().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(store.last_n(&stored_scope, 10).await.unwrap()), ["q1"]);
    // Resuming the thread (no new input) answers; the turn is recorded once.
    agent.invoke("s9", vec![]).await.unwrap();
    assert_eq!(
        ids(store.last_n(&stored_scope, 10).await.unwrap()),
        ["q1", "a1"]
    );
    // Recording the same turn again (a retried after_agent) is a no-op, not an error.
    let state = agent.state("s9").await.unwrap().unwrap();
    let compressor = mw.compressor().unwrap();
    assert_eq!(
        compressor
            .record(&stored_scope, &state.messages)
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.last_n(&stored_scope, 10).await.unwrap().len(), 2);
}

/// Time travel: editing the first message forks the thread from its empty first
/// checkpoint. The session starts again from the fork point: the model is never sent
/// the abandoned branch, neither verbatim nor through the summary folded from it.
#[tokio::test]
async fn a_fork_starts_the_session_again_from_the_fork_point() {
    let store = Arc::new(MemoryStore::new());
    let scope = SessionScope::new("flow-mw", "ada", "", "");
    let mw = Arc::new(
        SessionMemoryMiddleware::builder(settings(scope.clone(), 4))
            .store(store.clone())
            .build()
            .unwrap(),
    );
    let model = agent_model();
    let agent = Agent::builder()
        .model(model.clone())
        .system_prompt("You are a support assistant.")
        .middleware_shared(mw.clone())
        .checkpointer(store.clone())
        .build()
        .unwrap();
    agent
        .invoke("t", vec![Message::human("The old plan is PLAN-ABANDONED.")])
        .await
        .unwrap();
    for i in 0..10 {
        agent
            .invoke("t", vec![Message::human(format!("old branch turn {i}"))])
            .await
            .unwrap();
    }
    let session = mw.scope_for_thread("t");
    let folded = store.get_state(&session).await.unwrap().unwrap();
    assert!(folded.absorbed_count > 0, "the old branch was folded");

    let history = agent.checkpointer().history("t").await.unwrap();
    let first = history.iter().find(|c| c.messages.is_empty()).unwrap().seq;
    let out = agent
        .invoke_from("t", first, vec![Message::human("The plan is PLAN-NEW.")])
        .await
        .unwrap();
    assert_eq!(
        out.state.messages.len(),
        2,
        "the thread follows the new branch"
    );
    let sent = user_requests(&model).last().unwrap().clone();
    let text: String = sent
        .messages
        .iter()
        .map(|m| m.text().into_owned() + "\n")
        .collect();
    assert!(
        !text.contains("ABANDONED") && !text.contains("old branch"),
        "{text}"
    );
    assert!(text.contains("PLAN-NEW"));
    let recorded = store.last_n(&session, 100).await.unwrap();
    assert!(
        recorded
            .iter()
            .all(|r| !r.message.text().contains("old branch")),
        "the abandoned branch is gone from the chat history"
    );
    // Nothing folded from the old branch survives: the fork point holds no message.
    let state = store.get_state(&session).await.unwrap();
    assert!(
        state.as_ref().is_none_or(|s| s.absorbed_count == 0),
        "{state:?}"
    );
}

#[tokio::test]
async fn as_a_layer_session_memory_keeps_its_history_in_the_agents_one_store() {
    use keel_core::store::Checkpointer;
    let store = Arc::new(MemoryStore::new());
    let scope = SessionScope::flow("flow-layer").user("ada");
    let model = agent_model();
    // The store is given once, to the agent; the memory builder has none of its own.
    let agent = Agent::builder()
        .model(model.clone())
        .store(store.clone())
        .layer(SessionMemoryMiddleware::builder(settings(scope, 4)))
        .build()
        .unwrap();
    agent
        .invoke("t1", vec![Message::human("question 1")])
        .await
        .unwrap();
    let stored = SessionScope::flow("flow-layer").user("ada").session("t1");
    let history = store.last_n(&stored, 10).await.unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0].message.text(), "question 1");
    // The same store holds the thread's checkpoints.
    assert!(store.latest("t1").await.unwrap().is_some());
}
