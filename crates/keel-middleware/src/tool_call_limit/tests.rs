use std::sync::Arc;

use keel_agent::AgentError;
use keel_core::message::{Message, ToolStatus};
use keel_testkit::ScriptedModel;

use super::*;
use crate::test_support::{agent, calls, roles_and_texts};

#[tokio::test]
async fn continue_blocks_calls_over_the_run_limit_and_runs_the_rest() {
    let model = Arc::new(ScriptedModel::new([
        calls(&[("a", "search"), ("b", "search"), ("c", "echo")]),
        Message::ai("done"),
    ]));
    let limit =
        ToolCallLimit::new(Some("search".into()), None, Some(1), ToolCallExit::Continue).unwrap();
    let out = agent(&model, vec![Arc::new(limit)])
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap();
    let m = &out.state.messages;
    // after_model's blocked result comes first, then the tools step's results.
    let b = m.iter().find(|m| m.tool_call_id() == Some("b")).unwrap();
    assert_eq!(
        b.text(),
        "Tool call limit exceeded. Do not call 'search' again."
    );
    assert_eq!(b.as_tool().unwrap().status, ToolStatus::Error);
    for id in ["a", "c"] {
        let r = m.iter().find(|m| m.tool_call_id() == Some(id)).unwrap();
        assert_eq!(r.as_tool().unwrap().status, ToolStatus::Success, "{id}");
    }
    assert_eq!(m.last().unwrap().text(), "done");
    assert_eq!(out.state.values["thread_tool_call_count.search"], 1);
    assert_eq!(out.state.values["run_tool_call_count.search"]["count"], 2);
}

#[tokio::test]
async fn end_answers_every_pending_call_and_closes_with_the_limit() {
    let model = Arc::new(ScriptedModel::new([
        calls(&[("a", "echo")]),
        calls(&[("b", "echo"), ("c", "search")]),
    ]));
    let limit = ToolCallLimit::new(None, Some(2), None, ToolCallExit::End).unwrap();
    let out = agent(&model, vec![Arc::new(limit)])
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap();
    let texts = roles_and_texts(&out.state.messages);
    assert_eq!(
        texts[texts.len() - 3..],
        [
            ("tool".into(), "Tool call limit exceeded. Do not make additional tool calls.".into()),
            ("tool".into(), "Execution stopped before this tool call could run because another tool call in the same batch exceeded the limit.".into()),
            ("assistant".into(), "Tool call limit reached: thread limit exceeded (3/2 calls).".into()),
        ]
    );
    assert_eq!(model.calls(), 2);
    // The blocked batch does not count toward the thread.
    assert_eq!(out.state.values["thread_tool_call_count.__all__"], 1);
}

#[tokio::test]
async fn error_fails_the_run_naming_the_limit() {
    let model = Arc::new(ScriptedModel::new([calls(&[("a", "echo"), ("b", "echo")])]));
    let limit = ToolCallLimit::new(None, None, Some(1), ToolCallExit::Error).unwrap();
    let err = agent(&model, vec![Arc::new(limit)])
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap_err();
    let AgentError::Middleware(e) = err else {
        panic!("middleware error expected, got {err}")
    };
    assert_eq!(
        e.message,
        "Tool call limit reached: run limit exceeded (2/1 calls)."
    );
}

#[tokio::test]
async fn the_thread_limit_holds_across_runs() {
    let model = Arc::new(ScriptedModel::new([
        calls(&[("a", "echo")]),
        Message::ai("one"),
        calls(&[("b", "echo")]),
        Message::ai("two"),
    ]));
    let limit = ToolCallLimit::new(None, Some(1), None, ToolCallExit::Continue).unwrap();
    let agent = agent(&model, vec![Arc::new(limit)]);
    agent.invoke("t", vec![Message::human("x")]).await.unwrap();
    let out = agent.invoke("t", vec![Message::human("y")]).await.unwrap();
    let b = out
        .state
        .messages
        .iter()
        .find(|m| m.tool_call_id() == Some("b"))
        .unwrap();
    assert_eq!(b.as_tool().unwrap().status, ToolStatus::Error);
}

#[test]
fn settings_are_checked() {
    assert!(ToolCallLimit::new(None, None, None, ToolCallExit::Continue).is_err());
    let err = ToolCallLimit::new(None, Some(2), Some(3), ToolCallExit::Continue).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool_call_limit.run_limit = 3: exceeds thread_limit (2); allowed: a whole number in [0, 2] (at most thread_limit)"
    );
}
