//! Hook order, jumps and hook skipping: the pipeline's contract, hook by hook.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::{Log, LoggingTool, ai_calls};
use futures::StreamExt;
use keel_agent::{Agent, AgentError, BuildError};
use keel_core::message::Message;
use keel_core::middleware::{
    HookOutcome, Hooks, JumpTarget, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next,
    Runtime, ToolCallRequest, ToolNext, from_fn,
};
use keel_core::model::ModelError;
use keel_core::state::{AgentState, StateUpdate};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_core::tool::ToolError;
use keel_testkit::ScriptedModel;

/// Logs every hook as `<name>.<hook>`.
struct Recorder {
    name: &'static str,
    log: Log,
}

#[async_trait]
impl Middleware for Recorder {
    fn name(&self) -> &str {
        self.name
    }
    async fn before_agent(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.log.push(format!("{}.before_agent", self.name));
        Ok(HookOutcome::proceed())
    }
    async fn before_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.log.push(format!("{}.before_model", self.name));
        Ok(HookOutcome::proceed())
    }
    async fn wrap_model_call(
        &self,
        r: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        self.log.push(format!("{}.wrap_model_call", self.name));
        next.run(r).await
    }
    async fn after_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.log.push(format!("{}.after_model", self.name));
        Ok(HookOutcome::proceed())
    }
    async fn wrap_tool_call(
        &self,
        r: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        self.log.push(format!("{}.wrap_tool_call", self.name));
        next.run(r).await
    }
    async fn after_agent(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.log.push(format!("{}.after_agent", self.name));
        Ok(HookOutcome::proceed())
    }
}

fn logging_model(log: &Log, answers: Vec<Message>) -> Arc<ScriptedModel> {
    let log = log.clone();
    let answers = parking_lot::Mutex::new(std::collections::VecDeque::from(answers));
    Arc::new(ScriptedModel::from_fn(move |_| {
        log.push("model");
        answers.lock().pop_front().ok_or_else(|| {
            ModelError::new(
                keel_core::model::ModelErrorKind::InvalidRequest,
                "no answer left",
            )
        })
    }))
}

#[tokio::test]
async fn hook_order_matches_langchain_v1() {
    let log = Log::default();
    let model = logging_model(
        &log,
        vec![ai_calls(&[("c1", "lookup")]), Message::ai("done")],
    );
    let agent = Agent::builder()
        .model(model.clone())
        .tool(LoggingTool::new("lookup", log.clone()))
        .middleware(Recorder {
            name: "A",
            log: log.clone(),
        })
        .middleware(Recorder {
            name: "B",
            log: log.clone(),
        })
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    assert_eq!(
        log.take(),
        [
            "A.before_agent",
            "B.before_agent",
            "A.before_model",
            "B.before_model",
            "A.wrap_model_call",
            "B.wrap_model_call",
            "model",
            "B.after_model",
            "A.after_model",
            "A.wrap_tool_call",
            "B.wrap_tool_call",
            "tool",
            "A.before_model",
            "B.before_model",
            "A.wrap_model_call",
            "B.wrap_model_call",
            "model",
            "B.after_model",
            "A.after_model",
            "B.after_agent",
            "A.after_agent",
        ]
    );
    let roles: Vec<_> = out
        .state
        .messages
        .iter()
        .map(|m| m.role().as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(out.last_message().unwrap().text(), "done");
    assert_eq!(out.model_steps, 2);
}

/// Implements `before_model` only, without the attribute: its `hooks()` is `Hooks::ALL`.
struct Plain(Log);

#[async_trait]
impl Middleware for Plain {
    fn name(&self) -> &str {
        "Plain"
    }
    async fn before_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.0.push("Plain.before_model");
        Ok(HookOutcome::proceed())
    }
}

/// Implements `before_model` only, with the attribute: its `hooks()` is that hook.
struct Derived(Log);

#[keel_core::middleware]
impl Middleware for Derived {
    fn name(&self) -> &str {
        "Derived"
    }
    async fn before_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.0.push("Derived.before_model");
        Ok(HookOutcome::proceed())
    }
}

#[tokio::test]
async fn the_attribute_skips_the_hooks_a_block_leaves_out_and_only_those() {
    let log = Log::default();
    assert_eq!(Plain(log.clone()).hooks(), Hooks::ALL);
    let h = Derived(log.clone()).hooks();
    assert!(h.before_model());
    assert!(!h.before_agent() && !h.wrap_model_call() && !h.after_model());
    assert!(!h.wrap_tool_call() && !h.after_agent());

    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([Message::ai("hi")])))
        .middleware(Plain(log.clone()))
        .middleware(Derived(log.clone()))
        .build()
        .unwrap();
    // `tasks` mode announces every node hook the agent calls, defaults included.
    let called: Vec<String> = agent
        .stream("t", vec![Message::human("x")], &[StreamMode::Tasks])
        .filter_map(|e| async move {
            match e {
                StreamEvent::TaskStart { node, .. } if node != "model" => Some(node),
                _ => None,
            }
        })
        .collect()
        .await;
    assert_eq!(
        called,
        [
            "Plain.before_agent",
            "Plain.before_model",
            "Derived.before_model",
            "Plain.after_model",
            "Plain.after_agent",
        ],
        "without the attribute every hook is called; with it, only the one it defines"
    );
    assert_eq!(log.take(), ["Plain.before_model", "Derived.before_model"]);
}

/// Declares and implements `before_model` only.
struct BeforeModelOnly(Log);

#[keel_core::middleware]
impl Middleware for BeforeModelOnly {
    fn name(&self) -> &str {
        "BeforeModelOnly"
    }
    async fn before_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.0.push("before_model");
        Ok(HookOutcome::proceed())
    }
}

#[tokio::test]
async fn a_middleware_declaring_what_it_implements_runs_only_those_hooks() {
    let log = Log::default();
    let agent = Agent::builder()
        .model(Arc::new(ScriptedModel::new([Message::ai("hi")])))
        .middleware(BeforeModelOnly(log.clone()))
        .build()
        .unwrap();
    assert!(
        log.take().is_empty(),
        "building runs no hook of a correct middleware"
    );
    agent.invoke("t", vec![Message::human("x")]).await.unwrap();
    assert_eq!(log.take(), ["before_model"]);
}

/// Jumps from `before_model`, declaring `declared`.
struct Jumper {
    name: &'static str,
    target: JumpTarget,
    declared: Vec<JumpTarget>,
    log: Log,
}

#[keel_core::middleware]
impl Middleware for Jumper {
    fn name(&self) -> &str {
        self.name
    }
    fn jump_targets(&self) -> &[JumpTarget] {
        &self.declared
    }
    async fn before_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        Ok(HookOutcome {
            update: StateUpdate::value("jumped", serde_json::json!(true)),
            jump: Some(self.target),
        })
    }
    async fn after_agent(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.log.push(format!("{}.after_agent", self.name));
        Ok(HookOutcome::proceed())
    }
}

#[tokio::test]
async fn before_model_jump_to_end_stops_the_run_and_after_agent_still_runs() {
    let log = Log::default();
    let model = Arc::new(ScriptedModel::new([Message::ai("never")]));
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(Jumper {
            name: "Guard",
            target: JumpTarget::End,
            declared: vec![JumpTarget::End],
            log: log.clone(),
        })
        .middleware(Recorder {
            name: "Inner",
            log: log.clone(),
        })
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("x")]).await.unwrap();
    assert_eq!(model.calls(), 0, "the model is never called");
    assert_eq!(out.state.messages.len(), 1);
    assert_eq!(
        out.state.get::<bool>("jumped"),
        Some(true),
        "the jumping hook's update is applied"
    );
    // The jump skips the rest of before_model (Inner's) and goes straight to after_agent.
    assert_eq!(
        log.take(),
        [
            "Inner.before_agent",
            "Inner.after_agent",
            "Guard.after_agent"
        ]
    );
}

#[tokio::test]
async fn undeclared_jump_is_a_clear_error() {
    let model = Arc::new(ScriptedModel::new([Message::ai("never")]));
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(Jumper {
            name: "Rogue",
            target: JumpTarget::End,
            declared: vec![JumpTarget::Model],
            log: Log::default(),
        })
        .build()
        .unwrap();
    let err = agent
        .invoke("t", vec![Message::human("x")])
        .await
        .unwrap_err();
    match &err {
        AgentError::UndeclaredJump {
            middleware,
            hook,
            target,
            declared,
        } => {
            assert_eq!(middleware, "Rogue");
            assert_eq!(*hook, "before_model");
            assert_eq!(*target, JumpTarget::End);
            assert_eq!(declared, &[JumpTarget::Model]);
        }
        other => panic!("expected UndeclaredJump, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("Rogue") && text.contains("before_model") && text.contains("End"),
        "{text}"
    );
    assert_eq!(model.calls(), 0);
}

#[tokio::test]
async fn jump_to_model_from_after_model_calls_the_model_again() {
    struct Again;
    #[keel_core::middleware]
    impl Middleware for Again {
        fn name(&self) -> &str {
            "Again"
        }
        fn jump_targets(&self) -> &[JumpTarget] {
            &[JumpTarget::Model]
        }
        async fn after_model(
            &self,
            s: &AgentState,
            _: &Runtime,
        ) -> Result<HookOutcome, MiddlewareError> {
            // Ask once more until there are two answers.
            if s.messages.iter().filter(|m| m.is_ai()).count() < 2 {
                Ok(HookOutcome::jump(JumpTarget::Model))
            } else {
                Ok(HookOutcome::proceed())
            }
        }
    }
    let model = Arc::new(ScriptedModel::new([Message::ai("one"), Message::ai("two")]));
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(Again)
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("x")]).await.unwrap();
    assert_eq!(model.calls(), 2);
    assert_eq!(out.last_message().unwrap().text(), "two");
}

#[test]
fn duplicate_middleware_names_are_a_construction_error() {
    let log = Log::default();
    let err = Agent::builder()
        .model(Arc::new(ScriptedModel::new([])))
        .middleware(Recorder {
            name: "A",
            log: log.clone(),
        })
        .middleware(Recorder {
            name: "B",
            log: log.clone(),
        })
        .middleware(Recorder { name: "A", log })
        .build()
        .unwrap_err();
    match err {
        BuildError::DuplicateMiddleware {
            name,
            first,
            second,
        } => {
            assert_eq!((name.as_str(), first, second), ("A", 0, 2));
        }
        other => panic!("expected DuplicateMiddleware, got {other:?}"),
    }
}

#[test]
fn zero_recursion_limit_and_missing_model_are_rejected() {
    let err = Agent::builder()
        .model(Arc::new(ScriptedModel::new([])))
        .recursion_limit(0)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        BuildError::InvalidRecursionLimit { value: 0 }
    ));
    assert!(matches!(
        Agent::builder().build().unwrap_err(),
        BuildError::MissingModel
    ));
}

/// A node-hook closure logging `C.<hook>`.
fn logging_node(
    log: &Log,
    hook: &'static str,
) -> impl for<'a> Fn(&'a AgentState, &'a Runtime) -> from_fn::NodeFuture<'a> + Send + Sync + use<> {
    let log = log.clone();
    move |_, _| {
        log.push(format!("C.{hook}"));
        Box::pin(async { Ok(HookOutcome::proceed()) })
    }
}

#[tokio::test]
async fn closure_middleware_run_at_their_hooks_in_stack_order() {
    let log = Log::default();
    let model = logging_model(
        &log,
        vec![ai_calls(&[("c1", "lookup")]), Message::ai("done")],
    );
    let (outer, wrap, tool) = (log.clone(), log.clone(), log.clone());
    let agent = Agent::builder()
        .model(model.clone())
        .tool(LoggingTool::new("lookup", log.clone()))
        // A closure, a struct with every hook, then one closure per hook.
        .middleware(from_fn::wrap_model("Outer", move |request, next| {
            outer.push("Outer.wrap_model_call");
            Box::pin(next.run(request))
        }))
        .middleware(Recorder {
            name: "A",
            log: log.clone(),
        })
        .middleware(from_fn::before_agent(
            "c1",
            logging_node(&log, "before_agent"),
        ))
        .middleware(from_fn::before_model(
            "c2",
            logging_node(&log, "before_model"),
        ))
        .middleware(from_fn::wrap_model("c3", move |request, next| {
            let log = wrap.clone();
            Box::pin(async move {
                log.push("C.wrap_model_call");
                next.run(request).await
            })
        }))
        .middleware(from_fn::after_model(
            "c4",
            logging_node(&log, "after_model"),
        ))
        .middleware(from_fn::wrap_tool("c5", move |request, next| {
            let log = tool.clone();
            Box::pin(async move {
                log.push("C.wrap_tool_call");
                next.run(request).await
            })
        }))
        .middleware(from_fn::after_agent(
            "c6",
            logging_node(&log, "after_agent"),
        ))
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    assert_eq!(
        log.take(),
        [
            "A.before_agent",
            "C.before_agent",
            "A.before_model",
            "C.before_model",
            "Outer.wrap_model_call",
            "A.wrap_model_call",
            "C.wrap_model_call",
            "model",
            "C.after_model",
            "A.after_model",
            "A.wrap_tool_call",
            "C.wrap_tool_call",
            "tool",
            "A.before_model",
            "C.before_model",
            "Outer.wrap_model_call",
            "A.wrap_model_call",
            "C.wrap_model_call",
            "model",
            "C.after_model",
            "A.after_model",
            "C.after_agent",
            "A.after_agent",
        ]
    );
    assert_eq!(out.last_message().unwrap().text(), "done");
}

#[tokio::test]
async fn a_closure_node_hook_may_jump_where_it_declares() {
    let log = Log::default();
    let model = logging_model(&log, vec![Message::ai("never")]);
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(
            from_fn::before_model("Stop", |_, _| {
                Box::pin(async {
                    Ok(HookOutcome {
                        update: StateUpdate::messages([Message::ai("stopped")]),
                        jump: Some(JumpTarget::End),
                    })
                })
            })
            .with_jump_targets([JumpTarget::End]),
        )
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    assert_eq!(out.last_message().unwrap().text(), "stopped");
    assert!(log.take().is_empty(), "the model was never called");
}
