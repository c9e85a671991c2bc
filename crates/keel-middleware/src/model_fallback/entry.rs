//! The `model_fallback` entry of a stack file: LangChain's `*models` (a list, or the
//! `models` key), read and checked here; the names resolve when the entry builds.

use std::sync::Arc;

use keel_config::yaml::Yaml;
use keel_core::middleware::Middleware;

use super::ModelFallback;
use crate::error::ConfigError;
use crate::stack::value::{At, ModelName, Refuse, Settings, build_refused};
use crate::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};

/// The `model_fallback` entry: `- model_fallback: [a, b]` or
/// `- model_fallback: {models: [a, b]}`.
pub(crate) struct Entry;

/// The fallback models' names, in order, with their lines.
struct Checked {
    models: Vec<ModelName>,
}

/// What `models` allows.
const ALLOWED: &str = "a list of one or more model names";

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "model_fallback"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        if let Yaml::Seq(_) = source.node.value {
            return models(&At::new(source.key("models"), source.node));
        }
        let args = Settings::read(source, &["models"])?;
        match args.get("models") {
            Some(list) => models(&list),
            None => Err(args.refused(ConfigError::new(
                "model_fallback",
                "models",
                "(missing)",
                "no fallback model",
                ALLOWED,
            ))),
        }
    }
}

fn models(list: &At<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
    let Yaml::Seq(items) = &list.node.value else {
        return Err(list.refuse("is not a list of model names", ALLOWED));
    };
    if items.is_empty() {
        return Err(list.refuse("no fallback model", ALLOWED));
    }
    let models = items
        .iter()
        .enumerate()
        .map(|(i, n)| ModelName::read(&At::new(format!("{}[{i}]", list.key), n)))
        .collect::<Result<_, _>>()?;
    Ok(Arc::new(Checked { models }))
}

impl CheckedEntry for Checked {
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        let models = self
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| m.resolve(ctx, &format!("models[{i}]")))
            .collect::<Result<_, _>>()?;
        let m = ModelFallback::new(models).map_err(|e| build_refused(ctx, e))?;
        Ok(Some(Arc::new(m)))
    }
}

#[cfg(test)]
mod tests {
    use crate::stack::Stack;

    use crate::stack::tests::err;

    #[test]
    fn refuses_unknown_keys_and_empty_or_bad_lists_with_their_line() {
        assert_eq!(
            err("middleware:\n  - model_fallback:\n      model: [a]\n"),
            "unknown key middleware[0].model_fallback.model (line 3) (did you mean `models`?)"
        );
        assert_eq!(
            err("middleware:\n  - model_fallback: []\n"),
            "middleware[0].model_fallback.models = a list (line 2): no fallback model; allowed: a list of one or more model names"
        );
        assert_eq!(
            err("middleware:\n  - model_fallback:\n      models: a\n"),
            "middleware[0].model_fallback.models = \"a\" (line 3): is not a list of model names; allowed: a list of one or more model names"
        );
        assert_eq!(
            err("middleware:\n  - model_fallback: {}\n"),
            "middleware[0].model_fallback.models = (missing): no fallback model; allowed: a list of one or more model names (line 2)"
        );
        assert!(Stack::from_yaml_str("middleware:\n  - model_fallback: [a, b]\n").is_ok());
    }
}
