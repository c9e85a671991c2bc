//! One writer per thread: a run whose head another writer moved fails with a typed
//! conflict and overwrites nothing; `reject` refuses a second run; a run's own strategy
//! overrides the agent's; the waiting runs are visible and each run can be cancelled; a
//! thread left with a dangling tool call resumes with the call answered as cancelled.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::{
    Agent, AgentError, CancelAction, InMemoryCheckpointer, MultitaskStrategy, RunOptions,
    RunOutput, ThreadRuns,
};
use keel_core::message::{Content, Message, ToolCall};
use keel_core::state::StateUpdate;
use keel_core::store::{CheckpointWrite, Checkpointer, PutOutcome};
use keel_core::tool::{Tool, ToolError, ToolSpec};
use keel_testkit::ScriptedModel;
use serde_json::json;
use tokio::sync::Notify;

/// A tool that tells the test it started, then waits for the test's go.
struct Gate {
    spec: ToolSpec,
    started: Arc<Notify>,
    go: Arc<Notify>,
}

#[async_trait]
impl Tool for Gate {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _: serde_json::Value) -> Result<Content, ToolError> {
        self.started.notify_one();
        self.go.notified().await;
        Ok(Content::Text("done".into()))
    }
}

fn calls_gate() -> Message {
    Message::ai("").with_tool_calls(vec![ToolCall::new("call-1", "gate", json!({}))])
}

fn gated_agent(
    checkpointer: Arc<InMemoryCheckpointer>,
    strategy: MultitaskStrategy,
) -> (Agent, Arc<Notify>, Arc<Notify>) {
    let (started, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([
            calls_gate(),
            Message::ai("finished"),
        ])))
        .tool(Gate {
            spec: ToolSpec::new("gate", "waits", json!({"type": "object"})),
            started: started.clone(),
            go: go.clone(),
        })
        .checkpointer(checkpointer)
        .multitask_strategy(strategy)
        .build()
        .unwrap();
    (agent, started, go)
}

#[tokio::test]
async fn a_run_whose_head_another_writer_moved_fails_with_conflict_and_overwrites_nothing() {
    let checkpointer = Arc::new(InMemoryCheckpointer::with_limits(0, 8));
    let (agent, started, go) = gated_agent(checkpointer.clone(), MultitaskStrategy::Enqueue);
    let run = tokio::spawn({
        let agent = agent.clone();
        async move { agent.invoke("t", vec![Message::human("go")]).await }
    });
    started.notified().await;
    // Another process appends to the thread while the tool runs.
    let head = checkpointer.latest("t").await.unwrap().unwrap().seq;
    let other = CheckpointWrite {
        parent: Some(head),
        run_id: "other-process".into(),
        node: "input".into(),
        update: StateUpdate::messages([Message::human("me too").with_id("other")]),
        created_at_ms: 0,
    };
    assert_eq!(
        checkpointer.put("t", other).await.unwrap(),
        PutOutcome::Saved { seq: head + 1 }
    );
    go.notify_one();
    let err = run.await.unwrap().unwrap_err();
    match &err {
        AgentError::Conflict {
            thread_id,
            parent,
            head: now,
        } => {
            assert_eq!(thread_id, "t");
            assert_eq!(*parent, Some(head));
            assert_eq!(*now, Some(head + 1));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(err.to_string().contains("nothing was overwritten"), "{err}");
    let state = agent.state("t").await.unwrap().unwrap();
    assert_eq!(
        state.messages.last().unwrap().id(),
        "other",
        "the other writer's step stays"
    );
}

#[tokio::test]
async fn reject_refuses_a_second_run_while_the_first_is_active() {
    let checkpointer = Arc::new(InMemoryCheckpointer::with_limits(0, 8));
    let (agent, started, go) = gated_agent(checkpointer.clone(), MultitaskStrategy::Reject);
    let first = tokio::spawn({
        let agent = agent.clone();
        async move { agent.invoke("t", vec![Message::human("first")]).await }
    });
    started.notified().await;
    let err = agent
        .invoke("t", vec![Message::human("second").with_id("second")])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AgentError::Rejected { thread_id, strategy: MultitaskStrategy::Reject } if thread_id == "t"),
        "{err:?}"
    );
    assert!(err.to_string().contains("reject"), "{err}");
    go.notify_one();
    let out = first.await.unwrap().unwrap();
    assert!(out.state.messages.iter().all(|m| m.id() != "second"));
    assert_eq!(out.last_message().unwrap().text(), "finished");
}

#[tokio::test]
async fn a_dangling_tool_call_is_answered_as_cancelled_when_the_thread_resumes() {
    let checkpointer = Arc::new(InMemoryCheckpointer::with_limits(0, 8));
    // A crashed run left this: the model asked for a tool, no result was saved.
    let crashed = CheckpointWrite {
        parent: None,
        run_id: "crashed".into(),
        node: "model".into(),
        update: StateUpdate::messages([
            Message::human("deploy").with_id("q"),
            calls_gate().with_id("a"),
        ]),
        created_at_ms: 0,
    };
    checkpointer.put("t", crashed).await.unwrap();
    let model = Arc::new(ScriptedModel::new([Message::ai("resumed")]));
    let agent = Agent::builder()
        .model(model.clone())
        .checkpointer(checkpointer.clone())
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![]).await.unwrap();
    let sent: Vec<String> = model.requests()[0]
        .messages
        .iter()
        .map(|m| m.id().to_owned())
        .collect();
    assert_eq!(sent, ["q", "a", "cancelled-call-1"]);
    assert_eq!(out.state.messages.len(), 4);
    let history = checkpointer.history("t").await.unwrap();
    assert_eq!(
        history.iter().map(|c| c.node.as_str()).collect::<Vec<_>>(),
        ["model", "input", "model"]
    );
}

/// Starts a run on thread `t` in the background, its input one message whose text and
/// id are `id`.
fn spawn_run(
    agent: &Agent,
    id: &'static str,
    options: RunOptions,
) -> tokio::task::JoinHandle<Result<RunOutput, AgentError>> {
    let agent = agent.clone();
    tokio::spawn(async move {
        let input = vec![Message::human(id).with_id(id)];
        agent.invoke_with("t", input, options).await
    })
}

/// Waits until the agent shows `waiting` runs behind an active one on thread `t`.
async fn until_waiting(agent: &Agent, waiting: usize) -> ThreadRuns {
    loop {
        let runs = agent.thread_runs("t");
        if runs.active.is_some() && runs.waiting.len() == waiting {
            return runs;
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_run_s_own_strategy_overrides_the_agent_s() {
    let checkpointer = Arc::new(InMemoryCheckpointer::with_limits(0, 8));
    // The agent enqueues; one run asks to reject, a later one to roll back.
    let (agent, started, go) = gated_agent(checkpointer.clone(), MultitaskStrategy::Enqueue);
    let first = spawn_run(&agent, "first", RunOptions::new());
    started.notified().await;
    let reject = RunOptions::new().multitask(MultitaskStrategy::Reject);
    let err = agent
        .invoke_with("t", vec![Message::human("refused")], reject)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            AgentError::Rejected {
                strategy: MultitaskStrategy::Reject,
                ..
            }
        ),
        "{err:?}"
    );
    let rollback = RunOptions::new()
        .multitask(MultitaskStrategy::Rollback)
        .run_id("second");
    let second = spawn_run(&agent, "second", rollback);
    until_waiting(&agent, 1).await;
    go.notify_one();
    let err = first.await.unwrap().unwrap_err();
    assert!(matches!(&err, AgentError::RolledBack { .. }), "{err:?}");
    let out = second.await.unwrap().unwrap();
    assert_eq!(out.run_id, "second");
    let ids: Vec<&str> = out.state.messages.iter().map(|m| m.id()).collect();
    assert!(
        !ids.contains(&"first"),
        "the rolled-back run's steps are reverted: {ids:?}"
    );
    assert_eq!(out.last_message().unwrap().text(), "finished");
}

#[tokio::test]
async fn waiting_runs_are_visible_and_each_run_can_be_cancelled() {
    let checkpointer = Arc::new(InMemoryCheckpointer::with_limits(0, 8));
    let (agent, started, go) = gated_agent(checkpointer.clone(), MultitaskStrategy::Enqueue);
    let spawn = |id: &'static str| spawn_run(&agent, id, RunOptions::new().run_id(id));
    let first = spawn("first");
    started.notified().await;
    // An id the thread's runs already use is refused before anything is written.
    let taken = RunOptions::new().run_id("first");
    let err = agent
        .invoke_with("t", vec![Message::human("again").with_id("again")], taken)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AgentError::DuplicateRunId { run_id, .. } if run_id == "first"),
        "{err:?}"
    );
    let second = spawn("second");
    until_waiting(&agent, 1).await;
    let third = spawn("third");
    let runs = until_waiting(&agent, 2).await;
    assert_eq!(runs.active.as_deref(), Some("first"));
    assert_eq!(runs.waiting, ["second", "third"]);

    // A waiting run leaves the queue without starting: its input is never written.
    assert!(agent.cancel_run("t", "second", CancelAction::Interrupt));
    let err = second.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, AgentError::Interrupted { run_id, .. } if run_id == "second"),
        "{err:?}"
    );
    assert_eq!(agent.thread_runs("t").waiting, ["third"]);
    // The active run stops at its next step, keeping what it saved.
    assert!(agent.cancel_run("t", "first", CancelAction::Interrupt));
    assert!(!agent.cancel_run("t", "nobody", CancelAction::Interrupt));
    go.notify_one();
    let err = first.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, AgentError::Interrupted { run_id, .. } if run_id == "first"),
        "{err:?}"
    );
    let out = third.await.unwrap().unwrap();
    let ids: Vec<&str> = out.state.messages.iter().map(|m| m.id()).collect();
    assert!(ids.contains(&"first") && ids.contains(&"third"), "{ids:?}");
    assert!(
        !ids.contains(&"second") && !ids.contains(&"again"),
        "{ids:?}"
    );
    assert_eq!(agent.thread_runs("t"), ThreadRuns::default());
}

#[tokio::test]
async fn a_run_cancelled_with_rollback_reverts_its_steps_with_no_run_after_it() {
    let checkpointer = Arc::new(InMemoryCheckpointer::with_limits(0, 8));
    let (agent, started, go) = gated_agent(checkpointer.clone(), MultitaskStrategy::Enqueue);
    let first = spawn_run(&agent, "first", RunOptions::new().run_id("first"));
    started.notified().await;
    // Its input, the model's tool call, and (once the tool returns) the result are saved.
    assert!(agent.cancel_run("t", "first", CancelAction::Rollback));
    go.notify_one();
    let err = first.await.unwrap().unwrap_err();
    assert!(matches!(&err, AgentError::RolledBack { .. }), "{err:?}");
    // Nobody runs after it, and still nothing of it is left in the thread's state.
    let state = agent.state("t").await.unwrap().unwrap_or_default();
    assert!(state.messages.is_empty(), "{:?}", state.messages);
    let head = checkpointer.latest("t").await.unwrap().unwrap();
    assert_eq!(head.node, keel_agent::ROLLBACK_NODE);
}
