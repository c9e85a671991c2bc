//! End-to-end against a real OpenAI-compatible server: llama.cpp's server (PyPI
//! `llama-cpp-python[server]`) serving SmolLM2-135M-Instruct. Opt-in and ignored by
//! default; `scripts/llama-e2e.sh` installs the server, starts it on a free loopback port
//! and runs these tests with `KEEL_E2E_LLAMA=1` and `OPENAI_BASE_URL` set.
//!
//! The model is far too small to answer or summarize well, so the tests check the
//! protocol: an answer arrives, streams in pieces, reports usage, overflow is classified
//! (with the figures of the server's message), a full agent run with the summarization
//! middleware completes through it, and a run whose request the server rejects as over
//! its context recovers by compacting once.

// Helpers outside #[test] functions may unwrap too: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChunkAggregator, ModelErrorKind, ModelSettings,
};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_openai::{OpenAiChatModel, OpenAiConfig};
use keel_summarization::config::{ContextSize, SummarizationConfig};
use keel_summarization::events::EVENT_COMPACTED;
use keel_summarization::middleware::SummarizationMiddleware;
use serde_json::json;

/// The model from the environment the script sets, or `None` when not opted in.
fn model() -> Option<OpenAiChatModel> {
    if std::env::var("KEEL_E2E_LLAMA").as_deref() != Ok("1") {
        eprintln!("KEEL_E2E_LLAMA is not 1: skipping; run scripts/llama-e2e.sh");
        return None;
    }
    let config = OpenAiConfig::from_env()
        .unwrap()
        .with_timeout(Duration::from_secs(120));
    // SmolLM2 is served with n_ctx 2048 by the script; the table does not know it.
    let config = if config.context_window.is_none() {
        config.with_context_window(2048)
    } else {
        config
    };
    Some(config.build().unwrap())
}

/// Caps the output of internal (summary) calls: the summarization middleware sends no
/// token cap, and a 135M model asked to summarize rambles until its context is full,
/// which on two shared cores takes longer than the summary call's timeout.
struct CappedSummaries {
    inner: OpenAiChatModel,
    max_tokens: u32,
}

#[async_trait::async_trait]
impl ChatModel for CappedSummaries {
    fn profile(&self) -> &keel_core::model::ModelProfile {
        self.inner.profile()
    }

    async fn invoke(
        &self,
        request: ChatRequest<'_>,
    ) -> Result<Message, keel_core::model::ModelError> {
        let mut settings = request.settings.clone();
        if request.internal {
            settings.max_tokens = Some(self.max_tokens);
        }
        self.inner
            .invoke(ChatRequest {
                settings: &settings,
                ..request
            })
            .await
    }

    async fn stream(
        &self,
        request: ChatRequest<'_>,
    ) -> Result<keel_core::model::ChatStream, keel_core::model::ModelError> {
        self.inner.stream(request).await
    }
}

fn settings(max_tokens: u32) -> ModelSettings {
    ModelSettings {
        temperature: Some(0.0),
        max_tokens: Some(max_tokens),
        ..Default::default()
    }
}

#[tokio::test]
#[ignore = "needs a llama.cpp server: scripts/llama-e2e.sh"]
async fn plain_answer_with_usage() {
    let Some(model) = model() else { return };
    let system = Message::system("You are a helpful assistant. Answer briefly.");
    let messages = vec![Message::human("What is the capital of France?")];
    let settings = settings(24);
    let mut req = ChatRequest::new(&messages, &settings);
    req.system = Some(&system);

    let answer = model.invoke(req).await.unwrap();

    println!("answer: {:?}", answer.text());
    assert!(!answer.text().trim().is_empty());
    let ai = answer.as_ai().unwrap();
    let usage = ai.usage.expect("llama.cpp reports usage");
    assert!(usage.input_tokens > 5, "{usage:?}");
    assert!(
        usage.output_tokens >= 1 && usage.output_tokens <= 24,
        "{usage:?}"
    );
    assert_eq!(usage.total_tokens, usage.input_tokens + usage.output_tokens);
    assert_eq!(ai.response_metadata["usage_reported"], json!(true));
    let finish = ai.response_metadata["finish_reason"].as_str().unwrap();
    assert!(["stop", "length"].contains(&finish), "{finish}");
}

#[tokio::test]
#[ignore = "needs a llama.cpp server: scripts/llama-e2e.sh"]
async fn streamed_answer_arrives_in_pieces() {
    let Some(model) = model() else { return };
    let messages = vec![Message::human("Count from one to ten in words.")];
    let settings = settings(40);

    let mut stream = model
        .stream(ChatRequest::new(&messages, &settings))
        .await
        .unwrap();
    let mut agg = ChunkAggregator::new();
    let mut text_chunks = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if matches!(chunk, ChatChunk::Text { .. }) {
            text_chunks += 1;
        }
        agg.push(&chunk);
    }
    let message = agg.finish().unwrap();

    println!("streamed in {text_chunks} chunks: {:?}", message.text());
    assert!(text_chunks > 1, "a streamed answer comes in several chunks");
    assert!(!message.text().trim().is_empty());
    let ai = message.as_ai().unwrap();
    // Whether this server honours stream_options.include_usage, the metadata must agree
    // with what arrived: numbers only when the server sent them.
    assert_eq!(
        ai.response_metadata["usage_reported"],
        json!(ai.usage.is_some())
    );
    if let Some(u) = ai.usage {
        assert!(u.input_tokens > 0 && u.output_tokens > 0, "{u:?}");
    }
    assert!(ai.response_metadata.contains_key("finish_reason"));
}

#[tokio::test]
#[ignore = "needs a llama.cpp server: scripts/llama-e2e.sh"]
async fn overflowing_the_context_window_is_classified() {
    let Some(model) = model() else { return };
    // Far beyond the 2048-token window the script starts the server with.
    let messages = vec![Message::human("word ".repeat(6000))];
    let settings = settings(8);
    let err = model
        .invoke(ChatRequest::new(&messages, &settings))
        .await
        .unwrap_err();
    println!("overflow error: {err}");
    assert_eq!(err.kind, ModelErrorKind::ContextOverflow, "{err}");
    assert!(!err.is_retryable());
    // llama-cpp-python: "This model's maximum context length is 2048 tokens. However,
    // you requested N tokens (...)".
    let f = err.overflow.expect("the figures of the server's message");
    assert_eq!(f.window_tokens, Some(2048), "{err}");
    assert!(f.sent_tokens.is_some_and(|n| n > 2048), "{err}");
}

#[tokio::test]
#[ignore = "needs a llama.cpp server: scripts/llama-e2e.sh"]
async fn a_request_the_server_rejects_as_too_long_is_compacted_and_sent_once_more() {
    if model().is_none() {
        return;
    }
    // Keel is told a far larger window than the server's 2048 tokens, so no trigger
    // fires by Keel's count: only the server's rejection makes the middleware compact.
    let model = OpenAiConfig::from_env()
        .unwrap()
        .with_timeout(Duration::from_secs(120))
        .with_context_window(32_768)
        .build()
        .unwrap();
    let config = SummarizationConfig::builder()
        .trigger(ContextSize::Tokens(30_000))
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
        .system_prompt("You are a helpful assistant. Answer briefly.")
        .settings(settings(16))
        .middleware_shared(summarization.clone())
        .build()
        .unwrap();
    // About 4000 tokens of notes: twice the server's window, far under Keel's.
    let mut input = Vec::new();
    for i in 0..40 {
        input.push(Message::human(format!(
            "Note {i}: the deployment in region {i} keeps its checkpoints in the SQLite file keel-{i}.db, which is backed up every night to the bucket archive-{i} and restored on demand."
        )));
        input.push(Message::ai(format!("Noted, item {i}.")));
    }
    input.push(Message::human("Where does region 3 keep its checkpoints?"));

    let mut stream = agent.stream("overflow", input, &[StreamMode::Custom]);
    let mut compacted = Vec::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Custom { payload, .. } = event
            && payload["type"] == EVENT_COMPACTED
        {
            compacted.push(payload);
        }
    }
    println!("compaction: {compacted:?}");
    if let Some(Err(e)) = stream.into_result() {
        panic!("the run failed: {e}");
    }
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    assert_eq!(compacted[0]["reason"], json!("overflow"));
    let stats = summarization.overflow_stats();
    assert_eq!((stats.overflows, stats.recovered), (1, 1), "{stats:?}");
}

#[tokio::test]
#[ignore = "needs a llama.cpp server: scripts/llama-e2e.sh"]
async fn agent_run_with_summarization_through_the_server() {
    let Some(model) = model() else { return };
    let model: Arc<dyn ChatModel> = Arc::new(CappedSummaries {
        inner: model,
        max_tokens: 48,
    });
    let config = SummarizationConfig::builder()
        .trigger(ContextSize::Tokens(200))
        .keep(ContextSize::Messages(4))
        .build()
        .unwrap();
    let summarization = SummarizationMiddleware::builder(config)
        .summary_model(model.clone())
        .build()
        .unwrap();
    let agent = Agent::builder()
        .model(model)
        .system_prompt("You are a helpful assistant. Answer briefly.")
        .settings(settings(32))
        .middleware(summarization)
        .build()
        .unwrap();
    // A long enough history that the request crosses the 200-token trigger, short
    // enough that a loaded 2-core machine evaluates the summary prompt in seconds.
    let mut input = Vec::new();
    for i in 0..10 {
        input.push(Message::human(format!(
            "Note {i}: Keel keeps its checkpoints in SQLite."
        )));
        input.push(Message::ai(format!("Noted, item {i}.")));
    }
    input.push(Message::human("What does Keel store in SQLite?"));

    let mut stream = agent.stream(
        "e2e",
        input.clone(),
        &[StreamMode::Messages, StreamMode::Custom],
    );
    let mut compacted = Vec::new();
    let mut streamed = String::new();
    while let Some(event) = stream.next().await {
        match event {
            StreamEvent::Custom { payload, .. } if payload["type"] == EVENT_COMPACTED => {
                compacted.push(payload)
            }
            StreamEvent::Messages {
                chunk: ChatChunk::Text { text },
                ..
            } => streamed.push_str(&text),
            _ => {}
        }
    }
    println!("compaction: {compacted:?}\nanswer: {streamed:?}");
    if let Some(Err(e)) = stream.into_result() {
        panic!("the run failed: {e}");
    }
    assert_eq!(compacted.len(), 1, "one compaction for one model call");
    assert_eq!(compacted[0]["source"], json!("model"), "{:?}", compacted[0]);
    assert!(
        compacted[0]["tokens_after"].as_u64() < compacted[0]["tokens_before"].as_u64(),
        "{:?}",
        compacted[0]
    );
    assert!(
        !streamed.trim().is_empty(),
        "the answer streamed to the user"
    );

    let state = agent.state("e2e").await.unwrap().unwrap();
    assert_eq!(&state.messages[..input.len()], &input[..]);
    assert!(
        state.messages.iter().all(|m| m.name() != Some("summary")),
        "compaction is transient: no summary in state"
    );
    let last = state.messages.last().unwrap();
    assert!(last.is_ai() && !last.text().trim().is_empty());
}
