use std::sync::Arc;

use keel_core::message::{Message, ToolCall};
use keel_testkit::ScriptedModel;
use serde_json::json;

use super::*;
use crate::test_support::agent;

/// user, then three (call, result) pairs with long results.
fn thread() -> Vec<Message> {
    let mut m = vec![Message::human("start").with_id("u")];
    for (i, tool) in ["search", "echo", "search"].iter().enumerate() {
        m.push(
            Message::ai("")
                .with_tool_calls(vec![ToolCall::new(format!("c{i}"), *tool, json!({"q": i}))])
                .with_id(format!("a{i}")),
        );
        m.push(
            Message::tool(format!("c{i}"), "x".repeat(400))
                .with_name(*tool)
                .with_id(format!("t{i}")),
        );
    }
    m
}

fn counter() -> ApproximateCounter {
    ApproximateCounter::langchain()
}

#[test]
fn under_the_trigger_nothing_changes() {
    let edit = ClearToolUses {
        trigger: 100_000,
        ..ClearToolUses::default()
    };
    assert!(edit.apply(&thread(), &counter()).is_none());
}

#[test]
fn all_but_keep_are_cleared_oldest_first_and_pairs_survive() {
    let edit = ClearToolUses {
        trigger: 10,
        keep: 1,
        ..ClearToolUses::default()
    };
    let (out, n) = edit.apply(&thread(), &counter()).unwrap();
    assert_eq!(n, 2);
    assert_eq!(out[2].text(), "[cleared]");
    assert_eq!(out[4].text(), "[cleared]");
    assert_eq!(out[6].text(), "x".repeat(400));
    assert_eq!(out[2].tool_call_id(), Some("c0"));
    assert_eq!(out[2].metadata()["context_editing"]["cleared"], true);
    // Arguments are kept unless asked.
    assert_eq!(out[1].tool_calls()[0].args, json!({"q": 0}));
    // Applying again finds them already cleared.
    let again = edit.apply(&out, &counter());
    assert!(again.is_none());
}

#[test]
fn excluded_tools_inputs_and_clear_at_least() {
    let edit = ClearToolUses {
        trigger: 10,
        keep: 0,
        exclude_tools: vec!["echo".into()],
        clear_tool_inputs: true,
        placeholder: "[gone]".into(),
        ..ClearToolUses::default()
    };
    let (out, n) = edit.apply(&thread(), &counter()).unwrap();
    assert_eq!(n, 2);
    assert_eq!(out[4].text(), "x".repeat(400), "echo is excluded");
    assert_eq!(out[6].text(), "[gone]");
    assert_eq!(out[5].tool_calls()[0].args, json!({}));
    assert_eq!(
        out[5].as_ai().unwrap().response_metadata["context_editing"]["cleared_tool_inputs"],
        json!(["c2"])
    );
    let first_only = ClearToolUses {
        trigger: 10,
        keep: 0,
        clear_at_least: 50,
        ..ClearToolUses::default()
    };
    let (out, n) = first_only.apply(&thread(), &counter()).unwrap();
    assert_eq!(n, 1, "one 400-char result frees about 100 tokens");
    assert_eq!(out[4].text(), "x".repeat(400));
}

#[tokio::test]
async fn only_the_request_changes_never_state() {
    let model = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    let mw = ContextEditing::new(vec![ClearToolUses {
        trigger: 10,
        keep: 1,
        ..ClearToolUses::default()
    }]);
    let mut input = thread();
    input.push(Message::human("next"));
    let out = agent(&model, vec![Arc::new(mw)])
        .invoke("t", input)
        .await
        .unwrap();
    let sent = &model.requests()[0].messages;
    assert_eq!(sent[2].text(), "[cleared]");
    assert_eq!(out.state.messages[2].text(), "x".repeat(400));
}
