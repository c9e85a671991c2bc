//! Summary and fold calls ask for structured output (`response_format` with a JSON
//! schema) through the real OpenAI adapter, over HTTP: the body carries the schema, a
//! `{"summary": ...}` answer comes back as plain text, and a server that refuses the
//! parameter is asked again without it, once, and never again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::sync::Arc;
use std::time::Duration;

use keel_core::message::Message;
use keel_memory::fold::fold_schema;
use keel_openai::OpenAiConfig;
use keel_summarization::summary_call::{
    ResponseSchema, SummaryCallOptions, SummaryCaller, SummaryModels,
};
use keel_summarization::transcript::{DEFAULT_SUMMARY_PROMPT, SummaryPrompt, TranscriptOptions};
use serde_json::{Value, json};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn completion(content: &str) -> Value {
    json!({
        "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": "small",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
}

fn models(server: &MockServer) -> SummaryModels {
    let model = OpenAiConfig::new("small")
        .with_base_url(format!("{}/v1", server.uri()))
        .with_api_key("sk-test")
        .with_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    SummaryModels::single(Arc::new(model))
}

fn prompt() -> SummaryPrompt {
    SummaryPrompt::new(
        DEFAULT_SUMMARY_PROMPT,
        None,
        &[Message::human("the build fails on a missing symbol")],
        &TranscriptOptions::default(),
    )
    .unwrap()
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

fn caller() -> SummaryCaller {
    SummaryCaller::new(SummaryCallOptions {
        initial_backoff: Duration::from_millis(1),
        ..SummaryCallOptions::default()
    })
}

#[tokio::test]
async fn a_summary_is_asked_for_as_json_and_comes_back_as_text() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            r#"{"summary": "- the build fails on a missing symbol"}"#,
        )))
        .mount(&server)
        .await;
    let schema = ResponseSchema::summary_text();
    let out = caller()
        .call_shaped(
            "t",
            &models(&server),
            &prompt(),
            None,
            Some(256),
            Some(&schema),
        )
        .await
        .unwrap();
    assert_eq!(out.text, "- the build fails on a missing symbol");
    let body = &bodies(&server).await[0];
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["name"], "summary");
    assert_eq!(
        body["response_format"]["json_schema"]["schema"]["required"],
        json!(["summary"])
    );
    // A model that ignores the format still gives a summary: its text as it is.
    server.reset().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion("- plain bullets")))
        .mount(&server)
        .await;
    let out = caller()
        .call_shaped(
            "t",
            &models(&server),
            &prompt(),
            None,
            Some(256),
            Some(&schema),
        )
        .await
        .unwrap();
    assert_eq!(out.text, "- plain bullets");
}

#[tokio::test]
async fn a_server_that_refuses_response_format_is_asked_without_it_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("response_format"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {
            "message": "Unrecognized request argument supplied: response_format",
            "type": "invalid_request_error", "param": "response_format", "code": null}})))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion("- summary")))
        .with_priority(2)
        .mount(&server)
        .await;
    let caller = caller();
    let models = models(&server);
    let schema = ResponseSchema::summary_text();
    let out = caller
        .call_shaped("t", &models, &prompt(), None, Some(256), Some(&schema))
        .await
        .unwrap();
    assert_eq!(out.text, "- summary");
    assert_eq!(out.attempts, 1, "the refusal is not a failed attempt");
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2);
    assert!(sent[0].get("response_format").is_some());
    assert!(sent[1].get("response_format").is_none());
    // Remembered: the next call goes without it at once.
    caller
        .call_shaped("t", &models, &prompt(), None, Some(256), Some(&schema))
        .await
        .unwrap();
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 3);
    assert!(sent[2].get("response_format").is_none());
}

#[tokio::test]
async fn a_fold_is_asked_for_its_configured_keys() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            r#"{"pinned": {"project": "PRJ-123"}, "summary": "- on the EU cluster"}"#,
        )))
        .mount(&server)
        .await;
    let schema = fold_schema(&["project".into(), "cluster".into()]);
    let out = caller()
        .call_shaped(
            "t",
            &models(&server),
            &prompt(),
            None,
            Some(256),
            Some(&schema),
        )
        .await
        .unwrap();
    // A fold's answer is the JSON itself, parsed by session memory.
    assert!(out.text.contains("\"pinned\""), "{}", out.text);
    let body = &bodies(&server).await[0];
    let s = &body["response_format"]["json_schema"]["schema"];
    assert_eq!(
        s["properties"]["pinned"]["properties"],
        json!({"project": {"type": ["string", "null"]}, "cluster": {"type": ["string", "null"]}})
    );
    assert_eq!(body["response_format"]["json_schema"]["strict"], false);
}
