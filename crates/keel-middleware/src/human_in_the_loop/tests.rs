use std::sync::Arc;

use futures::StreamExt;
use keel_agent::InMemoryCheckpointer;
use keel_core::message::{Message, ToolCall, ToolStatus};
use keel_core::store::Checkpointer;
use keel_core::stream::{StreamEvent, StreamMode};
use keel_testkit::ScriptedModel;
use serde_json::json;

use super::*;
use crate::test_support::builder;

fn hitl() -> HumanInTheLoop {
    HumanInTheLoop::new(
        vec![
            ("fail".into(), InterruptOn::all()),
            (
                "search".into(),
                InterruptOn {
                    allowed_decisions: vec![DecisionType::Approve, DecisionType::Reject],
                    description: None,
                },
            ),
        ],
        DEFAULT_DESCRIPTION_PREFIX,
    )
    .unwrap()
}

fn gated_turn() -> Message {
    Message::ai("").with_tool_calls(vec![
        ToolCall::new("s1", "search", json!({"q": "rust"})),
        ToolCall::new("e1", "echo", json!({"x": 1})),
        ToolCall::new("f1", "fail", json!({"path": "/tmp/a"})),
    ])
}

fn agent_on(model: &Arc<ScriptedModel>, checkpointer: Arc<dyn Checkpointer>) -> Agent {
    builder(model, vec![Arc::new(hitl())])
        .checkpointer(checkpointer)
        .build()
        .unwrap()
}

#[tokio::test]
async fn gated_calls_pause_the_run_and_the_interrupt_is_streamed() {
    let model = Arc::new(ScriptedModel::new([gated_turn()]));
    let agent = agent_on(&model, Arc::new(InMemoryCheckpointer::new()));
    let mut stream = agent.stream("t", vec![Message::human("go")], &[StreamMode::Updates]);
    let mut seen = None;
    while let Some(event) = stream.next().await {
        if let StreamEvent::Updates { node, update } = event
            && let Some(v) = update.values.get(INTERRUPT_KEY)
        {
            seen = Some((node, v.clone()));
        }
    }
    let out = stream.into_result().unwrap().unwrap();
    let (node, value) = seen.unwrap();
    assert_eq!(node, "HumanInTheLoopMiddleware.after_model");
    let pending: Interrupt = serde_json::from_value(value).unwrap();
    assert_eq!(pending.tool_call_ids, ["s1", "f1"]);
    assert_eq!(
        pending.action_requests[0].description,
        "Tool execution requires approval\n\nTool: search\nArgs: {'q': 'rust'}"
    );
    assert_eq!(
        pending.review_configs[0].allowed_decisions,
        [DecisionType::Approve, DecisionType::Reject]
    );
    // Nothing ran: the last message is the AI message with its three calls.
    assert!(out.state.messages.last().unwrap().is_ai());
    assert_eq!(Interrupt::of(&out.state), Some(pending));
}

#[tokio::test]
async fn a_resume_from_a_fresh_agent_applies_every_decision() {
    let checkpointer: Arc<dyn Checkpointer> = Arc::new(InMemoryCheckpointer::new());
    let model = Arc::new(ScriptedModel::new([gated_turn()]));
    agent_on(&model, checkpointer.clone())
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap();

    // Another agent (another process, after a restart) on the same store resumes.
    let model = Arc::new(ScriptedModel::new([Message::ai("done")]));
    let agent = agent_on(&model, checkpointer);
    let out = HumanInTheLoop::resume(
        &agent,
        "t",
        vec![
            Decision::Reject {
                message: Some("not now".into()),
            },
            Decision::Edit {
                edited_action: Action {
                    name: "echo".into(),
                    args: json!({"path": "/tmp/b"}),
                },
            },
        ],
    )
    .await
    .unwrap();
    let m = &out.state.messages;
    let find = |id: &str| m.iter().find(|x| x.tool_call_id() == Some(id)).unwrap();
    assert_eq!(
        find("s1").text(),
        "User rejected the tool call for `search` with reason: not now"
    );
    assert_eq!(find("s1").as_tool().unwrap().status, ToolStatus::Error);
    // The edit replaced the failing tool: the echo ran with the edited arguments.
    assert_eq!(find("f1").text(), "{\"path\":\"/tmp/b\"}");
    // The ungated call ran too.
    assert_eq!(find("e1").text(), "{\"x\":1}");
    assert_eq!(m.last().unwrap().text(), "done");
    assert_eq!(Interrupt::of(&out.state), None);
    // The model read the results, after the resume.
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn decisions_are_checked() {
    let checkpointer: Arc<dyn Checkpointer> = Arc::new(InMemoryCheckpointer::new());
    let model = Arc::new(ScriptedModel::new([gated_turn()]));
    let agent = agent_on(&model, checkpointer);
    agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    let err = HumanInTheLoop::resume(&agent, "t", vec![Decision::Approve])
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ResumeError::DecisionCount {
            expected: 2,
            given: 1
        }
    ));
    // `search` does not allow `respond`.
    let err = HumanInTheLoop::resume(
        &agent,
        "t",
        vec![
            Decision::Respond {
                message: "42".into(),
            },
            Decision::Approve,
        ],
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("not allowed for tool 'search'"),
        "{err}"
    );
    let err = HumanInTheLoop::resume(&agent, "never-ran", vec![])
        .await
        .unwrap_err();
    assert!(matches!(err, ResumeError::NothingPending { .. }));
}

#[tokio::test]
async fn a_new_message_to_a_paused_thread_is_refused() {
    let model = Arc::new(ScriptedModel::new([gated_turn()]));
    let agent = agent_on(&model, Arc::new(InMemoryCheckpointer::new()));
    agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    let err = agent
        .invoke("t", vec![Message::human("hello?")])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("paused for review"), "{err}");
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn respond_and_approve() {
    let checkpointer: Arc<dyn Checkpointer> = Arc::new(InMemoryCheckpointer::new());
    let model = Arc::new(ScriptedModel::new([gated_turn(), Message::ai("ok")]));
    let agent = agent_on(&model, checkpointer);
    agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    let out = HumanInTheLoop::resume(
        &agent,
        "t",
        vec![
            Decision::Approve,
            Decision::Respond {
                message: "the file is fine".into(),
            },
        ],
    )
    .await
    .unwrap();
    let m = &out.state.messages;
    let find = |id: &str| m.iter().find(|x| x.tool_call_id() == Some(id)).unwrap();
    assert_eq!(find("s1").text(), "{\"q\":\"rust\"}");
    assert_eq!(find("f1").text(), "the file is fine");
    assert_eq!(find("f1").as_tool().unwrap().status, ToolStatus::Success);
    assert_eq!(m.last().unwrap().text(), "ok");
}

#[tokio::test]
async fn the_pause_survives_a_restart_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("keel.db").display());
    {
        let store: Arc<dyn Checkpointer> =
            Arc::new(keel_store::Store::connect(&url).await.unwrap());
        let model = Arc::new(ScriptedModel::new([gated_turn()]));
        agent_on(&model, store)
            .invoke("t", vec![Message::human("go")])
            .await
            .unwrap();
    }
    // Everything above is gone but the database file.
    let store: Arc<dyn Checkpointer> = Arc::new(keel_store::Store::connect(&url).await.unwrap());
    let model = Arc::new(ScriptedModel::new([Message::ai("done")]));
    let agent = agent_on(&model, store);
    let paused = agent.state("t").await.unwrap().unwrap();
    assert_eq!(Interrupt::of(&paused).unwrap().tool_call_ids, ["s1", "f1"]);
    let out = HumanInTheLoop::resume(&agent, "t", vec![Decision::Approve, Decision::Approve])
        .await
        .unwrap();
    assert_eq!(out.last_message().unwrap().text(), "done");
    let f1 = out
        .state
        .messages
        .iter()
        .find(|m| m.tool_call_id() == Some("f1"))
        .unwrap();
    assert_eq!(f1.text(), "fail failed: boom");
}

#[tokio::test]
async fn per_call_mode_pauses_once_per_gated_call_in_order() {
    let model = Arc::new(ScriptedModel::new([gated_turn(), Message::ai("done")]));
    let agent = builder(
        &model,
        vec![Arc::new(hitl().with_mode(InterruptMode::PerCall))],
    )
    .build()
    .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    assert_eq!(Interrupt::of(&out.state).unwrap().tool_call_ids, ["s1"]);
    let out = HumanInTheLoop::resume(&agent, "t", vec![Decision::Approve])
        .await
        .unwrap();
    // The approved call waits for the others: nothing ran yet.
    assert_eq!(Interrupt::of(&out.state).unwrap().tool_call_ids, ["f1"]);
    assert!(
        !out.state
            .messages
            .iter()
            .any(|m| m.tool_call_id() == Some("s1"))
    );
    let out = HumanInTheLoop::resume(&agent, "t", vec![Decision::Reject { message: None }])
        .await
        .unwrap();
    let m = &out.state.messages;
    let find = |id: &str| m.iter().find(|x| x.tool_call_id() == Some(id)).unwrap();
    assert_eq!(find("s1").text(), "{\"q\":\"rust\"}");
    assert_eq!(
        find("f1").text(),
        "User rejected the tool call for `fail` with id f1. The tool was not executed. Do not retry this tool call unless the user explicitly requests it."
    );
    assert_eq!(m.last().unwrap().text(), "done");
    assert_eq!(Interrupt::of(&out.state), None);
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn input_answering_every_open_call_ends_the_review_and_resolve_ends_it_unrun() {
    let model = Arc::new(ScriptedModel::new([
        gated_turn(),
        Message::ai("ok"),
        gated_turn(),
    ]));
    let agent = agent_on(&model, Arc::new(InMemoryCheckpointer::new()));
    agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    // Input answering only some of the open calls: still a pending review.
    let err = agent
        .invoke("t", vec![Message::tool("s1", "no"), Message::human("next")])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("paused for review"), "{err}");
    // Every open call answered (gated or not): the review ends and the model goes on.
    let out = agent
        .invoke(
            "t",
            vec![
                Message::tool("e1", "no"),
                Message::tool("f1", "no"),
                Message::human("next"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(out.state.messages.last().unwrap().text(), "ok");
    assert_eq!(Interrupt::of(&out.state), None);

    // Paused again; resolving answers all three calls unrun and clears the interrupt.
    let out = agent
        .invoke("t", vec![Message::human("again")])
        .await
        .unwrap();
    let before = out.state.messages.len();
    let pending = Interrupt::of(&out.state).unwrap();
    assert_eq!(pending.open_calls(&out.state.messages).len(), 3);
    let update = HumanInTheLoop::resolve(&agent, "t", "r").await.unwrap();
    assert_eq!(update.messages.len(), 3);
    let state = agent.state("t").await.unwrap().unwrap();
    assert_eq!(Interrupt::of(&state), None);
    assert_eq!(state.messages.len(), before + 3);
    assert!(state.messages[before..].iter().all(|m| m.is_tool()));
    assert!(matches!(
        HumanInTheLoop::resolve(&agent, "t", "r").await,
        Err(ResumeError::NothingPending { .. })
    ));
}
