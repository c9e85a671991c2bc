use std::sync::Arc;

use keel_core::message::{Message, ToolStatus};
use keel_testkit::ScriptedModel;
use serde_json::json;

use super::*;
use crate::test_support::{agent, builder, call};

fn plan() -> serde_json::Value {
    json!({"todos": [
        {"content": "Read the logs", "status": "in_progress"},
        {"content": "Write the fix", "status": "pending"}
    ]})
}

#[tokio::test]
async fn write_todos_sets_the_plan_and_answers_like_langchain() {
    let model = Arc::new(ScriptedModel::new([
        call("c1", TOOL_NAME, plan()),
        Message::ai("working"),
    ]));
    let out = builder(&model, vec![Arc::new(TodoList::default())])
        .system_prompt("Be brief.")
        .build()
        .unwrap()
        .invoke("t", vec![Message::human("fix it")])
        .await
        .unwrap();
    assert_eq!(out.state.values[TODOS_KEY], plan()["todos"]);
    let result = &out.state.messages[2];
    assert_eq!(
        result.text(),
        "Updated todo list to [{'content': 'Read the logs', 'status': 'in_progress'}, {'content': 'Write the fix', 'status': 'pending'}]"
    );
    assert_eq!(result.name(), Some(TOOL_NAME));
    let request = &model.requests()[0];
    assert!(request.tools.iter().any(|t| t.name == TOOL_NAME));
    let system = request.system.as_ref().unwrap().text().into_owned();
    assert_eq!(system, format!("Be brief.\n\n{DEFAULT_SYSTEM_PROMPT}"));
}

#[tokio::test]
async fn parallel_calls_are_all_refused_and_the_plan_is_unchanged() {
    let model = Arc::new(ScriptedModel::new([
        Message::ai("").with_tool_calls(vec![
            keel_core::message::ToolCall::new("a", TOOL_NAME, plan()),
            keel_core::message::ToolCall::new("b", TOOL_NAME, plan()),
        ]),
        Message::ai("sorry"),
    ]));
    let out = agent(&model, vec![Arc::new(TodoList::default())])
        .invoke("t", vec![Message::human("plan")])
        .await
        .unwrap();
    assert!(!out.state.values.contains_key(TODOS_KEY));
    for id in ["a", "b"] {
        let r = out
            .state
            .messages
            .iter()
            .find(|m| m.tool_call_id() == Some(id))
            .unwrap();
        assert_eq!(r.text(), PARALLEL_ERROR);
        assert_eq!(r.as_tool().unwrap().status, ToolStatus::Error);
    }
    // Each call has exactly one result.
    assert_eq!(out.state.messages.iter().filter(|m| m.is_tool()).count(), 2);
}

#[tokio::test]
async fn a_list_off_the_schema_is_an_error_result_and_changes_nothing() {
    let model = Arc::new(ScriptedModel::new([
        call(
            "c1",
            TOOL_NAME,
            json!({"todos": [{"content": "x", "status": "done"}]}),
        ),
        Message::ai("ok"),
    ]));
    let out = agent(&model, vec![Arc::new(TodoList::default())])
        .invoke("t", vec![Message::human("plan")])
        .await
        .unwrap();
    assert!(!out.state.values.contains_key(TODOS_KEY));
    let r = &out.state.messages[2];
    assert_eq!(r.as_tool().unwrap().status, ToolStatus::Error);
    assert!(r.text().contains("unknown variant `done`"), "{}", r.text());
}

#[tokio::test]
async fn without_a_system_prompt_the_block_stands_alone() {
    let model = Arc::new(ScriptedModel::new([Message::ai("hi")]));
    agent(&model, vec![Arc::new(TodoList::default())])
        .invoke("t", vec![Message::human("hello")])
        .await
        .unwrap();
    let system = model.requests()[0].system.clone().unwrap();
    assert_eq!(system.text(), DEFAULT_SYSTEM_PROMPT);
}

#[test]
fn two_todo_lists_cannot_share_the_key() {
    let model = Arc::new(ScriptedModel::new([]));
    let err = builder(
        &model,
        vec![
            Arc::new(TodoList::default()),
            Arc::new(TodoList::new("a", "b")),
        ],
    )
    .build()
    .unwrap_err();
    // Same name first: the builder's duplicate check names both positions.
    assert!(err.to_string().contains("TodoListMiddleware"), "{err}");
}
