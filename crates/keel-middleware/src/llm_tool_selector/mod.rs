//! `LlmToolSelector`: before the main call, a model picks the tools relevant to the
//! user's last message, and the main call is offered only those (LangChain's
//! `LLMToolSelectorMiddleware`).
//!
//! The selection call is internal (never streamed to the user): LangChain's system
//! prompt (plus its note on ordering when `max_tools` is set) and the last user message,
//! with one tool, `select_tools`, whose `tools` argument lists the candidate names
//! (LangChain asks for the same object through structured output). An answer that is
//! not `{"tools": [...]}` (as the tool call's arguments or as JSON text) is asked again
//! up to `max_retries` times, then `on_parsing_failure` decides. Names outside the
//! candidates fail the call, as in LangChain. `always_include` tools are never offered
//! to the selector and always kept; `max_tools` keeps the first picks.

mod entry;

pub(crate) use entry::Entry;

use std::sync::Arc;

use keel_core::message::Message;
use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelErrorKind, ToolChoice};
use keel_core::telemetry::{self, CallPurpose};
use keel_core::tool::ToolSpec;
use serde_json::{Value, json};

use crate::error::ConfigError;
use crate::events;

/// LangChain's selection prompt.
pub const DEFAULT_SYSTEM_PROMPT: &str =
    "Your goal is to select the most relevant tools for answering the user's query.";

/// The name of the tool the selector answers with.
pub const SELECT_TOOL: &str = "select_tools";

/// What to do when the selector's answers stay malformed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum OnParsingFailure {
    /// Fail the call (the default).
    #[default]
    Error,
    /// Offer no tool (besides `always_include`).
    None,
    /// Offer every tool.
    All,
    /// Offer these tools.
    Tools(Vec<String>),
}

/// Selects tools with a model. See the [module docs](self).
#[derive(Clone)]
pub struct LlmToolSelector {
    model: Option<Arc<dyn ChatModel>>,
    system_prompt: String,
    max_tools: Option<usize>,
    always_include: Vec<String>,
    max_retries: u32,
    on_parsing_failure: OnParsingFailure,
}

impl std::fmt::Debug for LlmToolSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmToolSelector")
            .field(
                "model",
                &self.model.as_ref().map(|m| m.profile().name.clone()),
            )
            .field("max_tools", &self.max_tools)
            .field("always_include", &self.always_include)
            .finish_non_exhaustive()
    }
}

fn rejected(message: String) -> ModelError {
    ModelError::new(ModelErrorKind::Rejected, message)
}

impl LlmToolSelector {
    /// A selector; `model` `None` uses the run's model. `max_retries` is at most 100.
    pub fn new(
        model: Option<Arc<dyn ChatModel>>,
        system_prompt: impl Into<String>,
        max_tools: Option<usize>,
        always_include: Vec<String>,
        max_retries: u32,
        on_parsing_failure: OnParsingFailure,
    ) -> Result<Self, ConfigError> {
        if max_retries > 100 {
            return Err(ConfigError::new(
                "llm_tool_selector",
                "max_retries",
                max_retries,
                "is too large",
                "a whole number in [0, 100]",
            ));
        }
        Ok(LlmToolSelector {
            model,
            system_prompt: system_prompt.into(),
            max_tools,
            always_include,
            max_retries,
            on_parsing_failure,
        })
    }

    fn selection_tool(candidates: &[&ToolSpec]) -> ToolSpec {
        let names: Vec<&str> = candidates.iter().map(|t| t.name.as_str()).collect();
        let listing: Vec<String> = candidates
            .iter()
            .map(|t| format!("- {}: {}", t.name, t.description))
            .collect();
        ToolSpec::new(
            SELECT_TOOL,
            format!("Select the tools to use.\n{}", listing.join("\n")),
            json!({
                "type": "object",
                "properties": {"tools": {
                    "type": "array",
                    "items": {"enum": names},
                    "description": "Tools to use. Place the most relevant tools first."
                }},
                "required": ["tools"]
            }),
        )
    }

    /// The picked names, when the answer has the expected shape.
    fn parse(answer: &Message) -> Option<Vec<String>> {
        let from_call = answer
            .tool_calls()
            .iter()
            .find(|c| c.name == SELECT_TOOL)
            .map(|c| c.args.clone());
        let value =
            from_call.or_else(|| serde_json::from_str::<Value>(answer.text().trim()).ok())?;
        value
            .get("tools")?
            .as_array()?
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect()
    }
}

impl LlmToolSelector {
    /// LangChain's refusal of an `always_include` name the request does not offer.
    fn check_always_included(&self, tools: &[ToolSpec]) -> Result<(), ModelError> {
        let missing: Vec<&String> = self
            .always_include
            .iter()
            .filter(|n| !tools.iter().any(|t| &&t.name == n))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut available: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        available.sort_unstable();
        Err(rejected(format!(
            "Tools in always_include not found in request: {missing:?}. Available tools: {available:?}"
        )))
    }

    /// Asks the selection model which of `candidates` fit the latest user message,
    /// retrying a malformed answer `max_retries` times: the names, or the last answer
    /// when none parsed.
    async fn ask_selection(
        &self,
        request: &ModelRequest,
        last_user: &Message,
        candidates: &[&ToolSpec],
    ) -> Result<Result<Vec<String>, Message>, ModelError> {
        let mut system = self.system_prompt.clone();
        if let Some(n) = self.max_tools {
            system.push_str(&format!(
                "\nIMPORTANT: List the tool names in order of relevance, with the most relevant first. If you exceed the maximum number of tools, only the first {n} will be used."
            ));
        }
        let system = Message::system(system);
        let messages = [last_user.clone()];
        let tools = [Self::selection_tool(candidates)];
        let choice = ToolChoice::Named(SELECT_TOOL.into());
        let model = self.model.clone().unwrap_or_else(|| request.model.clone());
        let ask = || ChatRequest {
            system: Some(&system),
            messages: &messages,
            tools: &tools,
            tool_choice: Some(&choice),
            settings: &request.settings,
            internal: true,
        };
        let select = || telemetry::invoke(&*model, ask(), CallPurpose::ToolSelection);
        let mut answer = select().await?;
        let mut picked = Self::parse(&answer);
        let mut attempts = 0;
        while picked.is_none() && attempts < self.max_retries {
            answer = select().await?;
            picked = Self::parse(&answer);
            attempts += 1;
        }
        Ok(picked.ok_or(answer))
    }

    /// The names to offer and the cap on them: the model's pick (capped by
    /// `max_tools`), or what `on_parsing_failure` says when it gave none.
    fn chosen(
        &self,
        picked: Result<Vec<String>, Message>,
        valid: &[&str],
    ) -> Result<(Vec<String>, Option<usize>), ModelError> {
        let answer = match picked {
            Ok(names) => return Ok((names, self.max_tools)),
            Err(answer) => answer,
        };
        Ok(match &self.on_parsing_failure {
            OnParsingFailure::Error => {
                return Err(rejected(format!(
                    "LLMToolSelectorMiddleware: selection model returned a malformed response after {} retries (expected a dict with a 'tools' list): {:?}",
                    self.max_retries,
                    answer.text()
                )));
            }
            OnParsingFailure::None => (Vec::new(), None),
            OnParsingFailure::All => (valid.iter().map(|s| (*s).to_owned()).collect(), None),
            OnParsingFailure::Tools(t) => (t.clone(), None),
        })
    }

    /// The tools offered: the selected candidates (each once, at most `limit`), then
    /// the `always_include` ones; refuses a name that is not a candidate.
    fn offered(
        &self,
        request: &ModelRequest,
        candidates: &[&ToolSpec],
        names: &[String],
        limit: Option<usize>,
    ) -> Result<(Vec<ToolSpec>, Vec<String>), ModelError> {
        let valid: Vec<&str> = candidates.iter().map(|t| t.name.as_str()).collect();
        let invalid: Vec<&String> = names
            .iter()
            .filter(|n| !valid.contains(&n.as_str()))
            .collect();
        if !invalid.is_empty() {
            return Err(rejected(format!(
                "Model selected invalid tools: {invalid:?}"
            )));
        }
        let mut selected: Vec<String> = Vec::new();
        for n in names {
            if !selected.contains(n) && limit.is_none_or(|l| selected.len() < l) {
                selected.push(n.clone());
            }
        }
        let mut offered: Vec<ToolSpec> = candidates
            .iter()
            .filter(|t| selected.contains(&t.name))
            .map(|t| (*t).clone())
            .collect();
        offered.extend(
            request
                .tools
                .iter()
                .filter(|t| self.always_include.contains(&t.name))
                .cloned(),
        );
        Ok((offered, selected))
    }
}

#[keel_core::middleware]
impl Middleware for LlmToolSelector {
    fn name(&self) -> &str {
        "LLMToolSelectorMiddleware"
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        if request.tools.is_empty() {
            return next.run(request).await;
        }
        self.check_always_included(&request.tools)?;
        let candidates: Vec<&ToolSpec> = request
            .tools
            .iter()
            .filter(|t| !self.always_include.contains(&t.name))
            .collect();
        if candidates.is_empty() {
            return next.run(request).await;
        }
        let Some(last_user) = request.messages.iter().rev().find(|m| m.is_human()) else {
            return Err(rejected("No user message found in request messages".into()));
        };
        let picked = self.ask_selection(&request, last_user, &candidates).await?;
        let valid: Vec<&str> = candidates.iter().map(|t| t.name.as_str()).collect();
        let (names, limit) = self.chosen(picked, &valid)?;
        let (offered, selected) = self.offered(&request, &candidates, &names, limit)?;
        events::counter(
            &request.runtime.writer,
            self.name(),
            "selected_tools",
            offered.len() as u64,
            json!({"from": request.tools.len(), "selected": selected}),
        );
        let mut request = request;
        request.tools = Arc::new(offered);
        next.run(request).await
    }
}

#[cfg(test)]
mod tests;
