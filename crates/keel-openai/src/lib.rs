//! # keel-openai
//!
//! A Keel [`ChatModel`](keel_core::model::ChatModel) for OpenAI and every server that
//! speaks its chat-completions protocol: vLLM, llama.cpp's server, Ollama, LM Studio,
//! LiteLLM. Built on async-openai's client, with tolerant decoding of what those servers
//! actually send and errors classified into [`ModelErrorKind`](keel_core::model::ModelErrorKind)s
//! (authentication, rate limit with retry-after, context overflow, ...) that retry and
//! compaction middleware act on.
//!
//! - [`config`]: base URL, key, organization, headers, timeout, model and context window,
//!   from code or from `OPENAI_BASE_URL` / `OPENAI_API_KEY` / `KEEL_MODEL`.
//! - [`OpenAiChatModel`]: `invoke` (one JSON answer) and `stream` (server-sent events),
//!   with usage requested through `stream_options.include_usage`. When a server reports
//!   no usage, the response metadata says `usage_reported: false`; no numbers are made up.
//! - [`classify_http`] / [`is_context_overflow`] / [`overflow_figures`]: the error
//!   classifier, and the figures of a context overflow.
//! - [`known_model`] / [`KNOWN_MODELS`]: context windows and output limits of the models
//!   users name (OpenAI, Anthropic, Gemini, Llama, Qwen, Mistral, DeepSeek), each with
//!   its source.
//!
//! ```
//! use keel_core::model::ChatModel;
//! use keel_openai::OpenAiConfig;
//!
//! let model = OpenAiConfig::new("gpt-4o-mini")
//!     .with_base_url("http://127.0.0.1:8080/v1")
//!     .with_api_key("sk-local")
//!     .build()?;
//! assert_eq!(model.profile().max_input_tokens, Some(128_000));
//! assert_eq!(model.profile().provider, "openai-compatible");
//!
//! // A local model the built-in table does not know: give its window.
//! let local = OpenAiConfig::new("smollm2").with_context_window(2048).build()?;
//! assert_eq!(local.profile().max_input_tokens, Some(2048));
//! # Ok::<(), keel_openai::ConfigError>(())
//! ```

pub mod config;
mod error;
mod http;
mod model;
mod profile;
mod request;
mod response;

pub use config::{ConfigError, OpenAiConfig};
pub use error::{classify_error_object, classify_http, is_context_overflow, overflow_figures};
pub use model::OpenAiChatModel;
pub use profile::{KNOWN_MODELS, KnownModel, known_context_window, known_model};
pub use request::build_body;
