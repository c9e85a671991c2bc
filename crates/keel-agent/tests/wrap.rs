//! `wrap_model_call` semantics: retry, short-circuit, discarded updates.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use keel_agent::{Agent, AgentError};
use keel_core::message::Message;
use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use keel_core::model::{ModelError, ModelErrorKind};
use keel_core::state::StateUpdate;
use keel_testkit::ScriptedModel;
use serde_json::json;

/// Calls `next` twice and keeps only the second answer.
struct RetryOnce;

#[keel_core::middleware]
impl Middleware for RetryOnce {
    fn name(&self) -> &str {
        "RetryOnce"
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let _discarded = next.clone().run(request.clone()).await?;
        next.run(request).await
    }
}

/// Inside the retry: tags each attempt's response with an update.
struct TagAttempt(AtomicU64);

#[keel_core::middleware]
impl Middleware for TagAttempt {
    fn name(&self) -> &str {
        "TagAttempt"
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let attempt = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        let mut response = next.run(request).await?;
        response.update.merge(StateUpdate::value(
            format!("attempt_{attempt}"),
            json!(attempt),
        ));
        Ok(response)
    }
}

#[tokio::test]
async fn retry_calls_next_twice_and_only_the_second_answer_lands() {
    let model = Arc::new(ScriptedModel::new([
        Message::ai("first"),
        Message::ai("second"),
    ]));
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(RetryOnce)
        .middleware(TagAttempt(AtomicU64::new(0)))
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("q")]).await.unwrap();
    assert_eq!(model.calls(), 2);
    let texts: Vec<_> = out
        .state
        .messages
        .iter()
        .map(|m| m.text().into_owned())
        .collect();
    assert_eq!(texts, ["q", "second"]);
    // The first attempt's update was returned to RetryOnce, which dropped it.
    assert_eq!(out.state.get::<u64>("attempt_2"), Some(2));
    assert!(!out.state.values.contains_key("attempt_1"));
}

/// Answers from a cache without calling `next`.
struct Cached;

#[keel_core::middleware]
impl Middleware for Cached {
    fn name(&self) -> &str {
        "Cached"
    }
    async fn wrap_model_call(
        &self,
        _request: ModelRequest,
        _next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        Ok(ModelResponse::new(Message::ai("from cache")))
    }
}

#[tokio::test]
async fn short_circuit_never_reaches_the_model() {
    let model = Arc::new(ScriptedModel::new([]));
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(Cached)
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("q")]).await.unwrap();
    assert_eq!(model.calls(), 0);
    assert_eq!(out.last_message().unwrap().text(), "from cache");
}

/// Falls back to a second model when the first fails with a retryable error.
struct Fallback(Arc<ScriptedModel>);

#[keel_core::middleware]
impl Middleware for Fallback {
    fn name(&self) -> &str {
        "Fallback"
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        match next.clone().run(request.clone()).await {
            Err(e) if e.is_retryable() => next.run(request.with_model(self.0.clone())).await,
            other => other,
        }
    }
}

#[tokio::test]
async fn fallback_model_answers_and_request_is_unchanged_for_the_original() {
    let primary = Arc::new(ScriptedModel::with_results([Err(ModelError::new(
        ModelErrorKind::Server,
        "503",
    ))]));
    let backup = Arc::new(ScriptedModel::new([Message::ai("backup answer")]));
    let agent = Agent::builder()
        .model(primary.clone())
        .system_prompt("sys")
        .middleware(Fallback(backup.clone()))
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("q")]).await.unwrap();
    assert_eq!(out.last_message().unwrap().text(), "backup answer");
    assert_eq!(primary.calls(), 1);
    assert_eq!(
        backup.requests()[0].messages,
        primary.requests()[0].messages
    );
    assert_eq!(backup.requests()[0].system.as_ref().unwrap().text(), "sys");
    let md = &out
        .last_message()
        .unwrap()
        .as_ai()
        .unwrap()
        .response_metadata;
    assert_eq!(md["provider"], json!("scripted"));
}

#[tokio::test]
async fn a_model_error_ends_the_run_with_a_typed_error() {
    let model = Arc::new(ScriptedModel::with_results([Err(ModelError::new(
        ModelErrorKind::Authentication,
        "bad key",
    ))]));
    let agent = Agent::builder().model(model).build().unwrap();
    let err = agent
        .invoke("t", vec![Message::human("q")])
        .await
        .unwrap_err();
    match err {
        AgentError::Model { call_index, source } => {
            assert_eq!(call_index, 0);
            assert_eq!(source.kind, ModelErrorKind::Authentication);
        }
        other => panic!("expected a model error, got {other:?}"),
    }
}
