//! The `llm_tool_emulator` entry of a stack file: LangChain's constructor arguments,
//! read and checked here; the emulator model's name resolves when the entry builds.

use std::sync::Arc;

use keel_core::middleware::Middleware;

use super::LlmToolEmulator;
use crate::error::ConfigError;
use crate::stack::value::{ModelName, Settings};
use crate::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};

/// The `llm_tool_emulator` entry.
pub(crate) struct Entry;

/// The checked settings: the emulator model's name and the tools it answers (every
/// tool when `None`).
struct Checked {
    model: ModelName,
    tools: Option<Vec<String>>,
}

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "llm_tool_emulator"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &["tools", "model"])?;
        let Some(model) = args.get("model").filter(|v| !v.is_null()) else {
            return Err(args.refused(ConfigError::new(
                "llm_tool_emulator",
                "model",
                "(missing)",
                "is required (LangChain's default hosted model is deprecated)",
                "a model name the application resolves",
            )));
        };
        let tools = match args.get("tools") {
            Some(v) if !v.is_null() => Some(v.strings()?),
            _ => None,
        };
        Ok(Arc::new(Checked {
            model: ModelName::read(&model)?,
            tools,
        }))
    }
}

impl CheckedEntry for Checked {
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        let model = self.model.resolve(ctx, "model")?;
        Ok(Some(Arc::new(LlmToolEmulator::new(
            model,
            self.tools.clone(),
        ))))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::stack::{ModelRegistry, Stack};

    use crate::stack::tests::err;

    #[test]
    fn refuses_unknown_keys_and_bad_values_with_their_line() {
        assert_eq!(
            err("middleware:\n  - llm_tool_emulator:\n      model: m\n      tool: [x]\n"),
            "unknown key middleware[0].llm_tool_emulator.tool (line 4) (did you mean `tools`?)"
        );
        assert_eq!(
            err("middleware:\n  - llm_tool_emulator:\n      model: 7\n"),
            "middleware[0].llm_tool_emulator.model = 7 (line 3): is not a string; allowed: a string"
        );
        assert_eq!(
            err("middleware:\n  - llm_tool_emulator: {}\n"),
            "middleware[0].llm_tool_emulator.model = (missing): is required (LangChain's default hosted model is deprecated); allowed: a model name the application resolves (line 2)"
        );
    }

    #[test]
    fn an_unknown_emulator_model_is_named_with_its_line() {
        let stack =
            Stack::from_yaml_str("middleware:\n  - llm_tool_emulator:\n\n      model: fake\n")
                .unwrap();
        let none: Arc<dyn ModelRegistry> = Arc::new(|_: &str| None);
        let e = stack
            .middleware(none)
            .err()
            .expect("the build is refused")
            .to_string();
        assert!(
            e.starts_with(
                "middleware[0].llm_tool_emulator.model = \"fake\" (line 4): no such model"
            ),
            "{e}"
        );
    }
}
