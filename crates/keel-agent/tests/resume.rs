//! Pausing and resuming through the generic contract (`Middleware::resumable`): a
//! middleware that is not human in the loop pauses a run, and the agent finds the
//! pause, refuses an answer that does not fit, records one that does, and ends a pause,
//! without knowing which middleware paused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::sync::Arc;

use keel_agent::{Agent, AgentError};
use keel_core::access::StateAccess;
use keel_core::interrupt::{Pause, Resumable, ResumeRefused};
use keel_core::message::Message;
use keel_core::middleware::{HookOutcome, JumpTarget, Middleware, MiddlewareError, Runtime};
use keel_core::state::{AgentState, INTERRUPT_KEY, StateUpdate};
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};

/// Asks "go?" before the first model call and waits for `true` or `false`.
struct Confirm;

const CONFIRMED: &str = "confirmed";

#[keel_core::middleware]
impl Middleware for Confirm {
    fn name(&self) -> &str {
        "Confirm"
    }
    fn jump_targets(&self) -> &[JumpTarget] {
        &[JumpTarget::End]
    }
    fn state_access(&self) -> StateAccess {
        StateAccess::default().write(INTERRUPT_KEY).write(CONFIRMED)
    }
    async fn before_model(
        &self,
        state: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        match state.values.get(CONFIRMED) {
            Some(Value::Bool(true)) => Ok(HookOutcome::proceed()),
            Some(Value::Bool(false)) => Ok(HookOutcome::jump(JumpTarget::End)),
            _ => Ok(HookOutcome {
                update: StateUpdate::value(INTERRUPT_KEY, json!({"question": "go?"})),
                jump: Some(JumpTarget::End),
            }),
        }
    }
    fn resumable(&self) -> Option<&dyn Resumable> {
        Some(self)
    }
}

impl Resumable for Confirm {
    fn pause(&self, state: &AgentState) -> Option<Pause> {
        state
            .values
            .get(INTERRUPT_KEY)
            .filter(|v| !v.is_null())
            .map(|_| Pause {
                open_calls: Vec::new(),
                asks: "a yes or no".into(),
            })
    }
    fn resume_update(&self, _: &AgentState, resume: &Value) -> Result<StateUpdate, ResumeRefused> {
        let Value::Bool(yes) = resume else {
            return Err(ResumeRefused(format!(
                "resume must be true or false, not {resume}"
            )));
        };
        let mut update = StateUpdate::value(CONFIRMED, json!(yes));
        update.values.insert(INTERRUPT_KEY.into(), Value::Null);
        Ok(update)
    }
    fn resolve_update(&self, state: &AgentState) -> Option<StateUpdate> {
        self.pause(state)?;
        Some(StateUpdate::value(INTERRUPT_KEY, Value::Null))
    }
}

fn agent(calls: Arc<parking_lot::Mutex<usize>>) -> Agent {
    let model = ScriptedModel::from_fn(move |_| {
        *calls.lock() += 1;
        Ok(Message::ai("done"))
    });
    Agent::builder()
        .model(Arc::new(model))
        .middleware(Confirm)
        .build()
        .unwrap()
}

#[tokio::test]
async fn any_middleware_can_pause_and_the_agent_resumes_it_without_knowing_which() {
    let calls = Arc::new(parking_lot::Mutex::new(0));
    let agent = agent(calls.clone());
    assert_eq!(agent.resumable().map(|(name, _)| name), Some("Confirm"));
    // Nothing pending before the first run.
    assert!(agent.pause("t").await.unwrap().is_none());
    assert!(matches!(
        agent.record_resume("t", &json!(true)).await,
        Err(AgentError::NotPaused { .. })
    ));

    agent.invoke("t", vec![Message::human("hi")]).await.unwrap();
    assert_eq!(*calls.lock(), 0, "paused before the model");
    let pause = agent.pause("t").await.unwrap().unwrap();
    assert_eq!(pause.asks, "a yes or no");

    // An answer that does not fit is refused, and nothing is written.
    let head = agent.checkpointer().latest("t").await.unwrap().unwrap().seq;
    let err = agent.record_resume("t", &json!("maybe")).await.unwrap_err();
    assert!(
        matches!(&err, AgentError::ResumeRefused { source, .. } if source.0.contains("true or false")),
        "{err}"
    );
    assert_eq!(
        agent.checkpointer().latest("t").await.unwrap().unwrap().seq,
        head
    );

    // One that fits is recorded on the head, under the pausing middleware's name, and
    // the next run applies it.
    agent.record_resume("t", &json!(true)).await.unwrap();
    let recorded = agent.checkpointer().latest("t").await.unwrap().unwrap();
    assert_eq!(recorded.node, "Confirm.resume");
    assert_eq!(recorded.values.get(CONFIRMED), Some(&json!(true)));
    let out = agent.invoke("t", Vec::new()).await.unwrap();
    assert_eq!(*calls.lock(), 1);
    assert_eq!(out.state.messages.last().unwrap().text(), "done");
    assert!(agent.pause("t").await.unwrap().is_none());
}

#[tokio::test]
async fn resolving_a_pause_clears_it_without_running_anything() {
    let calls = Arc::new(parking_lot::Mutex::new(0));
    let agent = agent(calls.clone());
    agent.invoke("u", vec![Message::human("hi")]).await.unwrap();
    let update = agent.resolve_pause("u", "run-1").await.unwrap();
    assert_eq!(update.values.get(INTERRUPT_KEY), Some(&Value::Null));
    let head = agent.checkpointer().latest("u").await.unwrap().unwrap();
    assert_eq!(head.node, "Confirm.resolve");
    assert_eq!(head.run_id, "run-1");
    assert!(agent.pause("u").await.unwrap().is_none());
    assert_eq!(*calls.lock(), 0);
    // Nothing left to resolve.
    assert!(matches!(
        agent.resolve_pause("u", "run-2").await,
        Err(AgentError::NotPaused { .. })
    ));
}
