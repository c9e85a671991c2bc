//! # keel-anthropic
//!
//! A Keel [`ChatModel`](keel_core::model::ChatModel) for Claude through Anthropic's own
//! Messages API (<https://docs.anthropic.com/en/api/messages>), or any server speaking
//! it (LiteLLM's proxy, gateways). What the OpenAI-compatible endpoint drops is kept:
//!
//! - **Prompt caching**: `cache_control` breakpoints (at most four) on the tools, the
//!   system prompt, the summary message and the last stable message, so every call
//!   between two compactions reads the whole prefix from the cache
//!   ([`request::place_breakpoints`]); lifetime `5m` or `1h` ([`CacheTtl`]).
//! - **Usage split**: `cache_read_input_tokens` into `Usage::cached_input_tokens`,
//!   `cache_creation_input_tokens` into `Usage::cache_creation_input_tokens`, and
//!   `Usage::input_tokens` is the whole prompt (the API's `input_tokens` plus both).
//! - **Thinking**: `thinking` and `redacted_thinking` blocks stay in the AI message's
//!   content list and are sent back unchanged, signatures included.
//! - **Errors**: `overloaded_error` (529) is a server error retried like a 503,
//!   `rate_limit_error` carries `retry-after`, "prompt is too long" is a context
//!   overflow with its figures (so overflow recovery compacts and retries), and
//!   `invalid_request_error` keeps the API's message ([`classify_http`]).
//! - **Structured output**: a `response_format` JSON schema (how Keel's summary and
//!   session-memory fold calls ask for JSON) becomes a forced tool call whose
//!   `input_schema` is the schema, so the answer parses.
//! - **Streaming**: `message_start`, `content_block_*` (with `input_json_delta` for tool
//!   arguments), `message_delta`, `message_stop`, `ping` and `error` events, parsed by
//!   this crate's own SSE reader over reqwest.
//!
//! ```
//! use keel_core::model::ChatModel;
//! use keel_anthropic::{AnthropicConfig, CacheTtl};
//!
//! let model = AnthropicConfig::new("claude-sonnet-4-5")
//!     .with_api_key("sk-ant-...")
//!     .with_cache_ttl(Some(CacheTtl::OneHour))
//!     .build()?;
//! assert_eq!(model.profile().max_input_tokens, Some(200_000));
//! assert_eq!(model.profile().provider, "anthropic");
//!
//! // From ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL and KEEL_MODEL:
//! // let model = keel_anthropic::AnthropicChatModel::from_env()?;
//! # Ok::<(), keel_anthropic::ConfigError>(())
//! ```

pub mod config;
mod error;
mod model;
mod profile;
pub mod request;
mod response;
mod sse;

pub use config::{AnthropicConfig, CacheTtl, ConfigError};
pub use error::{classify_error_object, classify_http, is_context_overflow, overflow_figures};
pub use model::AnthropicChatModel;
pub use profile::{KNOWN_MODELS, KnownModel, known_model};
pub use request::{BuiltRequest, build_body};
