//! `ModelFallback`: when the model call fails, tries other models in order (LangChain's
//! `ModelFallbackMiddleware`).
//!
//! The request goes to the agent's model first; on failure, to each fallback in turn
//! with the same request; the first answer wins, and when all fail the last error is
//! returned. A [`ModelErrorKind::Rejected`] failure (a middleware or the agent refused
//! the call: Keel's counterpart of LangGraph's interrupts and other control-flow
//! signals, which LangChain re-raises) is never swallowed: it is returned at once.

mod entry;

pub(crate) use entry::Entry;

use std::sync::Arc;

use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use keel_core::model::{ChatModel, ModelError, ModelErrorKind};
use serde_json::json;

use crate::error::ConfigError;
use crate::events;

/// Falls back to other models. See the [module docs](self).
#[derive(Clone)]
pub struct ModelFallback {
    models: Vec<Arc<dyn ChatModel>>,
}

impl std::fmt::Debug for ModelFallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .models
            .iter()
            .map(|m| m.profile().name.as_str())
            .collect();
        f.debug_struct("ModelFallback")
            .field("models", &names)
            .finish()
    }
}

impl ModelFallback {
    /// Fallbacks in the order they are tried; at least one.
    pub fn new(models: Vec<Arc<dyn ChatModel>>) -> Result<Self, ConfigError> {
        if models.is_empty() {
            return Err(ConfigError::new(
                "model_fallback",
                "models",
                "[]",
                "no fallback model",
                "a list of one or more model names",
            ));
        }
        Ok(ModelFallback { models })
    }
}

#[keel_core::middleware]
impl Middleware for ModelFallback {
    fn name(&self) -> &str {
        "ModelFallbackMiddleware"
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let mut last = match next.clone().run(request.clone()).await {
            Ok(response) => return Ok(response),
            Err(e) if e.kind == ModelErrorKind::Rejected => return Err(e),
            Err(e) => e,
        };
        for (i, model) in self.models.iter().enumerate() {
            events::counter(
                &request.runtime.writer,
                self.name(),
                "fallbacks",
                1,
                json!({"to": model.profile().name, "position": i, "after": last.message}),
            );
            match next.clone().run(request.with_model(model.clone())).await {
                Ok(response) => return Ok(response),
                Err(e) if e.kind == ModelErrorKind::Rejected => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use keel_agent::AgentError;
    use keel_core::message::Message;
    use keel_core::model::ModelProfile;
    use keel_testkit::ScriptedModel;

    use super::*;
    use crate::test_support::agent;

    fn named(name: &str, answers: Vec<Result<Message, ModelError>>) -> Arc<ScriptedModel> {
        Arc::new(
            ScriptedModel::with_results(answers).with_profile(ModelProfile::new(name, "scripted")),
        )
    }

    fn down() -> ModelError {
        ModelError::new(ModelErrorKind::Server, "down")
    }

    #[tokio::test]
    async fn the_first_model_that_answers_wins_in_order() {
        let primary = named("primary", vec![Err(down())]);
        let second = named("second", vec![Err(down())]);
        let third = named("third", vec![Ok(Message::ai("from third"))]);
        let fb = ModelFallback::new(vec![second.clone(), third.clone()]).unwrap();
        let out = agent(&primary, vec![Arc::new(fb)])
            .invoke("t", vec![Message::human("hi")])
            .await
            .unwrap();
        assert_eq!(out.last_message().unwrap().text(), "from third");
        assert_eq!((primary.calls(), second.calls(), third.calls()), (1, 1, 1));
        // The same request went to every model.
        assert_eq!(primary.requests()[0].messages, third.requests()[0].messages);
    }

    #[tokio::test]
    async fn all_failing_returns_the_last_error_and_rejections_pass_through() {
        let primary = named("primary", vec![Err(down())]);
        let second = named(
            "second",
            vec![Err(ModelError::new(ModelErrorKind::Timeout, "slow"))],
        );
        let fb = ModelFallback::new(vec![second]).unwrap();
        let err = agent(&primary, vec![Arc::new(fb)])
            .invoke("t", vec![Message::human("hi")])
            .await
            .unwrap_err();
        assert!(matches!(err, AgentError::Model { ref source, .. } if source.message == "slow"));

        let primary = named(
            "primary",
            vec![Err(ModelError::new(ModelErrorKind::Rejected, "interrupt"))],
        );
        let second = named("second", vec![Ok(Message::ai("never"))]);
        let fb = ModelFallback::new(vec![second.clone()]).unwrap();
        let err = agent(&primary, vec![Arc::new(fb)])
            .invoke("t", vec![Message::human("hi")])
            .await
            .unwrap_err();
        assert!(
            matches!(err, AgentError::Model { ref source, .. } if source.message == "interrupt")
        );
        assert_eq!(second.calls(), 0);
    }

    #[test]
    fn at_least_one_fallback() {
        assert!(ModelFallback::new(Vec::new()).is_err());
    }
}
