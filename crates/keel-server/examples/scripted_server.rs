//! The server the SDK, browser and load tests drive: examples/keel.yaml's middleware
//! stack around keel-testkit's `ScriptedModel` (a test double, never a default of
//! `keel serve`), which answers from the request so tests know what to expect, and
//! streams word by word at a set pace so cancelling and reconnecting happen mid-run.
//!
//! ```sh
//! cargo run -p keel-server --example scripted_server -- --port 0 [--pace-ms 5] \
//!     [--api-keys alice-key-1=alice,bob-key-22=bob] [--database sqlite://x.db]
//! ```
//!
//! What the model answers, by the last user message:
//! - a summary request (internal call): `Summary of N messages.`
//! - `echo ...`: a call of the `echo` tool, then `The tool said: <result>`;
//! - `slow ...`: 60 words, so the run lasts 60 × pace;
//! - anything else: `You said: <the message's first 12 words>` (`N messages`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use keel_core::message::{Message, ToolCall};
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, ModelError, ModelProfile, message_to_chunks,
};
use keel_server::auth::ApiKeys;
use keel_server::config::StackConfig;
use keel_server::{ServerOptions, router_with};
use keel_store::Store;
use keel_testkit::{RecordedRequest, ScriptedModel};
use serde_json::json;

/// Streams a model's answer one word per `pace`.
struct Paced {
    inner: ScriptedModel,
    pace: Duration,
}

#[async_trait]
impl ChatModel for Paced {
    fn profile(&self) -> &ModelProfile {
        self.inner.profile()
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        self.inner.invoke(request).await
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ChatStream, ModelError> {
        let message = self.inner.invoke(request).await?;
        let text = message.text().into_owned();
        let mut chunks: Vec<ChatChunk> = text
            .split_inclusive(' ')
            .map(|w| ChatChunk::Text { text: w.to_owned() })
            .collect();
        chunks.extend(
            message_to_chunks(&message)
                .into_iter()
                .filter(|c| !matches!(c, ChatChunk::Text { .. })),
        );
        let pace = self.pace;
        Ok(Box::pin(futures::stream::iter(chunks).then(
            move |chunk| async move {
                tokio::time::sleep(pace).await;
                Ok(chunk)
            },
        )))
    }
}

fn answer(request: &RecordedRequest) -> Result<Message, ModelError> {
    let count = request.messages.len();
    if request.internal {
        return Ok(Message::ai(format!("Summary of {count} messages.")));
    }
    let last = request.messages.last();
    if let Some(tool) = last.and_then(Message::as_tool) {
        return Ok(Message::ai(format!(
            "The tool said: {}",
            tool.content.text()
        )));
    }
    let said = last.map(|m| m.text().into_owned()).unwrap_or_default();
    if said.starts_with("echo") {
        return Ok(Message::ai("").with_tool_calls(vec![ToolCall::new(
            format!("call_{count}"),
            "echo",
            json!({"query": said}),
        )]));
    }
    if said.starts_with("slow") {
        let words: Vec<String> = (1..=60).map(|i| format!("w{i}")).collect();
        return Ok(Message::ai(words.join(" ")));
    }
    let head: Vec<&str> = said.split_whitespace().take(12).collect();
    Ok(Message::ai(format!(
        "You said: {} ({count} messages)",
        head.join(" ")
    )))
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let port = flag(&args, "--port").unwrap_or_else(|| "0".into());
    let pace = Duration::from_millis(flag(&args, "--pace-ms").map_or(Ok(5), |p| p.parse())?);
    let keys = ApiKeys::parse(&flag(&args, "--api-keys").unwrap_or_default())?;
    let database = flag(&args, "--database").unwrap_or_else(|| "memory:".into());
    let config = flag(&args, "--config")
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/keel.yaml").into());

    let stack = StackConfig::from_file(&config)?;
    let model = Paced {
        inner: ScriptedModel::from_fn(answer),
        pace,
    };
    let store = Arc::new(Store::connect(&database).await?);
    let agent = stack.build_with_model(store, Arc::new(model), false)?;
    let options = ServerOptions {
        graph_id: stack.name.clone(),
        api_keys: keys,
        ..ServerOptions::default()
    };
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router_with(agent, options)).await?;
    Ok(())
}
