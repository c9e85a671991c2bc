//! [`OpenAiChatModel`]: Keel's [`ChatModel`] over async-openai's chat-completions client.

use std::collections::VecDeque;
use std::future::Future;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_trait::async_trait;
use futures::StreamExt;
use keel_core::message::Message;
use keel_core::model::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, ModelError, ModelErrorKind, ModelProfile,
    message_to_chunks,
};
use serde_json::Value;

use crate::config::{ConfigError, OpenAiConfig};
use crate::error::from_openai;
use crate::http::SendOnce;
use crate::request::build_body;
use crate::response::{CallFacts, StreamDecoder, decode_completion};

/// A chat model on OpenAI or any server speaking its chat-completions protocol.
///
/// `invoke` makes one non-streaming call; `stream` reads server-sent events and yields
/// text and tool-call fragments as they arrive, then usage and response metadata.
/// Internal calls (`ChatRequest::internal`, e.g. summaries) never stream: they are made
/// with `invoke` and their metadata says `internal: true`.
pub struct OpenAiChatModel {
    client: Client<OpenAIConfig>,
    config: OpenAiConfig,
    profile: ModelProfile,
}

impl std::fmt::Debug for OpenAiChatModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChatModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiConfig {
    /// Validates the configuration and builds the model.
    pub fn build(self) -> Result<OpenAiChatModel, ConfigError> {
        OpenAiChatModel::new(self)
    }
}

impl OpenAiChatModel {
    /// A model from a configuration; fails on the first invalid setting.
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        // Every field is set explicitly: async-openai's defaults read the environment,
        // and a configuration built in code must not pick up ambient variables.
        let mut openai = OpenAIConfig::new()
            .with_api_base(config.normalized_base_url())
            .with_api_key(config.api_key.clone().unwrap_or_default())
            .with_org_id(config.organization.clone().unwrap_or_default())
            .with_project_id(config.project.clone().unwrap_or_default());
        for (name, value) in &config.headers {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| {
                ConfigError::InvalidHeader {
                    name: name.clone(),
                    reason: e.to_string(),
                }
            })?;
            openai = openai.with_header(header, value.as_str()).map_err(|e| {
                ConfigError::InvalidHeader {
                    name: name.clone(),
                    reason: e.to_string(),
                }
            })?;
        }
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            .read_timeout(config.timeout)
            .build()
            .map_err(|e| ConfigError::HttpClient(e.to_string()))?;
        let client = Client::with_config(openai).with_http_service(SendOnce { client: http });
        let mut profile = ModelProfile::new(config.model.clone(), config.provider_name());
        profile.max_input_tokens = config.resolved_context_window();
        profile.max_output_tokens = config.resolved_max_output_tokens();
        Ok(OpenAiChatModel {
            client,
            config,
            profile,
        })
    }

    /// A model configured from the environment (see [`crate::config::env`]).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::new(OpenAiConfig::from_env()?)
    }

    /// The configuration this model was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    async fn with_timeout<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, async_openai::error::OpenAIError>>,
    ) -> Result<T, ModelError> {
        timed(self.config.timeout, what, fut).await
    }
}

/// `fut` within `timeout`, its error classified; `what` names it in a timeout error.
async fn timed<T>(
    timeout: std::time::Duration,
    what: &str,
    fut: impl Future<Output = Result<T, async_openai::error::OpenAIError>>,
) -> Result<T, ModelError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result.map_err(from_openai),
        Err(_) => Err(ModelError::new(
            ModelErrorKind::Timeout,
            format!("{what} took longer than the configured timeout of {timeout:?}"),
        )),
    }
}

/// Where a stream is: chunks decoded but not yet yielded, and whether the server is done.
struct StreamState {
    events: std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<Value, async_openai::error::OpenAIError>> + Send>,
    >,
    decoder: StreamDecoder,
    pending: VecDeque<ChatChunk>,
    done: bool,
    /// The same request without streaming, to ask once more when the stream ends
    /// having sent nothing.
    again: Option<AskAgain>,
}

/// What asking a request again without streaming needs.
struct AskAgain {
    client: Client<OpenAIConfig>,
    body: Value,
    provider: String,
    model: String,
    timeout: std::time::Duration,
}

/// Sends `again`'s request without streaming and decodes the answer.
async fn ask_again(again: AskAgain) -> Result<Message, ModelError> {
    let chat = again.client.chat();
    let send = || {
        timed(
            again.timeout,
            "the chat completion (asked again after an empty stream)",
            chat.create_byot(again.body.clone()),
        )
    };
    // The aborted stream's connection may be the one the pool hands out again, and the
    // server has reset it: a connection error gets one fresh try.
    let answer: Value = match send().await {
        Err(e) if e.kind == ModelErrorKind::Connection => send().await?,
        other => other?,
    };
    let facts = CallFacts {
        provider: &again.provider,
        model: &again.model,
        internal: false,
    };
    Ok(decode_completion(&answer, &facts)?.into())
}

#[async_trait]
impl ChatModel for OpenAiChatModel {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        let body = build_body(&self.config.model, &request, false, false);
        let chat = self.client.chat();
        let answer: Value = self
            .with_timeout("the chat completion", chat.create_byot(body))
            .await?;
        let facts = CallFacts {
            provider: &self.profile.provider,
            model: &self.config.model,
            internal: request.internal,
        };
        Ok(decode_completion(&answer, &facts)?.into())
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ChatStream, ModelError> {
        if request.internal {
            // Summaries and other internal calls must never reach the user token by token.
            let message = self.invoke(request).await?;
            let chunks: Vec<_> = message_to_chunks(&message).into_iter().map(Ok).collect();
            return Ok(Box::pin(futures::stream::iter(chunks)));
        }
        let body = build_body(&self.config.model, &request, true, self.config.stream_usage);
        let plain = build_body(&self.config.model, &request, false, false);
        let chat = self.client.chat();
        let events = self
            .with_timeout("opening the stream", chat.create_stream_byot(body))
            .await?;
        let state = StreamState {
            events,
            decoder: StreamDecoder::new(&self.profile.provider, &self.config.model),
            pending: VecDeque::new(),
            done: false,
            again: Some(AskAgain {
                client: self.client.clone(),
                body: plain,
                provider: self.profile.provider.clone(),
                model: self.config.model.clone(),
                timeout: self.config.timeout,
            }),
        };
        let chunks = futures::stream::unfold(state, |mut st| async move {
            loop {
                if let Some(chunk) = st.pending.pop_front() {
                    return Some((Ok(chunk), st));
                }
                if st.done {
                    return None;
                }
                match st.events.next().await {
                    Some(Ok(event)) => match st.decoder.push(&event) {
                        Ok(chunks) => st.pending.extend(chunks),
                        Err(e) => {
                            st.done = true;
                            return Some((Err(e), st));
                        }
                    },
                    Some(Err(e)) => {
                        st.done = true;
                        return Some((Err(from_openai(e)), st));
                    }
                    None => {
                        st.done = true;
                        // A 200 stream that closed before its first event: llama.cpp's
                        // Python server, for one, fails a too-long prompt after sending
                        // the headers. Asked again without streaming, the server answers
                        // with its error (or the answer), which is classified as usual.
                        if st.decoder.is_untouched()
                            && let Some(again) = st.again.take()
                        {
                            match ask_again(again).await {
                                Ok(message) => st.pending.extend(message_to_chunks(&message)),
                                Err(e) => return Some((Err(e), st)),
                            }
                            continue;
                        }
                        let closing = st.decoder.finish();
                        st.pending.extend(closing);
                    }
                }
            }
        });
        Ok(Box::pin(chunks))
    }
}
