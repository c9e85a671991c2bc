//! The whole path through the `keel` facade: an agent with session memory on SQLite
//! (folds written by a model), summarization configured from YAML, a tool loop, and the
//! stream a chat UI receives.
//!
//! Models are keel-testkit's `ScriptedModel`s (a dev-dependency): the run's model, the
//! summary model and the fold model are separate, so each test can say exactly which
//! one was asked what.

// Test helpers may unwrap: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use futures::StreamExt;
use keel::agent::Agent;
use keel::memory::{SessionMemoryMiddleware, SessionMemorySettings};
use keel::model::ChatChunk;
use keel::sql::Store;
use keel::store::{SessionMemoryStore, SessionScope};
use keel::summarization::config::SummarizationConfig;
use keel::summarization::middleware::SummarizationMiddleware;
use keel::{Message, StreamEvent, StreamMode, ToolCall};
use keel_testkit::{FnTool, RecordedRequest, ScriptedModel};
use serde_json::json;

/// Summarization as a user would configure it: DeerFlow's keys, small numbers.
const SUMMARIZATION_YAML: &str = "
summarization:
  enabled: true
  model_name: null
  trigger:
    - type: messages
      value: 10
  keep:
    type: messages
    value: 4
  stickiness_headroom: null
  compacting_message: Compacting…
";

const FOLD_ANSWER: &str = r#"{"pinned": {"project_id": "PRJ-123", "cluster": "EU"}, "summary": "- Ada works on PRJ-123 on the EU cluster"}"#;
const SUMMARY_ANSWER: &str = "- Ada works on PRJ-123 on the EU cluster\n- the ingest job fails";

/// The run's model: calls `lookup_ticket` when a message mentions a ticket, reports
/// the tool's result, otherwise answers with how many messages it was sent.
fn run_model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::from_fn(|r: &RecordedRequest| {
        let last = r.messages.last().expect("a request has messages");
        if last.tool_call_id().is_some() {
            return Ok(Message::ai(format!("Ticket says: {}", last.text())));
        }
        if last.text().contains("ticket") {
            let id = format!("call_{}", r.messages.len());
            return Ok(Message::ai("").with_tool_calls(vec![ToolCall::new(
                id,
                "lookup_ticket",
                json!({"id": "INC-7"}),
            )]));
        }
        Ok(Message::ai(format!(
            "answer to {} messages",
            r.messages.len()
        )))
    }))
}

struct Stack {
    agent: Agent,
    run: Arc<ScriptedModel>,
    summary: Arc<ScriptedModel>,
    fold: Arc<ScriptedModel>,
    store: Arc<Store>,
    _dir: tempfile::TempDir,
}

async fn stack() -> Stack {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("keel.db").display());
    let store = Arc::new(Store::connect(&url).await.unwrap());
    let run = run_model();
    let summary = Arc::new(ScriptedModel::from_fn(|_| Ok(Message::ai(SUMMARY_ANSWER))));
    let fold = Arc::new(ScriptedModel::from_fn(|_| Ok(Message::ai(FOLD_ANSWER))));

    let mut settings = SessionMemorySettings::for_scope(SessionScope::new("stack", "ada", "", ""))
        .with_pinned_keys(["project_id", "cluster"]);
    settings.n_messages = 8;
    settings.fold_batch = 4;
    let memory = SessionMemoryMiddleware::builder(settings)
        .store(store.clone())
        .summary_model(fold.clone())
        .build()
        .unwrap();
    let config = SummarizationConfig::from_yaml_str(SUMMARIZATION_YAML)
        .unwrap()
        .config;
    let summarization = SummarizationMiddleware::builder(config)
        .summary_model(summary.clone())
        .cache(Arc::new(keel::summarization::cache::SummaryCache::new(16)))
        .build()
        .unwrap();
    let agent = Agent::builder()
        .model(run.clone())
        .tool(FnTool::new("lookup_ticket", |args| {
            Ok(format!("{} is open", args["id"].as_str().unwrap_or("?")).into())
        }))
        .middleware(memory)
        .middleware(summarization)
        .checkpointer(store.clone())
        .build()
        .unwrap();
    Stack {
        agent,
        run,
        summary,
        fold,
        store,
        _dir: dir,
    }
}

/// A readable line per event: what a UI would act on.
fn describe(event: &StreamEvent) -> String {
    match event {
        StreamEvent::Values { state } => format!("values {}", state.messages.len()),
        StreamEvent::Updates { node, .. } => format!("updates {node}"),
        StreamEvent::Messages { chunk, .. } => match chunk {
            ChatChunk::Text { text } => format!("messages text {text:?}"),
            ChatChunk::ToolCall { name, .. } => format!("messages tool_call {name:?}"),
            other => format!("messages {other:?}"),
        },
        StreamEvent::Custom { node, payload } => {
            format!("custom {node} {}", payload["type"].as_str().unwrap_or("?"))
        }
        other => format!("{:?}", other.mode()),
    }
}

async fn turn(agent: &Agent, thread: &str, text: &str) -> Vec<String> {
    let mut run = agent.stream(
        thread,
        vec![Message::human(text)],
        &[
            StreamMode::Values,
            StreamMode::Updates,
            StreamMode::Messages,
            StreamMode::Custom,
        ],
    );
    let mut events = Vec::new();
    while let Some(event) = run.next().await {
        events.push(describe(&event));
    }
    run.into_result().expect("the stream ended").unwrap();
    events
}

fn opening() -> &'static str {
    "I'm Ada, working on project PRJ-123 on the EU cluster."
}

#[tokio::test]
async fn memory_summarization_tools_and_streaming_work_together() {
    let s = stack().await;
    let thread = "session-1";
    turn(&s.agent, thread, opening()).await;
    for i in 1..=12 {
        let text = if i % 4 == 0 {
            format!("Step {i}: check ticket INC-7 please")
        } else {
            format!("Step {i}: the ingest job failed again")
        };
        turn(&s.agent, thread, &text).await;
    }

    // Session memory folded older history with its model, and saved the result.
    assert!(s.fold.calls() > 0, "session memory folded with its model");
    assert!(s.fold.requests().iter().all(|r| r.internal));
    let scope = SessionScope::new("stack", "ada", thread, "");
    let saved = s
        .store
        .get_state(&scope)
        .await
        .unwrap()
        .expect("a saved state");
    assert!(saved.absorbed_count > 0);
    assert_eq!(saved.pinned["project_id"], "PRJ-123");

    // Summarization compacted what memory produced, with its own model.
    assert!(s.summary.calls() > 0, "summarization called its model");
    assert!(s.summary.requests().iter().all(|r| r.internal));

    // Every request the run's model received was compact and pair-safe, and the fact
    // from the first turn still reached it, through one summary or the other.
    for r in s.run.requests() {
        assert!(
            r.messages.len() <= 10 + 3,
            "request of {} messages",
            r.messages.len()
        );
        for (i, m) in r.messages.iter().enumerate() {
            if let Some(id) = m.tool_call_id() {
                let called = r.messages[..i]
                    .iter()
                    .any(|p| p.tool_calls().iter().any(|c| c.id == id));
                assert!(called, "tool result {id} without its call");
            }
        }
    }
    let last = s.run.requests().last().cloned().unwrap();
    assert!(last.messages.iter().any(|m| m.text().contains("PRJ-123")));

    // The tool loop ran: three ticket turns, each a call and its result.
    let state = s.agent.state(thread).await.unwrap().unwrap();
    let results = state
        .messages
        .iter()
        .filter(|m| m.tool_call_id().is_some())
        .count();
    assert_eq!(results, 3);
    assert!(
        state
            .messages
            .iter()
            .any(|m| m.text() == "Ticket says: INC-7 is open")
    );
    // State keeps everything: 13 turns of two messages, plus a call and a result for
    // each of the three ticket turns.
    assert_eq!(state.messages.len(), 13 * 2 + 3 * 2);
}

#[tokio::test]
async fn a_ui_receives_the_events_of_a_compacting_tool_turn_in_order() {
    let s = stack().await;
    let thread = "session-2";
    turn(&s.agent, thread, opening()).await;
    for i in 1..=3 {
        turn(&s.agent, thread, &format!("Step {i}: the job failed")).await;
    }
    // 8 messages in state; this turn's input makes 9, its tool call and result 11,
    // over the trigger of 10: the second model call of the turn is compacted.
    let events = turn(&s.agent, thread, "Step 4: check ticket INC-7 please").await;
    assert_eq!(
        events,
        [
            // Session memory's before_agent records the input and writes nothing to
            // state, so it sends no values (as LangGraph sends none for a node that
            // wrote nothing).
            "values 9",
            // First model call: under every trigger, sent as is. It asks for the tool.
            "messages tool_call Some(\"lookup_ticket\")",
            "updates model",
            "values 10",
            "updates tools",
            "values 11",
            // Second model call: over the trigger. The toast comes while the run waits
            // on the summary call, then the report, then the answer's tokens.
            "custom model context_compacting",
            "custom model context_compacted",
            "messages text \"Ticket says: INC-7 is open\"",
            "updates model",
            // Session memory's after_agent saves the turn: no values either.
            "values 12",
        ]
    );
    assert_eq!(s.summary.calls(), 1);
}
