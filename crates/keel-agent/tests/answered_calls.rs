//! When `after_model` hooks answer every tool call of the AI message themselves, the
//! model is called again to read those answers (LangChain's `create_agent` routing);
//! and the build refuses stacks whose declared state keys or jumps conflict.

use std::sync::Arc;

use keel_agent::StackError;
use keel_agent::{Agent, BuildError};
use keel_core::access::StateAccess;
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::{HookOutcome, JumpTarget, Middleware, MiddlewareError, Runtime};
use keel_core::state::{AgentState, StateUpdate};
use keel_testkit::ScriptedModel;
use serde_json::json;

/// Answers every pending call with a refusal, in `after_model`.
struct AnswersCalls;

#[keel_core::middleware]
impl Middleware for AnswersCalls {
    fn name(&self) -> &str {
        "AnswersCalls"
    }
    async fn after_model(
        &self,
        state: &AgentState,
        _runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(last) = state.messages.last() else {
            return Ok(HookOutcome::proceed());
        };
        Ok(HookOutcome::update(StateUpdate::messages(
            last.tool_calls()
                .iter()
                .map(|c| Message::tool_error(c.id.clone(), "not allowed")),
        )))
    }
}

#[tokio::test]
async fn calls_answered_by_middleware_go_back_to_the_model() {
    let model = Arc::new(ScriptedModel::new([
        Message::ai("").with_tool_calls(vec![ToolCall::new("c1", "nope", json!({}))]),
        Message::ai("understood"),
    ]));
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(AnswersCalls)
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    assert_eq!(model.calls(), 2);
    assert_eq!(out.state.messages[2].text(), "not allowed");
    assert_eq!(out.last_message().unwrap().text(), "understood");
}

/// Declares what it is told; wraps the model call, its only hook.
struct Declares(&'static str, StateAccess, &'static [JumpTarget]);

#[keel_core::middleware]
impl Middleware for Declares {
    fn name(&self) -> &str {
        self.0
    }
    fn jump_targets(&self) -> &[JumpTarget] {
        self.2
    }
    fn state_access(&self) -> StateAccess {
        self.1.clone()
    }
    async fn wrap_model_call(
        &self,
        request: keel_core::middleware::ModelRequest,
        next: keel_core::middleware::Next<'_>,
    ) -> Result<keel_core::middleware::ModelResponse, keel_core::model::ModelError> {
        next.run(request).await
    }
}

#[test]
fn the_build_refuses_conflicting_declarations() {
    let model = Arc::new(ScriptedModel::new([]));
    let err = Agent::builder()
        .model(model.clone())
        .middleware(Declares("A", StateAccess::default().write("plan"), &[]))
        .middleware(Declares("B", StateAccess::default().write("plan"), &[]))
        .build()
        .unwrap_err();
    assert!(
        matches!(err, BuildError::Stack(StackError::SharedWrite { .. })),
        "{err}"
    );
    let err = Agent::builder()
        .model(model)
        .middleware(Declares(
            "Ender",
            StateAccess::default(),
            &[JumpTarget::End],
        ))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "middleware \"Ender\" declares jump targets [End], but none of its hooks can take them: jumps are honoured from before_agent, before_model and after_model (after_agent may only jump to End); declare one of those hooks or remove the targets"
    );
}
