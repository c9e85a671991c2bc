//! The `llm_tool_selector` entry of a stack file: LangChain's constructor arguments,
//! read and checked here; the selection model's name resolves when the entry builds.

use std::sync::Arc;

use keel_config::yaml::Yaml;
use keel_core::middleware::Middleware;

use super::{DEFAULT_SYSTEM_PROMPT, LlmToolSelector, OnParsingFailure};
use crate::stack::value::{MAX_LIMIT, ModelName, Settings, build_refused};
use crate::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};

/// The `llm_tool_selector` entry.
pub(crate) struct Entry;

impl Entry {
    /// Its settings, in LangChain's names.
    const KEYS: [&'static str; 6] = [
        "model",
        "system_prompt",
        "max_tools",
        "always_include",
        "max_retries",
        "on_parsing_failure",
    ];
}

/// The largest `max_retries` (checked again by [`LlmToolSelector::new`]).
const MAX_RETRIES: u64 = 100;

/// The checked settings; the selection model (none: the run's model) is a name yet.
struct Checked {
    model: Option<ModelName>,
    system_prompt: String,
    max_tools: Option<usize>,
    always_include: Vec<String>,
    max_retries: u32,
    on_parsing_failure: OnParsingFailure,
}

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "llm_tool_selector"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &Self::KEYS)?;
        let model = match args.get("model") {
            Some(v) if !v.is_null() => Some(ModelName::read(&v)?),
            _ => None,
        };
        let system_prompt = match args.get("system_prompt") {
            Some(v) => v.string()?,
            None => DEFAULT_SYSTEM_PROMPT.into(),
        };
        let max_tools = match args.get("max_tools") {
            Some(v) => v.opt_count(MAX_LIMIT)?.map(|n| n as usize),
            None => None,
        };
        let always_include = match args.get("always_include") {
            Some(v) if !v.is_null() => v.strings()?,
            _ => Vec::new(),
        };
        let max_retries = match args.get("max_retries") {
            Some(v) => v.count(MAX_RETRIES)? as u32,
            None => 1,
        };
        let on_parsing_failure = match args.get("on_parsing_failure") {
            None => OnParsingFailure::Error,
            Some(v) => match &v.node.value {
                Yaml::Seq(_) => OnParsingFailure::Tools(v.strings()?),
                _ => match v.choice(&["error", "none", "all"])? {
                    "none" => OnParsingFailure::None,
                    "all" => OnParsingFailure::All,
                    _ => OnParsingFailure::Error,
                },
            },
        };
        Ok(Arc::new(Checked {
            model,
            system_prompt,
            max_tools,
            always_include,
            max_retries,
            on_parsing_failure,
        }))
    }
}

impl CheckedEntry for Checked {
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        let model = self
            .model
            .as_ref()
            .map(|m| m.resolve(ctx, "model"))
            .transpose()?;
        let m = LlmToolSelector::new(
            model,
            self.system_prompt.clone(),
            self.max_tools,
            self.always_include.clone(),
            self.max_retries,
            self.on_parsing_failure.clone(),
        )
        .map_err(|e| build_refused(ctx, e))?;
        Ok(Some(Arc::new(m)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::stack::{ModelRegistry, Stack};

    use crate::stack::tests::err;

    #[test]
    fn refuses_unknown_keys_and_out_of_range_values_with_their_line() {
        assert_eq!(
            err("middleware:\n  - llm_tool_selector:\n      max_tool: 2\n"),
            "unknown key middleware[0].llm_tool_selector.max_tool (line 3) (did you mean `max_tools`?)"
        );
        assert_eq!(
            err("middleware:\n  - llm_tool_selector:\n      max_retries: 101\n"),
            "middleware[0].llm_tool_selector.max_retries = 101 (line 3): is out of range; allowed: a whole number in [0, 100]"
        );
        assert_eq!(
            err("middleware:\n  - llm_tool_selector:\n      on_parsing_failure: retry\n"),
            "middleware[0].llm_tool_selector.on_parsing_failure = \"retry\" (line 3): is not a known value; allowed: one of error, none, all"
        );
    }

    #[test]
    fn an_unknown_selection_model_is_named_with_its_line() {
        let stack =
            Stack::from_yaml_str("middleware:\n  - llm_tool_selector:\n      model: tiny\n")
                .unwrap();
        let none: Arc<dyn ModelRegistry> = Arc::new(|_: &str| None);
        let e = stack
            .middleware(none)
            .err()
            .expect("the build is refused")
            .to_string();
        assert!(
            e.starts_with(
                "middleware[0].llm_tool_selector.model = \"tiny\" (line 3): no such model"
            ),
            "{e}"
        );
        // Without a model, the run's model selects: nothing to resolve.
        let stack = Stack::from_yaml_str("middleware:\n  - llm_tool_selector: {}\n").unwrap();
        assert!(stack.middleware(Arc::new(|_: &str| None)).is_ok());
    }
}
