//! A chat model from a name on the command line (`--summary-model`, `keel eval
//! --model`): `anthropic:NAME` is Claude through Anthropic's Messages API
//! (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`), any other name a model on an
//! OpenAI-compatible server (`OPENAI_BASE_URL`, `OPENAI_API_KEY`; an `openai:` prefix
//! is allowed and dropped). LangChain's `init_chat_model` takes the same
//! `provider:model` form.

use std::sync::Arc;

use keel_core::model::ChatModel;

/// The prefix naming an Anthropic model.
pub const ANTHROPIC_PREFIX: &str = "anthropic:";
/// The prefix naming an OpenAI-compatible model (optional).
pub const OPENAI_PREFIX: &str = "openai:";

/// Why the named model could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum ModelByNameError {
    /// The OpenAI-compatible configuration is invalid.
    #[error("{0}")]
    OpenAi(#[from] keel_openai::ConfigError),
    /// The Anthropic configuration is invalid.
    #[error("{0}")]
    Anthropic(#[from] keel_anthropic::ConfigError),
    /// The name is empty after its provider prefix.
    #[error("{0:?} names no model after its provider prefix")]
    Empty(String),
}

/// The model `name` stands for (see the [module docs](self)), configured from the
/// environment.
///
/// ```
/// let m = keel_replay::models::model_by_name("anthropic:claude-haiku-4-5").unwrap();
/// assert_eq!((m.profile().provider.as_str(), m.profile().name.as_str()), ("anthropic", "claude-haiku-4-5"));
/// assert!(keel_replay::models::model_by_name("anthropic:").is_err());
/// ```
pub fn model_by_name(name: &str) -> Result<Arc<dyn ChatModel>, ModelByNameError> {
    if let Some(model) = name.strip_prefix(ANTHROPIC_PREFIX) {
        if model.trim().is_empty() {
            return Err(ModelByNameError::Empty(name.to_owned()));
        }
        return Ok(Arc::new(
            keel_anthropic::AnthropicConfig::from_env()?
                .with_model(model)
                .build()?,
        ));
    }
    let model = name.strip_prefix(OPENAI_PREFIX).unwrap_or(name);
    if model.trim().is_empty() {
        return Err(ModelByNameError::Empty(name.to_owned()));
    }
    Ok(Arc::new(
        keel_openai::OpenAiConfig::from_env()?
            .with_model(model)
            .build()?,
    ))
}
