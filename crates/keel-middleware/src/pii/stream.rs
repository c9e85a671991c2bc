//! Redacting a model's answer as it streams: the text is held back by a fixed number of
//! characters, so a value split across chunks is seen whole before any of it leaves.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use keel_core::message::{Message, MessageBody};
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, ModelError, ModelErrorKind, ModelProfile,
};

use super::{Rule, Strategy};

/// Characters held back (LangChain's `_DEFAULT_STREAM_LOOKBACK`).
pub(crate) const LOOKBACK: usize = 128;

/// Wraps the run's model for one call; everything but the text passes through.
pub(crate) struct RedactingModel {
    inner: Arc<dyn ChatModel>,
    rule: Arc<Rule>,
    report: Report,
}

/// Told how many values the whole answer had.
pub(crate) type Report = Arc<dyn Fn(usize) + Send + Sync>;

impl RedactingModel {
    pub(crate) fn new(inner: Arc<dyn ChatModel>, rule: Arc<Rule>, report: Report) -> Self {
        RedactingModel {
            inner,
            rule,
            report,
        }
    }
}

fn blocked(rule: &Rule, count: usize) -> ModelError {
    ModelError::new(ModelErrorKind::Rejected, rule.blocked_message(count))
}

/// The message with its content handled by `rule`.
fn redact_message(
    rule: &Rule,
    report: &Report,
    mut message: Message,
) -> Result<Message, ModelError> {
    let content = match rule.process_content(message.content()) {
        Err(count) => return Err(blocked(rule, count)),
        Ok(None) => return Ok(message),
        Ok(Some((content, n))) => {
            report(n);
            content
        }
    };
    if let MessageBody::Ai(m) = message.body_mut() {
        m.content = content;
    }
    Ok(message)
}

/// The held-back text and the chunks ready to go.
struct Redactor {
    rule: Arc<Rule>,
    report: Report,
    held: String,
    ready: VecDeque<Result<ChatChunk, ModelError>>,
}

impl Redactor {
    fn text(&mut self, text: &str) {
        let mut combined = std::mem::take(&mut self.held);
        combined.push_str(text);
        let matches = self.rule.find(&combined);
        if !matches.is_empty() {
            if self.rule.strategy == Strategy::Block {
                self.ready
                    .push_back(Err(blocked(&self.rule, matches.len())));
                return;
            }
            combined = super::strategy::apply(&combined, &matches, self.rule.strategy);
        }
        let emit_end = combined
            .char_indices()
            .rev()
            .nth(LOOKBACK - 1)
            .map_or(0, |(i, _)| i);
        self.held = combined.split_off(emit_end);
        if !combined.is_empty() {
            self.ready.push_back(Ok(ChatChunk::Text { text: combined }));
        }
    }

    fn flush(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        match self.rule.process_text(&held) {
            Err(count) => self.ready.push_back(Err(blocked(&self.rule, count))),
            Ok(Some((text, _))) => self.ready.push_back(Ok(ChatChunk::Text { text })),
            Ok(None) => self.ready.push_back(Ok(ChatChunk::Text { text: held })),
        }
    }
}

#[async_trait]
impl ChatModel for RedactingModel {
    fn profile(&self) -> &ModelProfile {
        self.inner.profile()
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        redact_message(&self.rule, &self.report, self.inner.invoke(request).await?)
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ChatStream, ModelError> {
        let inner = self.inner.stream(request).await?;
        let redactor = Redactor {
            rule: self.rule.clone(),
            report: self.report.clone(),
            held: String::new(),
            ready: VecDeque::new(),
        };
        let stream = futures::stream::unfold(
            (inner, redactor, false),
            |(mut inner, mut r, mut done)| async move {
                loop {
                    if let Some(item) = r.ready.pop_front() {
                        // An error ends the stream.
                        let stop = item.is_err();
                        if stop {
                            r.ready.clear();
                            done = true;
                        }
                        return Some((item, (inner, r, done)));
                    }
                    if done {
                        return None;
                    }
                    match inner.next().await {
                        None => {
                            r.flush();
                            done = true;
                        }
                        Some(Err(e)) => {
                            r.ready.push_back(Err(e));
                        }
                        Some(Ok(ChatChunk::Text { text })) => r.text(&text),
                        Some(Ok(ChatChunk::Complete { message })) => {
                            r.flush();
                            let item = redact_message(&r.rule, &r.report, *message).map(|m| {
                                ChatChunk::Complete {
                                    message: Box::new(m),
                                }
                            });
                            r.ready.push_back(item);
                        }
                        Some(Ok(other)) => r.ready.push_back(Ok(other)),
                    }
                }
            },
        );
        Ok(Box::pin(stream))
    }
}
