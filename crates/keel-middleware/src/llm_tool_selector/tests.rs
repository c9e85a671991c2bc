use std::sync::Arc;

use keel_agent::{AgentError, RunOutput};
use keel_core::message::Message;
use keel_testkit::ScriptedModel;
use serde_json::json;

use super::*;
use crate::test_support::{agent, call};

fn selector(
    max_tools: Option<usize>,
    always: &[&str],
    failure: OnParsingFailure,
    model: &Arc<ScriptedModel>,
) -> LlmToolSelector {
    LlmToolSelector::new(
        Some(model.clone()),
        DEFAULT_SYSTEM_PROMPT,
        max_tools,
        always.iter().map(|s| (*s).to_owned()).collect(),
        1,
        failure,
    )
    .unwrap()
}

/// One run of an agent on `main` with `selector`, from the user's `text`.
async fn run(
    main: &Arc<ScriptedModel>,
    selector: LlmToolSelector,
    text: &str,
) -> Result<RunOutput, AgentError> {
    agent(main, vec![Arc::new(selector)])
        .invoke("t", vec![Message::human(text)])
        .await
}

fn offered(model: &ScriptedModel) -> Vec<String> {
    model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

#[tokio::test]
async fn the_main_call_sees_only_the_picked_tools_in_their_order() {
    let picker = Arc::new(ScriptedModel::new([call(
        "s",
        SELECT_TOOL,
        json!({"tools": ["search", "echo", "search"]}),
    )]));
    let main = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    run(
        &main,
        selector(Some(1), &["fail"], OnParsingFailure::Error, &picker),
        "look it up",
    )
    .await
    .unwrap();
    // max_tools keeps the first pick; always_include is added after.
    assert_eq!(offered(&main), ["search", "fail"]);
    let asked = &picker.requests()[0];
    assert!(asked.internal);
    assert_eq!(asked.messages.len(), 1);
    assert_eq!(asked.messages[0].text(), "look it up");
    assert!(
        asked
            .system
            .as_ref()
            .unwrap()
            .text()
            .ends_with("only the first 1 will be used.")
    );
    let names: Vec<&str> = asked.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, [SELECT_TOOL]);
    assert_eq!(
        asked.tools[0].parameters["properties"]["tools"]["items"]["enum"],
        json!(["echo", "search"])
    );
}

#[tokio::test]
async fn malformed_answers_are_retried_then_handled_by_on_parsing_failure() {
    let picker = Arc::new(ScriptedModel::new([
        Message::ai("not json"),
        Message::ai("{\"tools\": [\"echo\"]}"),
    ]));
    let main = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    run(
        &main,
        selector(None, &[], OnParsingFailure::Error, &picker),
        "x",
    )
    .await
    .unwrap();
    assert_eq!(picker.calls(), 2);
    assert_eq!(offered(&main), ["echo"]);

    let picker = Arc::new(ScriptedModel::new([Message::ai("?"), Message::ai("??")]));
    let main = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    run(
        &main,
        selector(None, &[], OnParsingFailure::All, &picker),
        "x",
    )
    .await
    .unwrap();
    assert_eq!(offered(&main), ["echo", "search", "fail"]);

    let picker = Arc::new(ScriptedModel::new([Message::ai("?"), Message::ai("??")]));
    let main = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    let err = run(
        &main,
        selector(None, &[], OnParsingFailure::Error, &picker),
        "x",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, AgentError::Model { ref source, .. } if source.message.contains("malformed response after 1 retries")),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_picks_and_missing_always_include_fail() {
    let picker = Arc::new(ScriptedModel::new([call(
        "s",
        SELECT_TOOL,
        json!({"tools": ["nope"]}),
    )]));
    let main = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    let err = run(
        &main,
        selector(None, &[], OnParsingFailure::Error, &picker),
        "x",
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("Model selected invalid tools: [\"nope\"]"),
        "{err}"
    );

    let picker = Arc::new(ScriptedModel::new([]));
    let main = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    let err = run(
        &main,
        selector(None, &["ghost"], OnParsingFailure::Error, &picker),
        "x",
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("Tools in always_include not found in request: [\"ghost\"]"),
        "{err}"
    );
    assert_eq!(picker.calls(), 0);
}
