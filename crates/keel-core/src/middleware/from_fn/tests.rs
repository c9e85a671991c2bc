use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::*;
use crate::middleware::{ModelHandler, ToolHandler};
use crate::model::ModelProfile;

/// A shared, ordered log.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, s: impl Into<String>) {
        self.0.lock().push(s.into());
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// A model the requests name; the terminal answers instead, so it is never asked.
struct Silent(ModelProfile);

#[async_trait]
impl crate::model::ChatModel for Silent {
    fn profile(&self) -> &ModelProfile {
        &self.0
    }
    async fn invoke(&self, _: crate::model::ChatRequest<'_>) -> Result<Message, ModelError> {
        Ok(Message::ai(""))
    }
}

/// A model request with no messages, for calling hooks directly.
fn model_request(state: &Arc<AgentState>, runtime: &Runtime) -> ModelRequest {
    ModelRequest {
        messages: Arc::new(Vec::new()),
        system: None,
        tools: Arc::new(Vec::new()),
        tool_choice: None,
        settings: Default::default(),
        model: Arc::new(Silent(ModelProfile::new("silent", "test"))),
        state: state.clone(),
        runtime: runtime.clone(),
    }
}

/// A call of tool "t", for calling hooks directly.
fn tool_request(state: &Arc<AgentState>, runtime: &Runtime) -> ToolCallRequest {
    ToolCallRequest {
        call: crate::message::ToolCall::new("c", "t", serde_json::Value::Null),
        tool: None,
        state: state.clone(),
        runtime: runtime.clone(),
    }
}

/// The hooks `m` declares, and the hooks whose closure ran when all six were called.
async fn declared_and_run<M: Middleware>(log: &Log, m: M) -> (Vec<&'static str>, Vec<String>) {
    let h = m.hooks();
    let declared = [
        ("before_agent", h.before_agent()),
        ("before_model", h.before_model()),
        ("wrap_model_call", h.wrap_model_call()),
        ("after_model", h.after_model()),
        ("wrap_tool_call", h.wrap_tool_call()),
        ("after_agent", h.after_agent()),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    log.take();
    let state = Arc::new(AgentState::default());
    let runtime = Runtime::detached("t");
    let terminal = Terminal(Log::default());
    m.before_agent(&state, &runtime).await.unwrap();
    m.before_model(&state, &runtime).await.unwrap();
    let next = Next::new(&[], &terminal);
    m.wrap_model_call(model_request(&state, &runtime), next)
        .await
        .unwrap();
    m.after_model(&state, &runtime).await.unwrap();
    let next = ToolNext::new(&[], &terminal);
    m.wrap_tool_call(tool_request(&state, &runtime), next)
        .await
        .unwrap();
    m.after_agent(&state, &runtime).await.unwrap();
    (declared, log.take())
}

fn node(
    log: &Log,
    tag: &'static str,
) -> impl for<'a> Fn(&'a AgentState, &'a Runtime) -> NodeFuture<'a> + Send + Sync + use<> {
    let log = log.clone();
    move |state, runtime| {
        let log = log.clone();
        Box::pin(async move {
            log.push(format!(
                "{tag} {} {}",
                state.messages.len(),
                runtime.thread_id
            ));
            Ok(HookOutcome::proceed())
        })
    }
}

/// A wrap closure that logs `tag` and passes the call on.
macro_rules! logging_wrap {
    ($ctor:ident, $log:expr, $tag:literal) => {{
        let log = $log.clone();
        $ctor("w", move |r, next| {
            log.push($tag);
            Box::pin(next.run(r))
        })
    }};
}

#[tokio::test]
async fn each_declares_exactly_the_hook_its_closure_runs_at() {
    let log = Log::default();
    let cases = [
        declared_and_run(&log, before_agent("a", node(&log, "before_agent"))).await,
        declared_and_run(&log, before_model("b", node(&log, "before_model"))).await,
        declared_and_run(&log, logging_wrap!(wrap_model, log, "wrap_model_call")).await,
        declared_and_run(&log, after_model("d", node(&log, "after_model"))).await,
        declared_and_run(&log, logging_wrap!(wrap_tool, log, "wrap_tool_call")).await,
        declared_and_run(&log, after_agent("f", node(&log, "after_agent"))).await,
    ];
    let expected = [
        "before_agent",
        "before_model",
        "wrap_model_call",
        "after_model",
        "wrap_tool_call",
        "after_agent",
    ];
    for ((declared, ran), hook) in cases.into_iter().zip(expected) {
        assert_eq!(declared, [hook]);
        let ran: Vec<_> = ran
            .iter()
            .map(|l| l.split(' ').next().unwrap_or(""))
            .collect();
        assert_eq!(ran, [hook]);
    }
}

#[tokio::test]
async fn node_closures_run_at_their_hook_with_its_arguments() {
    let log = Log::default();
    let state = AgentState::with_messages(vec![Message::human("hi"), Message::ai("hello")]);
    let runtime = Runtime::detached("thread-7");
    let stack: Vec<Arc<dyn Middleware>> = vec![
        Arc::new(before_agent("a", node(&log, "before_agent"))),
        Arc::new(before_model("b", node(&log, "before_model"))),
        Arc::new(after_model("c", node(&log, "after_model"))),
        Arc::new(after_agent("d", node(&log, "after_agent"))),
    ];
    for m in &stack {
        // Called as the agent calls them: the declared hook only.
        let h = m.hooks();
        if h.before_agent() {
            m.before_agent(&state, &runtime).await.unwrap();
        }
        if h.before_model() {
            m.before_model(&state, &runtime).await.unwrap();
        }
        if h.after_model() {
            m.after_model(&state, &runtime).await.unwrap();
        }
        if h.after_agent() {
            m.after_agent(&state, &runtime).await.unwrap();
        }
    }
    assert_eq!(
        log.take(),
        [
            "before_agent 2 thread-7",
            "before_model 2 thread-7",
            "after_model 2 thread-7",
            "after_agent 2 thread-7",
        ]
    );
}

#[tokio::test]
async fn a_node_closures_outcome_and_jumps_are_its_own() {
    let m = before_model("Stop", |state, _| {
        Box::pin(async move {
            Ok(HookOutcome {
                update: crate::state::StateUpdate::value(
                    "seen",
                    serde_json::json!(state.messages.len()),
                ),
                jump: Some(JumpTarget::End),
            })
        })
    })
    .with_jump_targets([JumpTarget::End])
    .with_state_access(StateAccess::default().write("seen"));
    assert_eq!(m.jump_targets(), [JumpTarget::End]);
    assert_eq!(m.state_access().writes, ["seen"]);
    let state = AgentState::with_messages(vec![Message::human("hi")]);
    let out = m
        .before_model(&state, &Runtime::detached("t"))
        .await
        .unwrap();
    assert_eq!(out.jump, Some(JumpTarget::End));
    assert_eq!(out.update.values["seen"], serde_json::json!(1));

    let failing = after_agent("Fails", |_, _| {
        Box::pin(async {
            Err(MiddlewareError {
                middleware: "Fails".into(),
                hook: "after_agent",
                message: "no".into(),
            })
        })
    });
    let err = failing
        .after_agent(&state, &Runtime::detached("t"))
        .await
        .unwrap_err();
    assert_eq!(err.message, "no");
}

/// A struct middleware around the model call, for the mixed stacks.
struct Struct(&'static str, Log);

#[keel_core::middleware]
impl Middleware for Struct {
    fn name(&self) -> &str {
        self.0
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        self.1.push(format!("{} >", self.0));
        let out = next.run(request).await;
        self.1.push(format!("{} <", self.0));
        out
    }
    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        self.1.push(format!("{} >", self.0));
        let out = next.run(request).await;
        self.1.push(format!("{} <", self.0));
        out
    }
}

/// The model and the tool at the end of the chains: log, answer with what they got.
struct Terminal(Log);

#[async_trait]
impl ModelHandler for Terminal {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        self.0.push("model");
        Ok(ModelResponse::new(Message::ai(format!(
            "{} message(s) at {:?}",
            request.messages.len(),
            request.settings.temperature
        ))))
    }
}

#[async_trait]
impl ToolHandler for Terminal {
    async fn call(&self, request: ToolCallRequest) -> Result<Message, ToolError> {
        self.0.push("tool");
        Ok(Message::tool(request.call.id, request.call.name))
    }
}

#[tokio::test]
async fn a_stack_mixing_closures_and_structs_nests_in_order() {
    let log = Log::default();
    let (l1, l2) = (log.clone(), log.clone());
    let chain: Vec<Arc<dyn Middleware>> = vec![
        Arc::new(wrap_model("Temperature", move |mut request, next| {
            let log = l1.clone();
            Box::pin(async move {
                log.push("Temperature >");
                request.settings.temperature = Some(0.2);
                let out = next.run(request).await;
                log.push("Temperature <");
                out
            })
        })),
        Arc::new(Struct("Struct", log.clone())),
        Arc::new(wrap_model("LastOne", move |request, next| {
            let log = l2.clone();
            Box::pin(async move {
                log.push("LastOne >");
                let skip = request.messages.len().saturating_sub(1);
                let recent = request.messages[skip..].to_vec();
                let out = next.run(request.with_messages(recent)).await;
                log.push("LastOne <");
                out
            })
        })),
    ];
    let state = Arc::new(AgentState::default());
    let runtime = Runtime::detached("t");
    let request = model_request(&state, &runtime)
        .with_messages(vec![Message::human("a"), Message::human("b")]);
    let terminal = Terminal(log.clone());
    let out = Next::new(&chain, &terminal).run(request).await.unwrap();
    assert_eq!(out.message.text(), "1 message(s) at Some(0.2)");
    assert_eq!(
        log.take(),
        [
            "Temperature >",
            "Struct >",
            "LastOne >",
            "model",
            "LastOne <",
            "Struct <",
            "Temperature <",
        ]
    );
}

#[tokio::test]
async fn tool_closures_nest_with_structs_and_may_answer_themselves() {
    let log = Log::default();
    let l1 = log.clone();
    let chain: Vec<Arc<dyn Middleware>> = vec![
        Arc::new(Struct("Struct", log.clone())),
        Arc::new(wrap_tool("NoShell", move |request, next| {
            let log = l1.clone();
            Box::pin(async move {
                log.push(format!("NoShell {}", request.call.name));
                if request.call.name == "shell" {
                    return Ok(Message::tool_error(request.call.id.clone(), "disabled"));
                }
                next.run(request).await
            })
        })),
    ];
    let state = Arc::new(AgentState::default());
    let runtime = Runtime::detached("t");
    let terminal = Terminal(log.clone());

    let mut request = tool_request(&state, &runtime);
    request.call.name = "lookup".into();
    let out = ToolNext::new(&chain, &terminal).run(request).await.unwrap();
    assert_eq!(out.text(), "lookup");
    let mut request = tool_request(&state, &runtime);
    request.call.name = "shell".into();
    let out = ToolNext::new(&chain, &terminal).run(request).await.unwrap();
    assert_eq!(out.text(), "disabled");
    assert_eq!(
        log.take(),
        [
            "Struct >",
            "NoShell lookup",
            "tool",
            "Struct <",
            "Struct >",
            "NoShell shell",
            "Struct <",
        ]
    );
}
