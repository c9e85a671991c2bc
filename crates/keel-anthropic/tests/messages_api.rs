//! The adapter against an in-process server answering with responses and streams
//! written from Anthropic's documented examples (`tests/fixtures/`): what is sent
//! (headers, blocks, thinking sent back unchanged, the forced tool of structured
//! output) and what is read (tool calls, thinking, usage with cache writes and reads,
//! each error, a stream failing midway), then a whole agent with a tool, compaction
//! and overflow recovery.

// Helpers outside #[test] functions may unwrap too: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use keel_agent::{Agent, AgentError};
use keel_anthropic::{AnthropicChatModel, AnthropicConfig};
use keel_core::message::{Content, ContentPart, Message, ToolCall, Usage};
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChunkAggregator, ModelErrorKind, ModelSettings,
};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_core::tool::ToolSpec;
use keel_testkit::FnTool;
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

async fn server_with(responses: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    let n = responses.len() as u64;
    for (i, r) in responses.into_iter().enumerate() {
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(r)
            .up_to_n_times(1)
            .with_priority(u8::try_from(i + 1).unwrap())
            .mount(&server)
            .await;
    }
    assert!(n > 0);
    server
}

fn json_answer(name: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(fixture(name), "application/json")
}

fn sse_answer(name: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(fixture(name), "text/event-stream")
}

fn model(server: &MockServer) -> AnthropicChatModel {
    AnthropicConfig::new("claude-sonnet-4-5")
        .with_base_url(server.uri())
        .with_api_key("sk-ant-test")
        .with_timeout(Duration::from_secs(5))
        .build()
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

async fn collect(model: &AnthropicChatModel, messages: &[Message]) -> (Vec<ChatChunk>, Message) {
    let settings = ModelSettings::default();
    let mut stream = model
        .stream(ChatRequest::new(messages, &settings))
        .await
        .unwrap();
    let mut chunks = Vec::new();
    let mut agg = ChunkAggregator::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        agg.push(&chunk);
        chunks.push(chunk);
    }
    (chunks, agg.finish().unwrap())
}

#[tokio::test]
async fn a_tool_use_answer_and_the_headers_sent() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "sk-ant-test"))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(json_answer("tool_use.json"))
        .mount(&server)
        .await;
    let m = model(&server);
    let messages = [Message::human("What's the weather like in San Francisco?")];
    let settings = ModelSettings::default();
    let tools = [ToolSpec::new(
        "get_weather",
        "Get the current weather in a given location",
        json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
    )];
    let mut request = ChatRequest::new(&messages, &settings);
    request.tools = &tools;
    let answer = m.invoke(request).await.unwrap();
    assert_eq!(
        answer.text(),
        "I'll check the current weather in San Francisco for you."
    );
    assert_eq!(
        answer.tool_calls(),
        &[ToolCall::new(
            "toolu_01A09q90qw90lq917835lq9",
            "get_weather",
            json!({"location": "San Francisco, CA", "unit": "celsius"})
        )]
    );
    let ai = answer.as_ai().unwrap();
    assert_eq!(ai.response_metadata["finish_reason"], json!("tool_calls"));
    assert_eq!(ai.response_metadata["stop_reason"], json!("tool_use"));
    assert_eq!(ai.response_metadata["provider"], json!("anthropic"));
    assert_eq!(
        ai.response_metadata["model"],
        json!("claude-sonnet-4-5-20250929")
    );
    assert_eq!(ai.usage.unwrap().input_tokens, 384);
    let sent = &bodies(&server).await[0];
    assert_eq!(sent["model"], json!("claude-sonnet-4-5"));
    assert_eq!(sent["max_tokens"], json!(8192));
    assert!(sent.get("stream").is_none());
    assert_eq!(
        sent["tools"],
        json!([{"name": "get_weather", "description": "Get the current weather in a given location",
                "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
                "cache_control": {"type": "ephemeral"}}])
    );
}

#[tokio::test]
async fn cache_writes_and_reads_reach_usage() {
    let server = server_with(vec![json_answer("cache_usage.json")]).await;
    let answer = model(&server)
        .invoke(ChatRequest::new(
            &[Message::human("What are the key themes?")],
            &ModelSettings::default(),
        ))
        .await
        .unwrap();
    assert_eq!(
        answer.as_ai().unwrap().usage,
        Some(Usage {
            input_tokens: 21 + 188_086,
            output_tokens: 393,
            total_tokens: 21 + 188_086 + 393,
            cached_input_tokens: 0,
            cache_creation_input_tokens: 188_086,
        })
    );
    let server = server_with(vec![sse_answer("stream_text.sse")]).await;
    let (_, message) = collect(&model(&server), &[Message::human("Hello")]).await;
    let usage = message.as_ai().unwrap().usage.unwrap();
    assert_eq!(
        (
            usage.input_tokens,
            usage.cached_input_tokens,
            usage.output_tokens
        ),
        (1825, 1800, 15)
    );
}

#[tokio::test]
async fn thinking_is_kept_and_sent_back_unchanged() {
    let server = server_with(vec![
        json_answer("thinking.json"),
        json_answer("tool_use.json"),
    ])
    .await;
    let m = model(&server);
    let mut thread = vec![Message::human("Are there an infinite number of primes?")];
    let answer = m
        .invoke(ChatRequest::new(&thread, &ModelSettings::default()))
        .await
        .unwrap();
    assert_eq!(answer.text(), "Based on my analysis...");
    let Content::Parts(parts) = answer.content() else {
        panic!("thinking needs list content: {:?}", answer.content());
    };
    assert_eq!(parts.len(), 3);
    assert!(matches!(&parts[0], ContentPart::Other(b) if b["type"] == "thinking"));
    // The message survives a checkpoint (JSON) unchanged.
    let stored: Message = serde_json::from_str(&serde_json::to_string(&answer).unwrap()).unwrap();
    thread.push(stored);
    thread.push(Message::human("Why?"));
    m.invoke(ChatRequest::new(&thread, &ModelSettings::default()))
        .await
        .unwrap();
    let sent = &bodies(&server).await[1];
    let original: Value = serde_json::from_str(&fixture("thinking.json")).unwrap();
    let mut want = original["content"].clone();
    assert_eq!(sent["messages"][1]["role"], json!("assistant"));
    // The breakpoint goes on the last stable message ("Why?"), not on this turn.
    assert_eq!(sent["messages"][1]["content"], want);
    want[2]["cache_control"] = json!({"type": "ephemeral"});
    assert_ne!(sent["messages"][1]["content"], want);
}

#[tokio::test]
async fn streams_text_tool_arguments_and_thinking() {
    let server = server_with(vec![sse_answer("stream_tool_use.sse")]).await;
    let (chunks, message) = collect(&model(&server), &[Message::human("Weather?")]).await;
    let args: String = chunks
        .iter()
        .filter_map(|c| match c {
            ChatChunk::ToolCall { args, .. } => Some(args.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        args,
        r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#
    );
    assert!(
        chunks
            .iter()
            .any(|c| matches!(c, ChatChunk::Text { text } if text == "Okay"))
    );
    assert_eq!(
        message.text(),
        "Okay, let's check the weather for San Francisco, CA:"
    );
    assert_eq!(
        message.tool_calls(),
        &[ToolCall::new(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "get_weather",
            json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
        )]
    );
    let ai = message.as_ai().unwrap();
    assert_eq!(ai.response_metadata["finish_reason"], json!("tool_calls"));
    assert_eq!(ai.usage.unwrap().output_tokens, 89);
    assert_eq!(bodies(&server).await[0]["stream"], json!(true));

    let server = server_with(vec![sse_answer("stream_thinking.sse")]).await;
    let (chunks, message) = collect(&model(&server), &[Message::human("27 * 453?")]).await;
    // Thinking is not the answer's text...
    let text: String = chunks
        .iter()
        .filter_map(|c| match c {
            ChatChunk::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "27 * 453 = 12,231");
    // ...but it is in the message, whole, with its signature.
    let Content::Parts(parts) = message.content() else {
        panic!("{:?}", message.content());
    };
    let ContentPart::Other(thinking) = &parts[0] else {
        panic!("{parts:?}");
    };
    assert_eq!(
        thinking,
        &json!({"type": "thinking",
                "thinking": "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3",
                "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds..."})
    );
    assert_eq!(message.text(), "27 * 453 = 12,231");
}

#[tokio::test]
async fn a_stream_failing_midway_is_a_typed_error() {
    let server = server_with(vec![sse_answer("stream_error.sse")]).await;
    let settings = ModelSettings::default();
    let messages = [Message::human("Hello")];
    let mut stream = model(&server)
        .stream(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(item);
    }
    assert!(matches!(&items[0], Ok(ChatChunk::Text { text }) if text == "Hello"));
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Server, "{err:?}");
    assert!(err.is_retryable());
    assert!(err.message.contains("Overloaded"));

    // A stream cut before message_stop is not taken for a whole answer.
    let cut: String = fixture("stream_text.sse")
        .split("event: message_delta")
        .next()
        .unwrap()
        .to_owned();
    let server = server_with(vec![
        ResponseTemplate::new(200).set_body_raw(cut, "text/event-stream"),
    ])
    .await;
    let mut stream = model(&server)
        .stream(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item);
    }
    let err = last.unwrap().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Connection);
    assert!(err.message.contains("message_stop"));

    // A stream that closes before its first event is asked again without streaming.
    let server = server_with(vec![
        ResponseTemplate::new(200).set_body_raw("", "text/event-stream"),
        ResponseTemplate::new(400).set_body_raw(
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            "application/json",
        ),
    ])
    .await;
    let mut stream = model(&server)
        .stream(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    let err = stream.next().await.unwrap().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
    assert_eq!(err.overflow.unwrap().window_tokens, Some(200_000));
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["stream"], json!(true));
    assert!(sent[1].get("stream").is_none());
}

#[tokio::test]
async fn http_errors_are_classified_with_retry_after() {
    let body = |kind: &str, message: &str| {
        format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"{message}"}}}}"#)
    };
    let server = server_with(vec![
        ResponseTemplate::new(529)
            .set_body_raw(body("overloaded_error", "Overloaded"), "application/json"),
        ResponseTemplate::new(429)
            .insert_header("retry-after", "17")
            .set_body_raw(
                body(
                    "rate_limit_error",
                    "Number of request tokens has exceeded your per-minute rate limit",
                ),
                "application/json",
            ),
        ResponseTemplate::new(400).set_body_raw(
            body(
                "invalid_request_error",
                "messages: roles must alternate between \\\"user\\\" and \\\"assistant\\\"",
            ),
            "application/json",
        ),
    ])
    .await;
    let m = model(&server);
    let messages = [Message::human("hi")];
    let settings = ModelSettings::default();
    let err = m
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Server);
    let err = m
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::RateLimited);
    assert_eq!(err.retry_after, Some(Duration::from_secs(17)));
    let err = m
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::InvalidRequest);
    assert!(
        err.message.contains("roles must alternate"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn structured_output_is_a_forced_tool_call() {
    let answer = json!({
        "id": "msg_01Fold", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "stop_reason": "tool_use", "stop_sequence": null,
        "content": [{"type": "tool_use", "id": "toolu_01S", "name": "summary",
                     "input": {"summary": "The user works on PRJ-123 on the EU cluster."}}],
        "usage": {"input_tokens": 900, "output_tokens": 40}
    });
    let server = server_with(vec![ResponseTemplate::new(200).set_body_json(answer)]).await;
    let schema = keel_summary::summary_call::ResponseSchema::summary_text();
    let mut settings = ModelSettings::default();
    settings
        .extra
        .insert("response_format".into(), schema.response_format());
    let messages = [Message::human("Summarize: ...")];
    let mut request = ChatRequest::new(&messages, &settings);
    request.internal = true;
    let message = model(&server).invoke(request).await.unwrap();
    assert!(message.tool_calls().is_empty());
    assert_eq!(
        schema.unwrap(message.text().into_owned()),
        "The user works on PRJ-123 on the EU cluster."
    );
    let sent = &bodies(&server).await[0];
    assert!(sent.get("response_format").is_none());
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "tool", "name": "summary"})
    );
    assert_eq!(sent["tools"][0]["name"], json!("summary"));
    assert_eq!(sent["tools"][0]["input_schema"], schema.schema);
}

#[tokio::test]
async fn tool_results_pair_with_their_calls() {
    let server = server_with(vec![json_answer("cache_usage.json")]).await;
    let thread = vec![
        Message::human("List and read"),
        Message::ai("").with_tool_calls(vec![
            ToolCall::new("toolu_1", "ls", json!({})),
            ToolCall::new("toolu_2", "cat", json!({"path": "a"})),
        ]),
        Message::tool("toolu_1", "a.txt"),
        Message::tool_error("toolu_2", "no such file"),
        Message::human("and now?"),
    ];
    model(&server)
        .invoke(ChatRequest::new(&thread, &ModelSettings::default()))
        .await
        .unwrap();
    let sent = &bodies(&server).await[0];
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "List and read"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
                {"type": "tool_use", "id": "toolu_2", "name": "cat", "input": {"path": "a"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.txt"}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "no such file"}], "is_error": true},
                {"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
    // An orphan result is refused before anything is sent.
    let err = model(&server)
        .invoke(ChatRequest::new(&thread[2..], &ModelSettings::default()))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::InvalidRequest);
    assert_eq!(bodies(&server).await.len(), 1);
}

fn weather_tool() -> FnTool {
    FnTool::new("get_weather", |_| {
        Ok(Content::Text("15 degrees, fog".into()))
    })
}

#[tokio::test]
async fn an_agent_calls_a_tool_and_streams_its_answer() {
    let server = server_with(vec![
        sse_answer("stream_tool_use.sse"),
        sse_answer("stream_text.sse"),
    ])
    .await;
    let agent = Agent::builder()
        .model(Arc::new(model(&server)))
        .system_prompt("You are a weather assistant.")
        .tool(weather_tool())
        .build()
        .unwrap();
    let mut stream = agent.stream(
        "t",
        vec![Message::human("Weather in SF?")],
        &[StreamMode::Messages],
    );
    let mut streamed = String::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Messages { chunk, .. } = event
            && let ChatChunk::Text { text } = chunk
        {
            streamed.push_str(&text);
        }
    }
    let out = stream.into_result().unwrap().unwrap();
    assert_eq!(out.state.messages.last().unwrap().text(), "Hello!");
    assert!(streamed.ends_with("Hello!"), "{streamed}");
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2);
    let second = &sent[1];
    assert_eq!(
        second["system"],
        json!([{"type": "text", "text": "You are a weather assistant.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        second["messages"][1]["content"][1]["type"],
        json!("tool_use")
    );
    assert_eq!(
        second["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
               "content": [{"type": "text", "text": "15 degrees, fog"}],
               "cache_control": {"type": "ephemeral"}})
    );
}

#[tokio::test]
async fn prompt_too_long_compacts_and_is_sent_once_more() {
    use keel_summarization::config::{ContextSize, SummarizationConfig};
    use keel_summarization::middleware::SummarizationMiddleware;
    let server = server_with(vec![
        ResponseTemplate::new(400).set_body_raw(
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
            "application/json",
        ),
        sse_answer("stream_text.sse"),
    ])
    .await;
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
        .model(Arc::new(model(&server)))
        .middleware_shared(summarization)
        .build()
        .unwrap();
    let mut input = Vec::new();
    for i in 0..12 {
        input.push(Message::human(format!(
            "Note {i}: region {i} uses bucket keel-{i}."
        )));
        input.push(Message::ai(format!("Noted, item {i}.")));
    }
    input.push(Message::human("Which bucket does region 3 use?"));
    let out = agent.invoke("t", input).await;
    let out = match out {
        Ok(out) => out,
        Err(AgentError::Model { source, .. }) => panic!("{source:?}"),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(out.state.messages.last().unwrap().text(), "Hello!");
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2);
    let (first, second) = (
        sent[0]["messages"].as_array().unwrap(),
        sent[1]["messages"].as_array().unwrap(),
    );
    assert!(
        second.len() < first.len(),
        "compacted: {} then {}",
        first.len(),
        second.len()
    );
    // The summary carries a breakpoint, and so does the question after it.
    let marked: Vec<&Value> = second
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter(|b| b.get("cache_control").is_some())
        .collect();
    assert_eq!(marked.len(), 2, "{second:#?}");
}

#[tokio::test]
async fn summary_calls_ask_for_their_schema_through_a_forced_tool() {
    use keel_summary::summary_call::{
        ResponseSchema, SummaryCallOptions, SummaryCaller, SummaryModels,
    };
    use keel_summary::transcript::{SummaryPrompt, TranscriptOptions};
    let answer = json!({
        "id": "msg_01Sum", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "stop_reason": "tool_use", "stop_sequence": null,
        "content": [{"type": "tool_use", "id": "toolu_01S", "name": "summary",
                     "input": {"summary": "PRJ-123 runs on the EU cluster."}}],
        "usage": {"input_tokens": 120, "output_tokens": 20}
    });
    let server = server_with(vec![ResponseTemplate::new(200).set_body_json(answer)]).await;
    let caller = SummaryCaller::new(SummaryCallOptions::default());
    let models = SummaryModels::single(Arc::new(model(&server)));
    let prompt = SummaryPrompt::new(
        "Summarize:\n{messages}",
        None,
        &[Message::human("I'm on PRJ-123, EU cluster.")],
        &TranscriptOptions::default(),
    )
    .unwrap();
    let schema = ResponseSchema::summary_text();
    let out = caller
        .call_shaped("t", &models, &prompt, None, Some(256), Some(&schema))
        .await
        .unwrap();
    assert_eq!(out.text, "PRJ-123 runs on the EU cluster.");
    let sent = &bodies(&server).await[0];
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "tool", "name": "summary"})
    );
    assert_eq!(sent["max_tokens"], json!(256));
}
