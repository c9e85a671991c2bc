//! The tools step: concurrency, ordering, unknown and failing tools, recursion limit.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::ai_calls;
use keel_agent::{Agent, AgentError};
use keel_core::message::{Content, Message, ToolStatus};
use keel_core::tool::{Tool, ToolError, ToolSpec};
use keel_testkit::{FnTool, ScriptedModel};
use serde_json::{Value, json};
use tokio::sync::Barrier;

/// Waits on a shared barrier before answering: with a barrier of 2, two calls finish
/// only if they run at the same time.
struct BarrierTool {
    spec: ToolSpec,
    barrier: Arc<Barrier>,
}

#[async_trait]
impl Tool for BarrierTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, args: Value) -> Result<Content, ToolError> {
        self.barrier.wait().await;
        Ok(Content::Text(format!("done {}", args["q"])))
    }
}

// current_thread: the overlap must come from the agent, not from worker threads.
#[tokio::test(flavor = "current_thread")]
async fn two_tool_calls_of_one_message_run_concurrently_and_keep_their_order() {
    let barrier = Arc::new(Barrier::new(2));
    let model = Arc::new(ScriptedModel::new([
        ai_calls(&[("c1", "wait"), ("c2", "wait")]),
        Message::ai("both done"),
    ]));
    let agent = Agent::builder()
        .model(model.clone())
        .tool(BarrierTool {
            spec: ToolSpec::new("wait", "waits", json!({"type": "object"})),
            barrier,
        })
        .build()
        .unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        agent.invoke("t", vec![Message::human("go")]),
    )
    .await
    .expect("deadlock: the two tool calls did not run concurrently")
    .unwrap();
    let results: Vec<_> = out
        .state
        .messages
        .iter()
        .filter(|m| m.is_tool())
        .map(|m| (m.tool_call_id().unwrap().to_owned(), m.text().into_owned()))
        .collect();
    assert_eq!(
        results,
        [
            ("c1".to_owned(), "done \"c1\"".to_owned()),
            ("c2".to_owned(), "done \"c2\"".to_owned())
        ]
    );
    // The second model call saw both results.
    assert_eq!(model.requests()[1].messages.len(), 4);
}

#[tokio::test]
async fn unknown_and_failing_tools_become_error_tool_messages() {
    let model = Arc::new(ScriptedModel::new([
        ai_calls(&[("c1", "nope"), ("c2", "boom"), ("c3", "echo")]),
        Message::ai("recovered"),
    ]));
    let agent = Agent::builder()
        .model(model.clone())
        .tool(FnTool::new("boom", |_| {
            Err(ToolError::Failed {
                tool: "boom".into(),
                message: "disk full".into(),
            })
        }))
        .tool(FnTool::echo("echo"))
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    let tools: Vec<_> = out
        .state
        .messages
        .iter()
        .filter_map(|m| m.as_tool())
        .collect();
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[0].status, ToolStatus::Error);
    assert!(tools[0].content.text().contains("unknown tool \"nope\""));
    assert!(
        tools[0].content.text().contains("boom, echo"),
        "lists the tools there are"
    );
    assert_eq!(tools[1].status, ToolStatus::Error);
    assert!(tools[1].content.text().contains("disk full"));
    assert_eq!(tools[2].status, ToolStatus::Success);
    assert_eq!(tools[2].name.as_deref(), Some("echo"));
    assert_eq!(out.last_message().unwrap().text(), "recovered");
}

#[tokio::test]
async fn a_tool_loop_stops_at_the_recursion_limit() {
    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(ai_calls(&[(&keel_core::message::new_id(), "echo")]))
    }));
    let agent = Agent::builder()
        .model(model.clone())
        .tool(FnTool::echo("echo"))
        .recursion_limit(3)
        .build()
        .unwrap();
    let err = agent
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::RecursionLimit { limit: 3 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("recursion_limit"));
    assert_eq!(model.calls(), 3);
}

/// A toolset whose tools the test swaps between runs.
struct Swappable(parking_lot::Mutex<Arc<[Arc<dyn Tool>]>>);

impl keel_core::tool::Toolset for Swappable {
    fn tools(&self) -> Arc<[Arc<dyn Tool>]> {
        self.0.lock().clone()
    }
}

#[tokio::test]
async fn a_toolset_is_asked_for_its_tools_on_every_step() {
    let fixed = FnTool::new("fixed", |_| Ok(Content::Text("the fixed tool".into())));
    let set = Arc::new(Swappable(parking_lot::Mutex::new(Arc::from(vec![
        Arc::new(FnTool::echo("a")) as Arc<dyn Tool>,
        // Taken by the fixed tool: left out.
        Arc::new(FnTool::new("fixed", |_| {
            Ok(Content::Text("shadowed".into()))
        })),
    ]))));
    let model = Arc::new(ScriptedModel::new([
        ai_calls(&[("c1", "a"), ("c2", "fixed")]),
        Message::ai("one"),
        ai_calls(&[("c3", "b"), ("c4", "a")]),
        Message::ai("two"),
    ]));
    let agent = Agent::builder()
        .model(model.clone())
        .tool(fixed)
        .toolset_shared(set.clone())
        .build()
        .unwrap();
    let first = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    let names = |i: usize| {
        model.requests()[i]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(0), ["fixed", "a"]);
    let texts: Vec<String> = first
        .state
        .messages
        .iter()
        .filter(|m| m.is_tool())
        .map(|m| m.text().into_owned())
        .collect();
    assert_eq!(texts, ["{\"q\":\"c1\"}", "the fixed tool"]);

    // The set changes: `a` goes, `b` comes; the next run is offered and runs the new set.
    *set.0.lock() = Arc::from(vec![Arc::new(FnTool::echo("b")) as Arc<dyn Tool>]);
    let second = agent
        .invoke("t", vec![Message::human("again")])
        .await
        .unwrap();
    assert_eq!(names(2), ["fixed", "b"]);
    let last: Vec<&Message> = second
        .state
        .messages
        .iter()
        .rev()
        .filter(|m| m.is_tool())
        .take(2)
        .collect();
    // c4 (`a`) is gone: unknown, naming what there is now.
    assert_eq!(last[0].as_tool().unwrap().status, ToolStatus::Error);
    assert!(last[0].text().contains("fixed, b"), "{}", last[0].text());
    assert_eq!(last[1].text(), "{\"q\":\"c3\"}");
}
