//! The `model_router` entry of a stack file: its routes (`choices`), instructions and
//! classifier, read and checked here; the model names resolve when the entry builds.

use std::sync::Arc;

use keel_core::middleware::Middleware;

use super::{ModelRouter, Route};
use crate::error::ConfigError;
use crate::stack::value::{At, ModelName, Refuse, Settings, build_refused, known_keys};
use crate::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};

/// The `model_router` entry.
pub(crate) struct Entry;

impl Entry {
    /// Its settings.
    const KEYS: [&'static str; 3] = ["choices", "instructions", "classifier"];
    /// The settings of one route.
    const ROUTE_KEYS: [&'static str; 2] = ["model", "criteria"];
}

/// One checked route: its name, its model's name, and when to choose it.
struct CheckedRoute {
    name: String,
    model: ModelName,
    criteria: String,
}

/// The checked settings; every model is a name yet.
struct Checked {
    routes: Vec<CheckedRoute>,
    instructions: String,
    classifier: ModelName,
}

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "model_router"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &Self::KEYS)?;
        let required = |key: &str, allowed: &str| {
            args.get(key).ok_or_else(|| {
                args.refused(ConfigError::new(
                    "model_router",
                    key,
                    "(missing)",
                    "is required",
                    allowed,
                ))
            })
        };
        let choices = required(
            "choices",
            "a mapping {route: {model: NAME, criteria: TEXT}}",
        )?;
        let routes = choices
            .map()?
            .iter()
            .map(|(route, _, node)| {
                read_route(&At::new(format!("{}.{route}", choices.key), node), route)
            })
            .collect::<Result<_, _>>()?;
        let instructions =
            required("instructions", "the routing instructions, as text")?.string()?;
        let classifier = required("classifier", "a model name the application resolves")?;
        Ok(Arc::new(Checked {
            routes,
            instructions,
            classifier: ModelName::read(&classifier)?,
        }))
    }
}

/// The route `name`, at `at`: `{model: NAME, criteria: TEXT}`.
fn read_route(at: &At<'_>, name: &str) -> Result<CheckedRoute, StackError> {
    let fields = at.map()?;
    known_keys(&at.key, fields, &Entry::ROUTE_KEYS)?;
    let get = |k: &str| {
        fields
            .iter()
            .find(|(f, _, _)| f == k)
            .map(|(_, _, n)| At::new(format!("{}.{k}", at.key), n))
    };
    let model =
        get("model").ok_or_else(|| at.refuse("has no model", "{model: NAME, criteria: TEXT}"))?;
    let criteria = match get("criteria") {
        Some(c) => c.string()?,
        None => String::new(),
    };
    Ok(CheckedRoute {
        name: name.to_owned(),
        model: ModelName::read(&model)?,
        criteria,
    })
}

impl CheckedEntry for Checked {
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        let routes = self
            .routes
            .iter()
            .map(|r| {
                Ok(Route {
                    name: r.name.clone(),
                    model: r.model.resolve(ctx, &format!("choices.{}.model", r.name))?,
                    criteria: r.criteria.clone(),
                })
            })
            .collect::<Result<_, StackError>>()?;
        let classifier = self.classifier.resolve(ctx, "classifier")?;
        let m = ModelRouter::new(routes, self.instructions.clone(), classifier)
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
    fn refuses_unknown_keys_and_missing_settings_with_their_line() {
        assert_eq!(
            err("middleware:\n  - model_router:\n      classifer: small\n"),
            "unknown key middleware[0].model_router.classifer (line 3) (did you mean `classifier`?)"
        );
        assert_eq!(
            err(
                "middleware:\n  - model_router:\n      choices:\n        fast: {model: a, criterion: x}\n"
            ),
            "unknown key middleware[0].model_router.choices.fast.criterion (line 4) (did you mean `criteria`?)"
        );
        assert_eq!(
            err("middleware:\n  - model_router:\n      choices:\n        fast: {criteria: x}\n"),
            "middleware[0].model_router.choices.fast = a mapping (line 4): has no model; allowed: {model: NAME, criteria: TEXT}"
        );
        assert_eq!(
            err("middleware:\n  - model_router:\n      choices: {fast: {model: a}}\n"),
            "middleware[0].model_router.instructions = (missing): is required; allowed: the routing instructions, as text (line 2)"
        );
    }

    #[test]
    fn an_empty_router_is_refused_when_built_and_the_classifier_resolves() {
        let text = "middleware:\n  - model_router:\n      choices: {}\n      instructions: Pick.\n      classifier: c\n";
        let stack = Stack::from_yaml_str(text).unwrap();
        let none: Arc<dyn ModelRegistry> = Arc::new(|_: &str| None);
        let e = stack
            .middleware(none)
            .err()
            .expect("the build is refused")
            .to_string();
        assert!(
            e.starts_with("middleware[0].model_router.classifier = \"c\" (line 5): no such model"),
            "{e}"
        );
        let m: Arc<dyn keel_core::model::ChatModel> =
            Arc::new(keel_testkit::ScriptedModel::new([]));
        let any: Arc<dyn ModelRegistry> = Arc::new(move |_: &str| Some(m.clone()));
        let e = stack
            .middleware(any)
            .err()
            .expect("the build is refused")
            .to_string();
        assert_eq!(
            e,
            "middleware[0].model_router.choices = {}: no route; allowed: a mapping of one or more routes: {name: {model, criteria}} (line 2)"
        );
    }
}
