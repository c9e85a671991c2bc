use std::sync::Arc;

use futures::StreamExt;
use keel_agent::AgentError;
use keel_core::message::{Message, ToolCall};
use keel_core::model::ChatChunk;
use keel_core::stream::{StreamEvent, StreamMode};
use keel_testkit::ScriptedModel;
use serde_json::json;

use super::*;
use crate::test_support::agent;

#[tokio::test]
async fn input_is_redacted_in_state_with_the_same_id() {
    let model = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    let pii = Pii::builtin("email", Strategy::Redact).unwrap();
    let out = agent(&model, vec![Arc::new(pii)])
        .invoke(
            "t",
            vec![Message::human("I am ada@example.com").with_id("u1")],
        )
        .await
        .unwrap();
    assert_eq!(out.state.messages[0].id(), "u1");
    assert_eq!(out.state.messages[0].text(), "I am [REDACTED_EMAIL]");
    assert_eq!(
        model.requests()[0].messages[0].text(),
        "I am [REDACTED_EMAIL]"
    );
}

#[tokio::test]
async fn only_the_last_user_message_is_checked() {
    let model = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    let pii = Pii::builtin("ip", Strategy::Mask).unwrap();
    let out = agent(&model, vec![Arc::new(pii)])
        .invoke(
            "t",
            vec![
                Message::human("old 10.0.0.1"),
                Message::ai("noted"),
                Message::human("new 10.0.0.2"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(out.state.messages[0].text(), "old 10.0.0.1");
    assert_eq!(out.state.messages[2].text(), "new *.*.*.2");
}

#[tokio::test]
async fn block_fails_the_run_with_langchains_message() {
    let model = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    let pii = Pii::builtin("credit_card", Strategy::Block).unwrap();
    let err = agent(&model, vec![Arc::new(pii)])
        .invoke("t", vec![Message::human("card 4111 1111 1111 1111")])
        .await
        .unwrap_err();
    let AgentError::Middleware(e) = err else {
        panic!("middleware error expected, got {err}")
    };
    assert_eq!(
        e.message,
        "Detected 1 instance(s) of credit_card in text content"
    );
    assert_eq!(model.calls(), 0);
}

#[tokio::test]
async fn tool_results_after_the_last_ai_message_are_hashed() {
    let model = Arc::new(ScriptedModel::new([
        Message::ai("").with_tool_calls(vec![ToolCall::new(
            "c1",
            "echo",
            json!({"to": "bob@corp.io"}),
        )]),
        Message::ai("done"),
    ]));
    let pii = Pii::builtin("email", Strategy::Hash)
        .unwrap()
        .apply_to_input(false)
        .apply_to_tool_results(true);
    let out = agent(&model, vec![Arc::new(pii)])
        .invoke("t", vec![Message::human("mail bob@corp.io")])
        .await
        .unwrap();
    assert_eq!(out.state.messages[0].text(), "mail bob@corp.io");
    let result = out.state.messages[2].text().into_owned();
    assert!(result.starts_with("{\"to\":\"<email_hash:"), "{result}");
    assert!(
        !model.requests()[1].messages[2]
            .text()
            .contains("bob@corp.io")
    );
}

#[tokio::test]
async fn custom_regex_types_are_masked() {
    let model = Arc::new(ScriptedModel::new([Message::ai("ok")]));
    let pii = Pii::regex("api_key", r"sk-[a-zA-Z0-9]{8,}", Strategy::Mask).unwrap();
    let out = agent(&model, vec![Arc::new(pii)])
        .invoke("t", vec![Message::human("key sk-abcdef123456")])
        .await
        .unwrap();
    assert_eq!(out.state.messages[0].text(), "key ****3456");
    assert!(Pii::regex("x", "(", Strategy::Mask).is_err());
    let err = Pii::builtin("ssn", Strategy::Redact).unwrap_err();
    assert!(
        err.to_string()
            .contains("email, credit_card, ip, mac_address, url"),
        "{err}"
    );
}

#[tokio::test]
async fn streamed_output_never_carries_what_the_final_message_redacts() {
    let secret = "ada.lovelace@analytical-engine.org";
    let answer = format!(
        "{} Write to {secret} today. {}",
        "a".repeat(150),
        "b".repeat(20)
    );
    let model = Arc::new(ScriptedModel::new([Message::ai(answer.clone())]).streaming_in(5));
    let pii = Pii::builtin("email", Strategy::Redact)
        .unwrap()
        .apply_to_input(false)
        .apply_to_output(true);
    let agent = agent(&model, vec![Arc::new(pii)]);
    let mut stream = agent.stream(
        "t",
        vec![Message::human("hi")],
        &[
            StreamMode::Messages,
            StreamMode::Updates,
            StreamMode::Custom,
        ],
    );
    let mut streamed = String::new();
    let mut everything = String::new();
    while let Some(event) = stream.next().await {
        everything.push_str(&serde_json::to_string(&event).unwrap());
        if let StreamEvent::Messages {
            chunk: ChatChunk::Text { text },
            ..
        } = event
        {
            streamed.push_str(&text);
        }
    }
    let out = stream.into_result().unwrap().unwrap();
    let expected = answer.replace(secret, "[REDACTED_EMAIL]");
    assert_eq!(streamed, expected);
    assert_eq!(out.last_message().unwrap().text(), expected);
    assert!(!everything.contains("lovelace"), "no event leaks the value");
    assert!(
        everything.contains("\"counter\":\"redactions\""),
        "{everything}"
    );
}

#[tokio::test]
async fn blocked_output_fails_the_model_call() {
    let model = Arc::new(ScriptedModel::new([Message::ai("it is 10.1.2.3")]).streaming_in(3));
    let pii = Pii::builtin("ip", Strategy::Block)
        .unwrap()
        .apply_to_input(false)
        .apply_to_output(true);
    let err = agent(&model, vec![Arc::new(pii)])
        .invoke("t", vec![Message::human("hi")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::Model { ref source, .. } if source.message == "Detected 1 instance(s) of ip in text content"),
        "{err}"
    );
}
