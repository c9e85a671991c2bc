use std::sync::Arc;

use keel_agent::{AgentError, RunOutput};
use keel_core::message::Message;
use keel_core::model::{ModelError, ModelErrorKind};
use keel_testkit::ScriptedModel;

use super::*;
use crate::test_support::agent;

fn instant(max_retries: u32) -> Backoff {
    Backoff {
        max_retries,
        initial_delay: 0.0,
        ..Backoff::default()
    }
}

fn server(msg: &str) -> ModelError {
    ModelError::new(ModelErrorKind::Server, msg)
}

/// Retries of the default failure kinds with no delay.
fn instant_retry(max_retries: u32, on_failure: ModelFailure) -> ModelRetry {
    ModelRetry::new(instant(max_retries), DEFAULT_RETRY_ON.to_vec(), on_failure).unwrap()
}

/// One run of an agent on `model` with `retry`, from a user's "hi".
async fn run(model: &Arc<ScriptedModel>, retry: ModelRetry) -> Result<RunOutput, AgentError> {
    agent(model, vec![Arc::new(retry)])
        .invoke("t", vec![Message::human("hi")])
        .await
}

#[tokio::test]
async fn transient_failures_are_retried_until_an_answer() {
    let model = Arc::new(ScriptedModel::with_results([
        Err(server("502")),
        Err(server("503")),
        Ok(Message::ai("fine")),
    ]));
    let retry = instant_retry(2, ModelFailure::Continue);
    let out = run(&model, retry).await.unwrap();
    assert_eq!(model.calls(), 3);
    assert_eq!(out.last_message().unwrap().text(), "fine");
}

#[tokio::test]
async fn exhausted_retries_continue_with_langchains_message() {
    let model = Arc::new(ScriptedModel::with_results(
        (0..3).map(|_| Err(server("down"))),
    ));
    let retry = instant_retry(2, ModelFailure::Continue);
    let out = run(&model, retry).await.unwrap();
    assert_eq!(model.calls(), 3);
    assert_eq!(
        out.last_message().unwrap().text(),
        "Model call failed after 3 attempts with ModelAPIError: down"
    );
}

#[tokio::test]
async fn zero_retries_says_one_attempt_and_error_returns_the_error() {
    let model = Arc::new(ScriptedModel::with_results([Err(server("x"))]));
    let retry = instant_retry(0, ModelFailure::Continue);
    let out = run(&model, retry).await.unwrap();
    assert_eq!(
        out.last_message().unwrap().text(),
        "Model call failed after 1 attempt with ModelAPIError: x"
    );

    let model = Arc::new(ScriptedModel::with_results([
        Err(server("a")),
        Err(server("b")),
    ]));
    let retry = instant_retry(1, ModelFailure::Error);
    let err = run(&model, retry).await.unwrap_err();
    assert!(
        matches!(err, AgentError::Model { ref source, .. } if source.message == "b"),
        "{err}"
    );
}

#[tokio::test]
async fn kinds_outside_retry_on_fail_at_once() {
    let model = Arc::new(ScriptedModel::with_results([
        Err(ModelError::new(ModelErrorKind::Authentication, "bad key")),
        Ok(Message::ai("never")),
    ]));
    let retry = instant_retry(3, ModelFailure::Continue);
    let err = run(&model, retry).await.unwrap_err();
    assert!(matches!(err, AgentError::Model { .. }));
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn a_custom_failure_message_is_used() {
    let model = Arc::new(ScriptedModel::with_results([Err(server("x"))]));
    let retry = instant_retry(
        0,
        ModelFailure::Message(Arc::new(|e| format!("sorry ({})", e.message))),
    );
    let out = run(&model, retry).await.unwrap();
    assert_eq!(out.last_message().unwrap().text(), "sorry (x)");
}

#[tokio::test(start_paused = true)]
async fn backoff_waits_between_attempts() {
    let model = Arc::new(ScriptedModel::with_results([
        Err(server("x")),
        Ok(Message::ai("ok")),
    ]));
    let retry = ModelRetry::new(
        Backoff {
            max_retries: 1,
            initial_delay: 5.0,
            jitter: false,
            ..Backoff::default()
        },
        DEFAULT_RETRY_ON.to_vec(),
        ModelFailure::Continue,
    )
    .unwrap();
    let start = tokio::time::Instant::now();
    run(&model, retry).await.unwrap();
    assert_eq!(start.elapsed().as_secs(), 5);
}
