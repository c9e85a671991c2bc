//! Recovery from context overflow, end to end: an agent with the summarization
//! middleware, over the OpenAI adapter, against an in-process server that answers the
//! first request with a recorded overflow body (`tests/fixtures/`) and records every
//! request. The run must compact, send once more, say so in a `context_compacted` event
//! with `reason: "overflow"`, and answer; a server that keeps overflowing must end the
//! run with a typed error after exactly one retry.

// Helpers outside #[test] functions may unwrap too: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use keel_agent::{Agent, AgentError};
use keel_core::message::Message;
use keel_core::model::{ModelError, ModelErrorKind};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_openai::OpenAiConfig;
use keel_summarization::config::{ContextSize, SummarizationConfig};
use keel_summarization::events::EVENT_COMPACTED;
use keel_summarization::middleware::SummarizationMiddleware;
use keel_summarization::overflow::OverflowStats;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Each overflow shape: HTTP status, recorded body, its content type.
const SHAPES: &[(u16, &str, &str)] = &[
    (
        429,
        "error_429_request_too_large_openai.json",
        "application/json",
    ),
    (
        400,
        "error_context_litellm_anthropic.json",
        "application/json",
    ),
    (
        400,
        "error_context_openrouter_anthropic.json",
        "application/json",
    ),
    (
        400,
        "error_context_gemini_openai_compat.json",
        "application/json",
    ),
    (
        200,
        "stream_error_mid_bedrock_litellm.sse",
        "text/event-stream",
    ),
    (
        200,
        "stream_event_error_anthropic_style.sse",
        "text/event-stream",
    ),
    (400, "error_context_openai.json", "application/json"),
];

/// A server answering the first `overflows` requests with the shape, then a streamed
/// answer.
async fn server(shape: (u16, &str, &str), overflows: u64) -> MockServer {
    let (status, name, content_type) = shape;
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(status).set_body_raw(fixture(name), content_type))
        .up_to_n_times(overflows)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(fixture("openai_stream_text.sse"), "text/event-stream"),
        )
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

/// An agent over `server`; the middleware is returned too, for its counters.
fn agent(server: &MockServer) -> (Agent, Arc<SummarizationMiddleware>) {
    let model = OpenAiConfig::new("gpt-4o")
        .with_base_url(format!("{}/v1", server.uri()))
        .with_api_key("sk-test")
        .with_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // No trigger fires by count: only the provider's rejection compacts.
    let config = SummarizationConfig::builder()
        .trigger(ContextSize::Tokens(100_000))
        .keep(ContextSize::Messages(4))
        .build()
        .unwrap();
    let summarization = Arc::new(
        SummarizationMiddleware::builder(config)
            .extractive()
            .build()
            .unwrap(),
    );
    let agent = Agent::builder()
        .model(Arc::new(model))
        .middleware_shared(summarization.clone())
        .build()
        .unwrap();
    (agent, summarization)
}

fn history() -> Vec<Message> {
    let mut input = Vec::new();
    for i in 0..12 {
        input.push(Message::human(format!(
            "Note {i}: the deployment in region {i} uses bucket keel-{i}."
        )));
        input.push(Message::ai(format!("Noted, item {i}.")));
    }
    input.push(Message::human("Which bucket does region 3 use?"));
    input
}

async fn sent_bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// Runs the agent; the `context_compacted` payloads and the run's result.
async fn run(agent: &Agent) -> (Vec<Value>, Result<String, AgentError>) {
    let mut stream = agent.stream("t", history(), &[StreamMode::Custom]);
    let mut compacted = Vec::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Custom { payload, .. } = event
            && payload["type"] == EVENT_COMPACTED
        {
            compacted.push(payload);
        }
    }
    let result = stream
        .into_result()
        .expect("the run finished")
        .map(|out| out.state.messages.last().unwrap().text().into_owned());
    (compacted, result)
}

fn model_error(e: AgentError) -> ModelError {
    match e {
        AgentError::Model { source, .. } => source,
        other => panic!("not a model error: {other}"),
    }
}

#[tokio::test]
async fn each_overflow_shape_compacts_and_is_sent_once_more() {
    for &shape in SHAPES {
        let name = shape.1;
        let server = server(shape, 1).await;
        let (agent, mw) = agent(&server);

        let (compacted, result) = run(&agent).await;

        let answer = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(answer, "Hello! How can I help?", "{name}");
        let bodies = sent_bodies(&server).await;
        assert_eq!(bodies.len(), 2, "{name}: one retry");
        let (first, second) = (
            bodies[0]["messages"].as_array().unwrap(),
            bodies[1]["messages"].as_array().unwrap(),
        );
        assert_eq!(first.len(), history().len(), "{name}");
        assert!(second.len() < first.len(), "{name}");
        assert!(
            second[0]["content"]
                .as_str()
                .unwrap()
                .starts_with("Here is a summary"),
            "{name}: {}",
            second[0]
        );
        assert_eq!(second.last(), first.last(), "{name}: the question is sent");
        assert_eq!(compacted.len(), 1, "{name}: {compacted:?}");
        assert_eq!(compacted[0]["reason"], json!("overflow"), "{name}");
        assert!(
            compacted[0]["tokens_after"].as_u64().unwrap() * 4
                <= compacted[0]["tokens_before"].as_u64().unwrap() * 3,
            "{name}: below three quarters: {}",
            compacted[0]
        );
        assert_eq!(
            mw.overflow_stats(),
            OverflowStats {
                overflows: 1,
                recovered: 1,
                unrecovered: 0,
                bounded: 0
            },
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_second_overflow_ends_the_run_with_the_figures() {
    for &shape in SHAPES {
        let name = shape.1;
        let server = server(shape, u64::MAX).await;
        let (agent, mw) = agent(&server);

        let (compacted, result) = run(&agent).await;

        let err = model_error(result.expect_err(name));
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow, "{name}: {err}");
        let f = err.overflow.unwrap_or_else(|| panic!("{name}: no figures"));
        assert!(
            f.sent_tokens.is_some() && f.window_tokens.is_some(),
            "{name}: {f:?}"
        );
        assert!(
            err.message.contains(&format!(
                "{} tokens sent, the model's window is {} tokens",
                f.sent_tokens.unwrap(),
                f.window_tokens.unwrap()
            )),
            "{name}: {err}"
        );
        assert_eq!(sent_bodies(&server).await.len(), 2, "{name}: never loops");
        assert_eq!(compacted.len(), 1, "{name}");
        assert_eq!(mw.overflow_stats().unrecovered, 1, "{name}");
    }
}

#[tokio::test]
async fn a_429_that_is_only_a_rate_limit_is_not_compacted() {
    let server = server((429, "error_429_openai.json", "application/json"), 1).await;
    let (agent, mw) = agent(&server);
    let (compacted, result) = run(&agent).await;
    let err = model_error(result.unwrap_err());
    assert_eq!(err.kind, ModelErrorKind::RateLimited);
    assert!(compacted.is_empty());
    assert_eq!(sent_bodies(&server).await.len(), 1);
    assert_eq!(mw.overflow_stats().overflows, 0);
}
