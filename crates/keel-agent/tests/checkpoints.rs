//! Checkpoints: one per step, append-only, and a thread resumes from its latest one.

use std::sync::Arc;

use keel_agent::{Agent, InMemoryCheckpointer};
use keel_core::message::Message;
use keel_core::middleware::{HookOutcome, Middleware, MiddlewareError, Runtime};
use keel_core::state::{AgentState, MessageOp, StateUpdate};
use keel_core::store::Checkpointer;
use keel_testkit::ScriptedModel;

#[tokio::test]
async fn a_thread_resumes_from_its_latest_checkpoint() {
    let checkpointer = Arc::new(InMemoryCheckpointer::new());
    let model = Arc::new(ScriptedModel::new([Message::ai("one"), Message::ai("two")]));
    let agent = Agent::builder()
        .model(model.clone())
        .checkpointer(checkpointer.clone())
        .build()
        .unwrap();
    agent
        .invoke("t", vec![Message::human("first")])
        .await
        .unwrap();
    let out = agent
        .invoke("t", vec![Message::human("second")])
        .await
        .unwrap();
    let texts: Vec<_> = model.requests()[1]
        .messages
        .iter()
        .map(|m| m.text().into_owned())
        .collect();
    assert_eq!(texts, ["first", "one", "second"]);
    assert_eq!(out.state.messages.len(), 4);
    let nodes: Vec<_> = checkpointer
        .history("t")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.node)
        .collect();
    // The first checkpoint is the empty one before the input.
    assert_eq!(nodes, ["input", "input", "model", "input", "model"]);
    // Another thread starts empty.
    assert!(agent.state("u").await.unwrap().is_none());
    assert_eq!(agent.state("t").await.unwrap().unwrap().messages.len(), 4);
}

/// Clears the list before the model call (a destructive compaction).
struct Wipe;

#[keel_core::middleware]
impl Middleware for Wipe {
    fn name(&self) -> &str {
        "Wipe"
    }
    async fn before_model(
        &self,
        state: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let last = state.messages.last().cloned().into_iter();
        Ok(HookOutcome::update(StateUpdate {
            messages: std::iter::once(MessageOp::RemoveAll)
                .chain(last.map(|message| MessageOp::Upsert { message }))
                .collect(),
            ..Default::default()
        }))
    }
}

#[tokio::test]
async fn removals_change_current_state_but_earlier_checkpoints_keep_everything() {
    let checkpointer = Arc::new(InMemoryCheckpointer::new());
    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([Message::ai("a")])))
        .middleware(Wipe)
        .checkpointer(checkpointer.clone())
        .build()
        .unwrap();
    let input = vec![
        Message::human("old 1"),
        Message::ai("old 2"),
        Message::human("now"),
    ];
    let out = agent.invoke("t", input).await.unwrap();
    assert_eq!(out.state.messages.len(), 2, "wiped, then the answer");
    let history = checkpointer.history("t").await.unwrap();
    let nodes: Vec<_> = history.iter().map(|c| c.node.as_str()).collect();
    assert_eq!(nodes, ["input", "input", "Wipe.before_model", "model"]);
    assert!(
        history[0].messages.is_empty(),
        "the first checkpoint is empty"
    );
    assert_eq!(
        history[1].messages.len(),
        3,
        "the input checkpoint keeps every message"
    );
    assert!(history.iter().all(|c| c.run_id == out.run_id));
}
