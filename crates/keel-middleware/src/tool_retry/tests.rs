use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_core::message::{Content, Message, ToolStatus};
use keel_testkit::{FnTool, ScriptedModel};
use serde_json::json;

use super::*;
use crate::test_support::{agent, builder, call};

fn instant(max_retries: u32) -> Backoff {
    Backoff {
        max_retries,
        initial_delay: 0.0,
        ..Backoff::default()
    }
}

fn result<'a>(messages: &'a [Message], id: &str) -> &'a Message {
    match messages.iter().find(|m| m.tool_call_id() == Some(id)) {
        Some(m) => m,
        None => panic!("no result for {id}"),
    }
}

/// Retries of tool failures (`Failed`) with no delay.
fn retry_failures(
    max_retries: u32,
    tools: Option<Vec<String>>,
    on_failure: ToolFailure,
) -> ToolRetry {
    ToolRetry::new(
        instant(max_retries),
        tools,
        vec![ToolFailureKind::Failed],
        on_failure,
    )
    .unwrap()
}

/// The thread after a run whose model calls `tool` once (call id `c1`), then answers.
async fn run_calling(tool: &str, retry: ToolRetry) -> Vec<Message> {
    let model = Arc::new(ScriptedModel::new([
        call("c1", tool, json!({})),
        Message::ai("done"),
    ]));
    agent(&model, vec![Arc::new(retry)])
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap()
        .state
        .messages
        .to_vec()
}

#[tokio::test]
async fn a_flaky_tool_succeeds_on_the_third_attempt() {
    let tries = Arc::new(AtomicUsize::new(0));
    let seen = tries.clone();
    let flaky = FnTool::new("flaky", move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) < 2 {
            Err(ToolError::Failed {
                tool: "flaky".into(),
                message: "busy".into(),
            })
        } else {
            Ok(Content::from("ok"))
        }
    });
    let model = Arc::new(ScriptedModel::new([
        call("c1", "flaky", json!({})),
        Message::ai("done"),
    ]));
    let retry = retry_failures(2, None, ToolFailure::Continue);
    let out = builder(&model, vec![Arc::new(retry)])
        .tool(flaky)
        .build()
        .unwrap()
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap();
    assert_eq!(tries.load(Ordering::SeqCst), 3);
    assert_eq!(result(&out.state.messages, "c1").text(), "ok");
}

#[tokio::test]
async fn exhausted_retries_answer_with_langchains_text() {
    let messages = run_calling("fail", retry_failures(2, None, ToolFailure::Continue)).await;
    let r = result(&messages, "c1");
    assert_eq!(
        r.text(),
        "Tool 'fail' failed after 3 attempts with ToolException: boom. Please try again."
    );
    assert_eq!(r.as_tool().unwrap().status, ToolStatus::Error);
    assert_eq!(r.name(), Some("fail"));
}

#[tokio::test]
async fn tools_outside_the_list_and_kinds_outside_retry_on_are_not_retried() {
    let retry = retry_failures(2, Some(vec!["search".into()]), ToolFailure::Continue);
    let messages = run_calling("fail", retry).await;
    // The agent's own error result, untouched.
    assert_eq!(result(&messages, "c1").text(), "fail failed: boom");

    let messages = run_calling("nope", ToolRetry::langchain_defaults()).await;
    assert!(
        result(&messages, "c1")
            .text()
            .starts_with("unknown tool \"nope\"")
    );
}

#[tokio::test]
async fn on_failure_error_hands_the_error_outward() {
    let messages = run_calling("fail", retry_failures(1, None, ToolFailure::Error)).await;
    assert_eq!(result(&messages, "c1").text(), "fail failed: boom");
}
