//! The middleware inside a real agent loop: one summary call for a tool loop over a long
//! thread, cache reuse on a small follow-up, nothing in state or checkpoints, and no
//! summary token on the user's messages stream.

// Helpers outside #[test] functions may unwrap too: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::*;
use futures::StreamExt;
use keel_agent::Agent;
use keel_core::message::{Message, ToolCall};
use keel_core::model::ChatChunk;
use keel_core::stream::{StreamEvent, StreamMode};
use keel_testkit::{FnTool, ScriptedModel};
use serde_json::json;

const SUMMARY_TEXT: &str = "- SECRET-SUMMARY-TOKENS the user wants the weather";

/// The run's model (also the summary model, as with `model_name: null`): internal calls
/// get the summary; user-facing calls make 4 tool calls, then answer.
fn model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::from_fn(|req| {
        if req.internal {
            return Ok(Message::ai(SUMMARY_TEXT));
        }
        let steps = req
            .messages
            .iter()
            .rev()
            .take_while(|m| !m.is_human() || m.name() == Some("summary"))
            .filter(|m| m.is_tool())
            .count();
        if steps < 4 {
            Ok(Message::ai("").with_tool_calls(vec![ToolCall::new(
                format!("call{}", steps + req.messages.len()),
                "lookup",
                json!({"q": steps}),
            )]))
        } else {
            Ok(Message::ai("It is sunny."))
        }
    }))
}

fn long_thread() -> Vec<Message> {
    let mut h = chat(60, 100);
    h.push(Message::human("What is the weather in Paris?").with_id("question"));
    h
}

fn agent(model: Arc<ScriptedModel>) -> Agent {
    let cfg = config()
        .trigger(tokens(4000))
        .keep(msgs(10))
        .build()
        .unwrap();
    let mw = middleware(cfg).build().unwrap();
    Agent::builder()
        .model(model)
        .tool(FnTool::new("lookup", |_| Ok("r".repeat(80).into())))
        .middleware(mw)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_tool_loop_of_five_model_calls_makes_one_summary_call_and_a_follow_up_reuses_it() {
    let model = model();
    let agent = agent(model.clone());
    let out = agent.invoke("thread", long_thread()).await.unwrap();
    assert_eq!(out.last_message().unwrap().text(), "It is sunny.");
    let main_calls = model.requests().iter().filter(|r| !r.internal).count();
    assert_eq!(main_calls, 5, "a tool loop of 5 model calls");
    assert_eq!(model.internal_calls(), 1, "exactly one summary call");
    for r in model.requests().iter().filter(|r| !r.internal) {
        assert_eq!(r.messages[0].name(), Some("summary"));
        keel_core::pairs::check_pairs(&r.messages[1..]).unwrap();
        assert!(r.messages.iter().any(|m| m.id() == "question"));
    }
    // Nothing of the summary entered state or the checkpoints.
    let state = agent.state("thread").await.unwrap().unwrap();
    assert!(!state.messages.iter().any(is_summary));
    assert_eq!(&state.messages[..61], &long_thread()[..]);
    for cp in agent.checkpointer().history("thread").await.unwrap() {
        assert!(!cp.messages.iter().any(is_summary));
    }
    // A follow-up that adds little reuses the cached summary.
    agent
        .invoke(
            "thread",
            vec![Message::human("And tomorrow?").with_id("q2")],
        )
        .await
        .unwrap();
    assert_eq!(model.internal_calls(), 1, "the follow-up reused the cache");
}

#[tokio::test]
async fn the_messages_stream_never_carries_summary_tokens() {
    let model = model();
    let agent = agent(model.clone());
    let mut stream = agent.stream(
        "t2",
        long_thread(),
        &[StreamMode::Messages, StreamMode::Custom],
    );
    let mut texts = String::new();
    let mut custom = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            StreamEvent::Messages {
                chunk: ChatChunk::Text { text },
                ..
            } => texts.push_str(&text),
            StreamEvent::Custom { payload, .. } => custom.push(payload),
            _ => {}
        }
    }
    stream.into_result().unwrap().unwrap();
    assert_eq!(model.internal_calls(), 1);
    assert!(texts.contains("It is sunny."));
    assert!(
        !texts.contains("SECRET-SUMMARY-TOKENS"),
        "summary tokens leaked: {texts}"
    );
    assert_eq!(
        event_types(&custom)
            .iter()
            .filter(|t| *t == "context_compacting")
            .count(),
        1
    );
}
