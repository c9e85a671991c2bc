//! The scripted model of the test servers: keel-testkit's `ScriptedModel` answering
//! from the request, streamed one word per `pace` (shared by `scripted_server` and
//! `load`).

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use keel_core::message::{Message, ToolCall};
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, ModelError, ModelProfile, message_to_chunks,
};
use keel_testkit::{RecordedRequest, ScriptedModel};
use serde_json::json;

/// Streams a model's answer one word per `pace`.
pub struct Paced {
    /// The model.
    pub inner: ScriptedModel,
    /// Time before each chunk.
    pub pace: Duration,
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

/// What the model answers (see scripted_server.rs).
pub fn answer(request: &RecordedRequest) -> Result<Message, ModelError> {
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

/// The paced scripted model.
pub fn model(pace: Duration) -> Paced {
    Paced {
        inner: ScriptedModel::from_fn(answer),
        pace,
    }
}
