//! The adapter against an in-process HTTP server replaying recorded response bodies
//! (`tests/fixtures/`): what it sends, what it makes of each answer, how it classifies
//! each failure.

// Helpers outside #[test] functions may unwrap too: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::StreamExt;
use keel_core::message::{Message, Usage};
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChunkAggregator, ModelErrorKind, ModelSettings, ToolChoice,
};
use keel_core::tool::ToolSpec;
use keel_openai::{OpenAiChatModel, OpenAiConfig};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn model(server: &MockServer, name: &str) -> OpenAiChatModel {
    OpenAiConfig::new(name)
        .with_base_url(format!("{}/v1/", server.uri()))
        .with_api_key("sk-test")
        .with_organization("org-keel")
        .with_header("x-gateway", "keel-tests")
        .with_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

async fn serve(status: u16, body: String, content_type: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(status).set_body_raw(body, content_type))
        .mount(&server)
        .await;
    server
}

async fn sent_body(server: &MockServer) -> Value {
    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        requests.len(),
        1,
        "exactly one HTTP request, no hidden retries"
    );
    serde_json::from_slice(&requests[0].body).unwrap()
}

async fn collect(model: &OpenAiChatModel, req: ChatRequest<'_>) -> Vec<ChatChunk> {
    let mut stream = model.stream(req).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.push(chunk.unwrap());
    }
    out
}

fn assemble(chunks: &[ChatChunk]) -> Message {
    let mut agg = ChunkAggregator::new();
    chunks.iter().for_each(|c| agg.push(c));
    agg.finish().unwrap()
}

#[tokio::test]
async fn non_streaming_answer_and_the_exact_request() {
    let server = serve(200, fixture("openai_completion.json"), "application/json").await;
    let model = model(&server, "gpt-4o-mini");
    let system = Message::system("Answer in one sentence.");
    let messages = vec![Message::human("What is the capital of France?")];
    let settings = ModelSettings {
        temperature: Some(0.2),
        max_tokens: Some(50),
        ..Default::default()
    };
    let mut req = ChatRequest::new(&messages, &settings);
    req.system = Some(&system);

    let answer = model.invoke(req).await.unwrap();

    assert_eq!(answer.text(), "Paris is the capital of France.");
    let ai = answer.as_ai().unwrap();
    assert_eq!(
        ai.usage,
        Some(Usage {
            input_tokens: 19,
            output_tokens: 8,
            total_tokens: 27,
            cached_input_tokens: 0,
            cache_creation_input_tokens: 0,
        })
    );
    let meta = &ai.response_metadata;
    assert_eq!(meta["id"], json!("chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT"));
    assert_eq!(meta["model"], json!("gpt-4o-mini-2024-07-18"));
    assert_eq!(meta["finish_reason"], json!("stop"));
    assert_eq!(meta["provider"], json!("openai-compatible"));
    assert_eq!(meta["usage_reported"], json!(true));
    assert!(meta.get("internal").is_none());

    assert_eq!(
        sent_body(&server).await,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "Answer in one sentence."},
                {"role": "user", "content": "What is the capital of France?"}
            ],
            "temperature": 0.2,
            "max_tokens": 50,
            "stream": false
        })
    );
    let request = &server.received_requests().await.unwrap()[0];
    let h = |name: &str| {
        request
            .headers
            .get(name)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(h("authorization"), "Bearer sk-test");
    assert_eq!(h("openai-organization"), "org-keel");
    assert_eq!(h("x-gateway"), "keel-tests");
}

#[tokio::test]
async fn tool_round_trip_with_null_content() {
    let server = serve(200, fixture("openai_tool_calls.json"), "application/json").await;
    let model = model(&server, "gpt-4o-mini");
    let tools = [ToolSpec::new(
        "get_current_weather",
        "Current weather in a city.",
        json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
    )];
    let messages = vec![
        Message::human("Weather in Boston and Paris?"),
        Message::ai("Checking Paris first.").with_tool_calls(vec![
            keel_core::message::ToolCall::new(
                "call_0",
                "get_current_weather",
                json!({"location": "Paris"}),
            ),
        ]),
        Message::tool("call_0", "18C, cloudy"),
    ];
    let settings = ModelSettings::default();
    let mut req = ChatRequest::new(&messages, &settings);
    req.tools = &tools;
    req.tool_choice = Some(&ToolChoice::Required);

    let answer = model.invoke(req).await.unwrap();

    assert!(answer.text().is_empty());
    let call = &answer.tool_calls()[0];
    assert_eq!(call.id, "call_abc123");
    assert_eq!(call.name, "get_current_weather");
    assert_eq!(call.args, json!({"location": "Boston, MA"}));
    assert_eq!(
        answer.as_ai().unwrap().response_metadata["finish_reason"],
        json!("tool_calls")
    );
    assert_eq!(
        sent_body(&server).await,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "user", "content": "Weather in Boston and Paris?"},
                {"role": "assistant", "content": "Checking Paris first.", "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "get_current_weather", "arguments": "{\"location\":\"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_0", "content": "18C, cloudy"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_current_weather",
                "description": "Current weather in a city.",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
            }}],
            "tool_choice": "required",
            "stream": false
        })
    );
}

#[tokio::test]
async fn streamed_text_with_usage() {
    let server = serve(200, fixture("openai_stream_text.sse"), "text/event-stream").await;
    let model = model(&server, "gpt-4o-mini");
    let messages = vec![Message::human("hi")];
    let settings = ModelSettings::default();

    let chunks = collect(&model, ChatRequest::new(&messages, &settings)).await;

    let texts: Vec<_> = chunks
        .iter()
        .filter_map(|c| match c {
            ChatChunk::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["Hello", "! How", " can I help?"]);
    let message = assemble(&chunks);
    assert_eq!(message.text(), "Hello! How can I help?");
    let ai = message.as_ai().unwrap();
    assert_eq!(
        ai.usage,
        Some(Usage {
            input_tokens: 9,
            output_tokens: 7,
            total_tokens: 16,
            cached_input_tokens: 0,
            cache_creation_input_tokens: 0,
        })
    );
    assert_eq!(ai.response_metadata["id"], json!("chatcmpl-BUr1"));
    assert_eq!(ai.response_metadata["finish_reason"], json!("stop"));
    assert_eq!(
        ai.response_metadata["model"],
        json!("gpt-4o-mini-2024-07-18")
    );
    assert_eq!(ai.response_metadata["usage_reported"], json!(true));

    assert_eq!(
        sent_body(&server).await,
        json!({
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[tokio::test]
async fn parallel_tool_calls_split_across_chunks() {
    let server = serve(
        200,
        fixture("openai_stream_parallel_tools.sse"),
        "text/event-stream",
    )
    .await;
    let model = model(&server, "gpt-4o");
    let messages = vec![Message::human("Weather and time in Paris?")];
    let settings = ModelSettings::default();

    let chunks = collect(&model, ChatRequest::new(&messages, &settings)).await;

    let fragments = chunks
        .iter()
        .filter(|c| matches!(c, ChatChunk::ToolCall { .. }))
        .count();
    assert_eq!(fragments, 7, "every fragment is passed on as it arrives");
    let message = assemble(&chunks);
    let calls = message.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str()),
        ("call_kLq1", "get_weather")
    );
    assert_eq!(calls[0].args, json!({"location": "Paris"}));
    assert_eq!(
        (calls[1].id.as_str(), calls[1].name.as_str()),
        ("call_Zm9v", "get_time")
    );
    assert_eq!(calls[1].args, json!({"tz": "Europe/Paris"}));
    let ai = message.as_ai().unwrap();
    assert_eq!(ai.response_metadata["finish_reason"], json!("tool_calls"));
    assert_eq!(ai.usage.map(|u| u.total_tokens), Some(168));
}

#[tokio::test]
async fn llama_cpp_chunks_with_empty_finish_reason_missing_ids_and_no_usage() {
    let server = serve(200, fixture("llamacpp_stream.sse"), "text/event-stream").await;
    let model = model(&server, "smollm2");
    let messages = vec![Message::human("look up keel")];
    let settings = ModelSettings::default();

    let chunks = collect(&model, ChatRequest::new(&messages, &settings)).await;
    let message = assemble(&chunks);

    assert_eq!(message.text(), "Hi there");
    let call = &message.tool_calls()[0];
    // The server repeats the name on the second fragment; it must not be doubled.
    assert_eq!(call.name, "lookup");
    assert_eq!(call.args, json!({"q": "keel"}));
    assert!(
        !call.id.is_empty(),
        "a missing id is replaced, not left empty"
    );
    let ai = message.as_ai().unwrap();
    assert_eq!(ai.usage, None, "no usage reported, none invented");
    assert_eq!(ai.response_metadata["usage_reported"], json!(false));
    assert_eq!(ai.response_metadata["finish_reason"], json!("tool_calls"));
    assert!(ai.response_metadata.get("id").is_none());
}

#[tokio::test]
async fn vllm_stream_without_usage() {
    let server = serve(
        200,
        fixture("vllm_stream_no_usage.sse"),
        "text/event-stream",
    )
    .await;
    let model = model(&server, "Qwen/Qwen2.5-7B-Instruct");
    let messages = vec![Message::human("2+2?")];
    let settings = ModelSettings::default();

    let chunks = collect(&model, ChatRequest::new(&messages, &settings)).await;

    assert!(!chunks.iter().any(|c| matches!(c, ChatChunk::Usage { .. })));
    let message = assemble(&chunks);
    assert_eq!(message.text(), "Four.");
    assert_eq!(
        message.as_ai().unwrap().response_metadata["usage_reported"],
        json!(false)
    );
}

#[tokio::test]
async fn non_streaming_llama_cpp_answer_without_usage_or_ids() {
    let server = serve(
        200,
        fixture("llamacpp_completion_no_usage_no_id.json"),
        "application/json",
    )
    .await;
    let model = model(&server, "smollm2");
    let messages = vec![Message::human("look up keel")];
    let settings = ModelSettings::default();

    let answer = model
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();

    assert_eq!(answer.tool_calls()[0].args, json!({"q": "keel"}));
    assert!(answer.tool_calls()[0].id.starts_with("call_"));
    let ai = answer.as_ai().unwrap();
    assert_eq!(ai.usage, None);
    assert_eq!(ai.response_metadata["usage_reported"], json!(false));
    assert!(ai.response_metadata.get("finish_reason").is_none());
}

#[tokio::test]
async fn internal_calls_never_stream_and_are_marked() {
    let server = serve(200, fixture("openai_completion.json"), "application/json").await;
    let model = model(&server, "gpt-4o-mini");
    let messages = vec![Message::human("Summarize the conversation.")];
    let settings = ModelSettings::default();
    let mut req = ChatRequest::new(&messages, &settings);
    req.internal = true;

    let chunks = collect(&model, req).await;
    let message = assemble(&chunks);

    assert_eq!(message.text(), "Paris is the capital of France.");
    let meta = &message.as_ai().unwrap().response_metadata;
    assert_eq!(meta["internal"], json!(true));
    let body = sent_body(&server).await;
    assert_eq!(body["stream"], json!(false));
    assert!(body.get("stream_options").is_none());

    let direct = model.invoke(req).await.unwrap();
    assert_eq!(
        direct.as_ai().unwrap().response_metadata["internal"],
        json!(true)
    );
}

async fn invoke_error(
    status: u16,
    body: String,
    headers: &[(&str, &str)],
) -> keel_core::model::ModelError {
    let server = MockServer::start().await;
    let mut template = ResponseTemplate::new(status).set_body_raw(body, "application/json");
    for (k, v) in headers {
        template = template.insert_header(*k, *v);
    }
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer sk-test"))
        .respond_with(template)
        .mount(&server)
        .await;
    let model = model(&server, "gpt-4o-mini");
    let messages = vec![Message::human("hi")];
    let settings = ModelSettings::default();
    let err = model
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap_err();
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        1,
        "the adapter never retries on its own"
    );
    err
}

#[tokio::test]
async fn each_error_kind() {
    let cases: [(u16, &str, ModelErrorKind); 8] = [
        (401, "error_401_openai.json", ModelErrorKind::Authentication),
        (
            400,
            "error_context_openai.json",
            ModelErrorKind::ContextOverflow,
        ),
        (
            400,
            "error_context_vllm.json",
            ModelErrorKind::ContextOverflow,
        ),
        (
            400,
            "error_context_llamacpp.json",
            ModelErrorKind::ContextOverflow,
        ),
        (
            400,
            "error_400_invalid.json",
            ModelErrorKind::InvalidRequest,
        ),
        (404, "error_404_model.json", ModelErrorKind::InvalidRequest),
        (502, "error_502.html", ModelErrorKind::Server),
        (429, "error_429_openai.json", ModelErrorKind::RateLimited),
    ];
    for (status, name, kind) in cases {
        let body = fixture(name);
        let err = invoke_error(status, body.clone(), &[]).await;
        assert_eq!(err.kind, kind, "{name}: {err}");
        assert_eq!(err.raw.as_deref(), Some(body.as_str()), "{name}");
        assert_eq!(err.is_retryable(), kind.is_retryable());
    }
}

#[tokio::test]
async fn rate_limit_wait_comes_from_headers_then_message() {
    let body = fixture("error_429_openai.json");
    let err = invoke_error(429, body.clone(), &[("retry-after-ms", "1250")]).await;
    assert_eq!(err.retry_after, Some(Duration::from_millis(1250)));
    let err = invoke_error(429, body.clone(), &[("retry-after", "3")]).await;
    assert_eq!(err.retry_after, Some(Duration::from_secs(3)));
    let err = invoke_error(429, body, &[]).await;
    assert_eq!(err.retry_after, Some(Duration::from_secs(20)));
    assert!(err.is_retryable());
}

#[tokio::test]
async fn unreadable_answers_are_malformed_with_raw_text() {
    let body = fixture("malformed_200.txt");
    let server = serve(200, body.clone(), "text/html").await;
    let model = model(&server, "gpt-4o-mini");
    let messages = vec![Message::human("hi")];
    let settings = ModelSettings::default();
    let err = model
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::MalformedResponse);
    assert_eq!(err.raw.as_deref(), Some(body.as_str()));

    let server = serve(200, fixture("stream_broken_event.sse"), "text/event-stream").await;
    let model = self::model(&server, "gpt-4o-mini");
    let mut stream = model
        .stream(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ChatChunk::Text { text: "par".into() }
    );
    let err = stream.next().await.unwrap().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::MalformedResponse);
    assert!(err.raw.unwrap().contains("\"tial"));
    assert!(
        stream.next().await.is_none(),
        "the stream ends after an error"
    );
}

#[tokio::test]
async fn errors_in_the_stream_and_before_it() {
    let server = serve(200, fixture("stream_error_event.sse"), "text/event-stream").await;
    let model = model(&server, "smollm2");
    let messages = vec![Message::human("hi")];
    let settings = ModelSettings::default();
    let mut stream = model
        .stream(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    let err = stream.next().await.unwrap().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::ContextOverflow);

    let server = serve(
        400,
        fixture("error_context_llamacpp.json"),
        "application/json",
    )
    .await;
    let model = self::model(&server, "smollm2");
    let err = match model.stream(ChatRequest::new(&messages, &settings)).await {
        Ok(_) => panic!("a 400 must fail the stream call"),
        Err(e) => e,
    };
    assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
}

#[tokio::test]
async fn slow_servers_time_out_and_dead_ones_fail_to_connect() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(fixture("openai_completion.json"), "application/json")
                .set_delay(Duration::from_secs(3)),
        )
        .mount(&server)
        .await;
    let model = OpenAiConfig::new("gpt-4o-mini")
        .with_base_url(format!("{}/v1", server.uri()))
        .with_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let messages = vec![Message::human("hi")];
    let settings = ModelSettings::default();
    let err = model
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Timeout, "{err}");

    // A port nobody listens on: bind, learn the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let model = OpenAiConfig::new("gpt-4o-mini")
        .with_base_url(format!("http://127.0.0.1:{port}/v1"))
        .build()
        .unwrap();
    let err = model
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Connection, "{err}");
    assert!(err.is_retryable());
}

/// Bodies captured from llama-cpp-python 0.3.36's server (SmolLM2-135M) by
/// `scripts/llama-e2e.sh`'s setup: its streams carry no usage even when asked.
#[tokio::test]
async fn recorded_llama_cpp_python_bodies() {
    let messages = vec![Message::human("What is the capital of France?")];
    let settings = ModelSettings::default();

    let server = serve(
        200,
        fixture("llama_cpp_python_completion.json"),
        "application/json",
    )
    .await;
    let answer = model(&server, "smollm2")
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    assert_eq!(
        answer.text(),
        "L'Étoile, la Marseillaise. Paris is the capital"
    );
    let ai = answer.as_ai().unwrap();
    assert_eq!(
        ai.usage
            .map(|u| (u.input_tokens, u.output_tokens, u.total_tokens)),
        Some((37, 16, 53))
    );
    assert_eq!(ai.response_metadata["finish_reason"], json!("length"));

    let server = serve(
        200,
        fixture("llama_cpp_python_stream.sse"),
        "text/event-stream",
    )
    .await;
    let chunks = collect(
        &model(&server, "smollm2"),
        ChatRequest::new(&messages, &settings),
    )
    .await;
    let message = assemble(&chunks);
    assert_eq!(message.text(), "I'm sorry for any misglamour. I'll");
    let ai = message.as_ai().unwrap();
    assert_eq!(ai.usage, None);
    assert_eq!(ai.response_metadata["usage_reported"], json!(false));
    assert_eq!(
        ai.response_metadata["id"],
        json!("chatcmpl-30d66f13-6578-4b9f-9951-bbb6ce1e45f4")
    );

    let body = fixture("llama_cpp_python_context_overflow.json");
    let err = invoke_error(400, body, &[]).await;
    assert_eq!(err.kind, ModelErrorKind::ContextOverflow);
    let f = err.overflow.unwrap();
    assert_eq!((f.sent_tokens, f.window_tokens), (Some(6039), Some(2048)));
    let f = invoke_error(400, fixture("error_context_llamacpp.json"), &[])
        .await
        .overflow
        .unwrap();
    assert_eq!((f.sent_tokens, f.window_tokens), (Some(4100), Some(4096)));
}

/// Overflow as the providers and gateways send it, each body recorded as documented or
/// reported: classified as an overflow, with the figures their messages state.
#[tokio::test]
async fn every_overflow_shape_is_recognised_with_its_figures() {
    let cases: [(u16, &str, Option<u64>, Option<u64>); 6] = [
        // OpenAI: one request over the tokens-per-minute limit.
        (
            429,
            "error_429_request_too_large_openai.json",
            Some(36_278),
            Some(30_000),
        ),
        // LiteLLM's proxy relaying Anthropic.
        (
            400,
            "error_context_litellm_anthropic.json",
            Some(209_303),
            Some(200_000),
        ),
        // OpenRouter relaying Anthropic in `metadata.raw`.
        (
            400,
            "error_context_openrouter_anthropic.json",
            Some(200_251),
            Some(200_000),
        ),
        // Google's OpenAI-compatible endpoint: a list around the error.
        (
            400,
            "error_context_gemini_openai_compat.json",
            Some(1_200_293),
            Some(1_048_576),
        ),
        (400, "error_context_openai.json", None, None),
        (400, "error_context_llamacpp.json", None, None),
    ];
    for (status, name, sent, window) in cases {
        let body = fixture(name);
        let err = invoke_error(status, body.clone(), &[("retry-after", "7")]).await;
        assert_eq!(err.kind, ModelErrorKind::ContextOverflow, "{name}: {err}");
        assert!(!err.is_retryable(), "{name}");
        assert_eq!(err.retry_after, None, "{name}: no wait fixes it");
        assert_eq!(err.raw.as_deref(), Some(body.as_str()), "{name}");
        let f = err.overflow.unwrap_or_else(|| panic!("{name}: no figures"));
        if sent.is_some() {
            assert_eq!((f.sent_tokens, f.window_tokens), (sent, window), "{name}");
        }
    }
    // The recorded OpenAI and llama.cpp bodies state their figures too.
    let f = invoke_error(400, fixture("error_context_openai.json"), &[])
        .await
        .overflow
        .unwrap();
    assert!(
        f.sent_tokens.is_some() && f.window_tokens.is_some(),
        "{f:?}"
    );
}

async fn first_stream_error(fixture_name: &str) -> (Vec<ChatChunk>, keel_core::model::ModelError) {
    let server = serve(200, fixture(fixture_name), "text/event-stream").await;
    let model = model(&server, "claude-3-5-sonnet");
    let messages = vec![Message::human("hi")];
    let settings = ModelSettings::default();
    let mut stream = model
        .stream(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    let mut before = Vec::new();
    loop {
        match stream.next().await {
            Some(Ok(chunk)) => before.push(chunk),
            Some(Err(e)) => {
                assert!(
                    stream.next().await.is_none(),
                    "the stream ends after an error"
                );
                return (before, e);
            }
            None => panic!("{fixture_name}: the stream ended without an error"),
        }
    }
}

#[tokio::test]
async fn error_events_inside_a_200_stream() {
    // `data: {"error": ...}` after the stream began (LiteLLM relaying Bedrock).
    let (_, err) = first_stream_error("stream_error_mid_bedrock_litellm.sse").await;
    assert_eq!(err.kind, ModelErrorKind::ContextOverflow, "{err}");
    // An `event: error` frame whose data carries no `choices` (Anthropic-style).
    let (_, err) = first_stream_error("stream_event_error_anthropic_style.sse").await;
    assert_eq!(err.kind, ModelErrorKind::ContextOverflow, "{err}");
    let f = err.overflow.unwrap();
    assert_eq!(
        (f.sent_tokens, f.window_tokens),
        (Some(201_234), Some(200_000))
    );
    // OpenRouter's mid-stream error chunk: a server failure after some text.
    let (before, err) = first_stream_error("stream_error_mid_openrouter.sse").await;
    assert_eq!(before, [ChatChunk::Text { text: "Hel".into() }]);
    assert_eq!(err.kind, ModelErrorKind::Server, "{err}");
    assert!(err.message.contains("Provider disconnected unexpectedly"));
}

#[tokio::test]
async fn cached_prompt_tokens_are_reported() {
    let server = serve(
        200,
        fixture("openai_completion_cached.json"),
        "application/json",
    )
    .await;
    let model = model(&server, "gpt-4o");
    let messages = vec![Message::human("hi")];
    let settings = ModelSettings::default();
    let answer = model
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    assert_eq!(
        answer.as_ai().unwrap().usage,
        Some(Usage {
            input_tokens: 2006,
            output_tokens: 300,
            total_tokens: 2306,
            cached_input_tokens: 1920,
            cache_creation_input_tokens: 0,
        })
    );

    let server = serve(
        200,
        fixture("openai_stream_cached.sse"),
        "text/event-stream",
    )
    .await;
    let model = self::model(&server, "gpt-4o");
    let chunks = collect(&model, ChatRequest::new(&messages, &settings)).await;
    let usage = chunks.iter().find_map(|c| match c {
        ChatChunk::Usage { usage } => Some(*usage),
        _ => None,
    });
    assert_eq!(usage.map(|u| u.cached_input_tokens), Some(1920));
    assert_eq!(
        assemble(&chunks)
            .as_ai()
            .unwrap()
            .usage
            .map(|u| u.input_tokens),
        Some(2006)
    );
}

/// llama.cpp's Python server fails a too-long prompt after sending a 200 stream's
/// headers, so the stream closes before its first event. The adapter asks once more
/// without streaming, which gets the server's error, classified as usual (here, a
/// context overflow the summarization middleware recovers from).
#[tokio::test]
async fn a_stream_closed_before_its_first_event_is_asked_again_without_streaming() {
    use wiremock::matchers::body_partial_json;
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw("", "text/event-stream"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(400).set_body_raw(
            r#"{"error": {"message": "Requested tokens (2582) exceed context window of 2048", "type": "invalid_request_error", "code": null}}"#,
            "application/json",
        ))
        .mount(&server)
        .await;
    let model = model(&server, "smollm2");
    let messages = vec![Message::human("a long prompt")];
    let settings = ModelSettings::default();
    let mut stream = model
        .stream(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    let mut got = Vec::new();
    while let Some(item) = stream.next().await {
        got.push(item);
    }
    assert_eq!(got.len(), 1, "{got:?}");
    let err = got.pop().unwrap().unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::ContextOverflow, "{err}");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2, "the stream, then once without streaming");

    // A server that answers the second time: the answer arrives as chunks.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw("", "text/event-stream"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(fixture("openai_completion.json"), "application/json"),
        )
        .mount(&server)
        .await;
    let model = self::model(&server, "gpt-4o-mini");
    let chunks = collect(&model, ChatRequest::new(&messages, &settings)).await;
    assert_eq!(assemble(&chunks).text(), "Paris is the capital of France.");
}
