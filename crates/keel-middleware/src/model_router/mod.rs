//! `ModelRouter`: a decision model picks, once per run, which model answers (LangChain's
//! `ModelRouterMiddleware`, beta there).
//!
//! `before_agent` asks the classifier (an internal call: the instructions and each
//! route's criteria as the system message, the latest user message, and one tool,
//! `choose_route`, whose `choice` is one of the routes) and stores the answer in the
//! `model_route` state key (`{"choice": "<route>"}`); every model call of the run then
//! goes to that route's model. LangChain's classifier is a `BaseDecisionModel`; Keel
//! asks a chat model with a tool call, which any OpenAI-compatible server can answer.

mod entry;

pub(crate) use entry::Entry;

use std::sync::Arc;

use keel_core::access::StateAccess;
use keel_core::message::Message;
use keel_core::middleware::{
    HookOutcome, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next, Runtime,
};
use keel_core::model::{
    ChatModel, ChatRequest, ModelError, ModelErrorKind, ModelSettings, ToolChoice,
};
use keel_core::state::{AgentState, StateUpdate};
use keel_core::telemetry::{self, CallPurpose};
use keel_core::tool::ToolSpec;
use serde_json::{Value, json};

use crate::error::ConfigError;
use crate::events;

/// The state key holding the run's route (LangChain's name).
pub const ROUTE_KEY: &str = "model_route";
/// The tool the classifier answers with.
pub const ROUTE_TOOL: &str = "choose_route";

/// One route: a model and the criteria for choosing it.
#[derive(Clone)]
pub struct Route {
    /// The route's name.
    pub name: String,
    /// Its model.
    pub model: Arc<dyn ChatModel>,
    /// When to choose it, in words.
    pub criteria: String,
}

/// Routes each run to one model. See the [module docs](self).
#[derive(Clone)]
pub struct ModelRouter {
    routes: Vec<Route>,
    instructions: String,
    classifier: Arc<dyn ChatModel>,
}

impl std::fmt::Debug for ModelRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.routes.iter().map(|r| r.name.as_str()).collect();
        f.debug_struct("ModelRouter")
            .field("routes", &names)
            .finish_non_exhaustive()
    }
}

impl ModelRouter {
    /// A router over at least one route with distinct names.
    pub fn new(
        routes: Vec<Route>,
        instructions: impl Into<String>,
        classifier: Arc<dyn ChatModel>,
    ) -> Result<Self, ConfigError> {
        if routes.is_empty() {
            return Err(ConfigError::new(
                "model_router",
                "choices",
                "{}",
                "no route",
                "a mapping of one or more routes: {name: {model, criteria}}",
            ));
        }
        for (i, r) in routes.iter().enumerate() {
            if routes[..i].iter().any(|o| o.name == r.name) {
                return Err(ConfigError::new(
                    "model_router",
                    "choices",
                    format!("{:?}", r.name),
                    "the route is named twice",
                    "distinct route names",
                ));
            }
        }
        Ok(ModelRouter {
            routes,
            instructions: instructions.into(),
            classifier,
        })
    }

    fn route(&self, state: &AgentState) -> Option<&Route> {
        let choice = state.values.get(ROUTE_KEY)?.get("choice")?.as_str()?;
        self.routes.iter().find(|r| r.name == choice)
    }

    fn parse(&self, answer: &Message) -> Option<String> {
        let from_call = answer
            .tool_calls()
            .iter()
            .find(|c| c.name == ROUTE_TOOL)
            .and_then(|c| {
                c.args
                    .get("choice")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        let choice = from_call.unwrap_or_else(|| answer.text().trim().to_owned());
        self.routes
            .iter()
            .any(|r| r.name == choice)
            .then_some(choice)
    }
}

#[keel_core::middleware]
impl Middleware for ModelRouter {
    fn name(&self) -> &str {
        "ModelRouterMiddleware"
    }

    fn state_access(&self) -> StateAccess {
        StateAccess::default().write(ROUTE_KEY).read(ROUTE_KEY)
    }

    async fn before_agent(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let fail = |message: String| MiddlewareError {
            middleware: self.name().to_owned(),
            hook: "before_agent",
            message,
        };
        let Some(user) = state.messages.iter().rev().find(|m| m.is_human()) else {
            return Err(fail(
                "ModelRouterMiddleware requires a user message in the agent state to route on."
                    .into(),
            ));
        };
        let criteria: Vec<String> = self
            .routes
            .iter()
            .map(|r| format!("- {}: {}", r.name, r.criteria))
            .collect();
        let system = Message::system(format!(
            "{}\n\nChoices:\n{}",
            self.instructions,
            criteria.join("\n")
        ));
        let names: Vec<&str> = self.routes.iter().map(|r| r.name.as_str()).collect();
        let tools = [ToolSpec::new(
            ROUTE_TOOL,
            "Choose the route for this request.",
            json!({"type": "object", "properties": {"choice": {"enum": names}}, "required": ["choice"]}),
        )];
        let messages = [user.clone()];
        let settings = ModelSettings::default();
        let choice = ToolChoice::Named(ROUTE_TOOL.into());
        let request = ChatRequest {
            system: Some(&system),
            messages: &messages,
            tools: &tools,
            tool_choice: Some(&choice),
            settings: &settings,
            internal: true,
        };
        let answer = telemetry::invoke(&*self.classifier, request, CallPurpose::Routing)
            .await
            .map_err(|e| fail(format!("the classifier failed: {e}")))?;
        let route = self.parse(&answer).ok_or_else(|| {
            fail(format!(
                "the classifier answered {:?}, which is not one of the routes {names:?}",
                answer.text()
            ))
        })?;
        events::counter(
            &runtime.writer,
            self.name(),
            "routed",
            1,
            json!({"route": route}),
        );
        Ok(HookOutcome::update(StateUpdate::value(
            ROUTE_KEY,
            json!({"choice": route}),
        )))
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let Some(route) = self.route(&request.state) else {
            return Err(ModelError::new(
                ModelErrorKind::Rejected,
                format!("state key {ROUTE_KEY:?} names no route of ModelRouterMiddleware"),
            ));
        };
        let model = route.model.clone();
        next.run(request.with_model(model)).await
    }
}

#[cfg(test)]
mod tests {
    use keel_core::model::ModelProfile;
    use keel_testkit::ScriptedModel;

    use super::*;
    use crate::test_support::{agent, call};

    fn named(name: &str, answers: Vec<Message>) -> Arc<ScriptedModel> {
        Arc::new(ScriptedModel::new(answers).with_profile(ModelProfile::new(name, "scripted")))
    }

    #[tokio::test]
    async fn the_classifier_picks_the_model_for_every_call_of_the_run() {
        let classifier = named(
            "classifier",
            vec![call("r", ROUTE_TOOL, json!({"choice": "deep"}))],
        );
        let fast = named("fast", vec![]);
        let deep = named(
            "deep",
            vec![call("c", "echo", json!({})), Message::ai("thought hard")],
        );
        let main = named("main", vec![]);
        let router = ModelRouter::new(
            vec![
                Route {
                    name: "fast".into(),
                    model: fast.clone(),
                    criteria: "small talk".into(),
                },
                Route {
                    name: "deep".into(),
                    model: deep.clone(),
                    criteria: "hard questions".into(),
                },
            ],
            "Pick the model.",
            classifier.clone(),
        )
        .unwrap();
        let out = agent(&main, vec![Arc::new(router)])
            .invoke("t", vec![Message::human("prove it")])
            .await
            .unwrap();
        assert_eq!(out.last_message().unwrap().text(), "thought hard");
        assert_eq!((deep.calls(), fast.calls(), main.calls()), (2, 0, 0));
        assert_eq!(out.state.values[ROUTE_KEY], json!({"choice": "deep"}));
        let asked = &classifier.requests()[0];
        assert!(asked.internal);
        assert_eq!(
            asked.system.as_ref().unwrap().text(),
            "Pick the model.\n\nChoices:\n- fast: small talk\n- deep: hard questions"
        );
    }

    #[tokio::test]
    async fn an_unknown_choice_fails_the_run() {
        let classifier = named("classifier", vec![Message::ai("medium")]);
        let main = named("main", vec![]);
        let router = ModelRouter::new(
            vec![Route {
                name: "fast".into(),
                model: main.clone(),
                criteria: "x".into(),
            }],
            "Pick.",
            classifier,
        )
        .unwrap();
        let err = agent(&main, vec![Arc::new(router)])
            .invoke("t", vec![Message::human("hi")])
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("not one of the routes [\"fast\"]"),
            "{err}"
        );
        assert!(ModelRouter::new(Vec::new(), "x", main.clone()).is_err());
    }
}
