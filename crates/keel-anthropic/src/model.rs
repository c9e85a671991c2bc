//! [`AnthropicChatModel`]: Keel's [`ChatModel`] over the Messages API.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use keel_core::message::Message;
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, ModelError, ModelErrorKind, ModelProfile,
    message_to_chunks,
};
use serde_json::Value;

use crate::config::{AnthropicConfig, ConfigError};
use crate::error::{classify_http, from_reqwest, retry_after_from_headers};
use crate::request::build_body;
use crate::response::{CallFacts, StreamDecoder, decode_message};
use crate::sse::SseParser;

/// Claude (or any server speaking Anthropic's Messages API) as a Keel chat model.
///
/// `invoke` makes one call; `stream` reads server-sent events and yields text and
/// tool-call fragments as they arrive, then usage, metadata and the whole message
/// (with its thinking blocks). Each call is sent exactly once: retries (of a 529
/// `overloaded_error`, a 429 with its `retry-after`, a dropped connection) are the
/// retry middleware's, which reads the typed error. Internal calls (summaries) never
/// stream.
pub struct AnthropicChatModel {
    http: reqwest::Client,
    url: String,
    config: AnthropicConfig,
    profile: ModelProfile,
}

impl std::fmt::Debug for AnthropicChatModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicChatModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AnthropicConfig {
    /// Validates the configuration and builds the model.
    pub fn build(self) -> Result<AnthropicChatModel, ConfigError> {
        AnthropicChatModel::new(self)
    }
}

impl AnthropicChatModel {
    /// A model from a configuration; fails on the first invalid setting.
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let http = reqwest::Client::builder()
            .default_headers(config.header_map()?)
            .connect_timeout(config.timeout)
            .read_timeout(config.timeout)
            .build()
            .map_err(|e| ConfigError::HttpClient(e.to_string()))?;
        let mut profile = ModelProfile::new(config.model.clone(), config.provider.clone());
        profile.max_input_tokens = config.resolved_context_window();
        // What a request without `max_tokens` is given: the room its answer takes.
        profile.max_output_tokens = Some(u64::from(config.default_max_tokens()));
        Ok(AnthropicChatModel {
            http,
            url: config.messages_url(),
            config,
            profile,
        })
    }

    /// A model configured from the environment (see [`crate::config::env`]).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::new(AnthropicConfig::from_env()?)
    }

    /// The configuration this model was built from.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// POSTs `body`; a non-success answer is classified.
    async fn send(&self, body: &Value) -> Result<reqwest::Response, ModelError> {
        send(&self.http, &self.url, body).await
    }
}

async fn send(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
) -> Result<reqwest::Response, ModelError> {
    let bytes = serde_json::to_vec(body)
        .map_err(|e| ModelError::new(ModelErrorKind::InvalidRequest, e.to_string()))?;
    let response = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(bytes)
        .send()
        .await
        .map_err(|e| from_reqwest(&e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry_after_from_headers(response.headers());
    let body = response.text().await.map_err(|e| from_reqwest(&e))?;
    Err(classify_http(status.as_u16(), retry_after, &body))
}

/// True when the answer is one JSON document rather than an event stream.
fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.trim_start().starts_with("application/json"))
}

/// `fut` within `timeout`; `what` names it in a timeout error.
async fn timed<T>(
    timeout: Duration,
    what: &str,
    fut: impl Future<Output = Result<T, ModelError>>,
) -> Result<T, ModelError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result,
        Err(_) => Err(ModelError::new(
            ModelErrorKind::Timeout,
            format!("{what} took longer than the configured timeout of {timeout:?}"),
        )),
    }
}

/// One non-streaming call, decoded.
async fn invoke_body(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    facts: &CallFacts<'_>,
    timeout: Duration,
) -> Result<Message, ModelError> {
    let answer = timed(timeout, "the Messages API call", async {
        let response = send(http, url, body).await?;
        let text = response.text().await.map_err(|e| from_reqwest(&e))?;
        serde_json::from_str::<Value>(&text).map_err(|e| {
            ModelError::new(
                ModelErrorKind::MalformedResponse,
                format!("the server's answer is not valid JSON: {e}"),
            )
            .with_raw(text)
        })
    })
    .await?;
    Ok(decode_message(&answer, facts)?.into())
}

/// The response body's chunks, as they arrive.
type ByteStream = Pin<Box<dyn Stream<Item = Result<Vec<u8>, reqwest::Error>> + Send>>;

/// Where a stream is.
struct StreamState {
    bytes: ByteStream,
    parser: SseParser,
    decoder: StreamDecoder,
    pending: VecDeque<Result<ChatChunk, ModelError>>,
    done: bool,
    /// The same request without streaming, to ask once more when the stream ends
    /// having sent nothing.
    again: Option<AskAgain>,
}

struct AskAgain {
    http: reqwest::Client,
    url: String,
    body: Value,
    provider: String,
    model: String,
    structured_tool: Option<String>,
    timeout: Duration,
}

async fn ask_again(again: AskAgain) -> Result<Message, ModelError> {
    let facts = CallFacts {
        provider: &again.provider,
        model: &again.model,
        internal: false,
        structured_tool: again.structured_tool.as_deref(),
    };
    let send = || invoke_body(&again.http, &again.url, &again.body, &facts, again.timeout);
    // The aborted stream's connection may be the one the pool hands out again, and the
    // server has reset it: a connection error gets one fresh try.
    match send().await {
        Err(e) if e.kind == ModelErrorKind::Connection => send().await,
        other => other,
    }
}

impl StreamState {
    /// Decodes the events `bytes` completes into `pending`; an error ends the stream.
    fn feed(&mut self, events: Vec<crate::sse::SseEvent>) {
        for event in events {
            match self.decoder.push(&event.event, &event.data) {
                Ok(chunks) => self.pending.extend(chunks.into_iter().map(Ok)),
                Err(e) => {
                    self.pending.push_back(Err(e));
                    self.done = true;
                    return;
                }
            }
            if self.decoder.is_stopped() {
                self.done = true;
                return;
            }
        }
    }
}

#[async_trait]
impl ChatModel for AnthropicChatModel {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        let built = build_body(&self.config, &request, false)?;
        let facts = CallFacts {
            provider: &self.profile.provider,
            model: &self.config.model,
            internal: request.internal,
            structured_tool: built.structured_tool.as_deref(),
        };
        invoke_body(
            &self.http,
            &self.url,
            &built.body,
            &facts,
            self.config.timeout,
        )
        .await
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ChatStream, ModelError> {
        if request.internal {
            // Summaries and other internal calls must never reach the user token by token.
            let message = self.invoke(request).await?;
            let chunks: Vec<_> = message_to_chunks(&message).into_iter().map(Ok).collect();
            return Ok(Box::pin(futures::stream::iter(chunks)));
        }
        let built = build_body(&self.config, &request, true)?;
        let plain = build_body(&self.config, &request, false)?;
        let response = timed(
            self.config.timeout,
            "opening the stream",
            self.send(&built.body),
        )
        .await?;
        if is_json(&response) {
            // A server (or proxy) that answered the stream request in one piece.
            let facts = CallFacts {
                provider: &self.profile.provider,
                model: &self.config.model,
                internal: false,
                structured_tool: built.structured_tool.as_deref(),
            };
            let message = timed(self.config.timeout, "reading the answer", async {
                let text = response.text().await.map_err(|e| from_reqwest(&e))?;
                let v: Value = serde_json::from_str(&text).map_err(|e| {
                    ModelError::new(
                        ModelErrorKind::MalformedResponse,
                        format!("the server's answer is not valid JSON: {e}"),
                    )
                    .with_raw(text)
                })?;
                Ok(Message::from(decode_message(&v, &facts)?))
            })
            .await?;
            let chunks: Vec<_> = message_to_chunks(&message).into_iter().map(Ok).collect();
            return Ok(Box::pin(futures::stream::iter(chunks)));
        }
        let state = StreamState {
            bytes: Box::pin(response.bytes_stream().map(|r| r.map(|b| b.to_vec()))),
            parser: SseParser::default(),
            decoder: StreamDecoder::new(
                &self.profile.provider,
                &self.config.model,
                built.structured_tool.clone(),
            ),
            pending: VecDeque::new(),
            done: false,
            again: Some(AskAgain {
                http: self.http.clone(),
                url: self.url.clone(),
                body: plain.body,
                provider: self.profile.provider.clone(),
                model: self.config.model.clone(),
                structured_tool: built.structured_tool,
                timeout: self.config.timeout,
            }),
        };
        let chunks = futures::stream::unfold(state, |mut st| async move {
            loop {
                if let Some(item) = st.pending.pop_front() {
                    return Some((item, st));
                }
                if st.done {
                    return None;
                }
                match st.bytes.next().await {
                    Some(Ok(bytes)) => {
                        let events = st.parser.push(&bytes);
                        st.feed(events);
                    }
                    Some(Err(e)) => {
                        st.done = true;
                        let mut err = from_reqwest(&e);
                        err.message = format!("the event stream broke: {}", err.message);
                        return Some((Err(err), st));
                    }
                    None => {
                        let last: Vec<_> = st.parser.finish().into_iter().collect();
                        st.feed(last);
                        if st.done {
                            continue;
                        }
                        st.done = true;
                        // A 200 stream that closed before its first event (some proxies
                        // fail a too-long prompt after sending the headers): asked again
                        // without streaming, the server answers with its error or the
                        // answer, classified as usual.
                        if st.decoder.is_untouched()
                            && let Some(again) = st.again.take()
                        {
                            match ask_again(again).await {
                                Ok(message) => st
                                    .pending
                                    .extend(message_to_chunks(&message).into_iter().map(Ok)),
                                Err(e) => return Some((Err(e), st)),
                            }
                            continue;
                        }
                        return Some((
                            Err(ModelError::new(
                                ModelErrorKind::Connection,
                                "the stream closed before message_stop: the answer is incomplete",
                            )),
                            st,
                        ));
                    }
                }
            }
        });
        Ok(Box::pin(chunks))
    }
}
