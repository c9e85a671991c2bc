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

/// `Agent::compact`: a thread under its trigger is compacted on request, the state
/// records it, and every later call sends `[summary, *recent]`; the messages stay.
#[tokio::test]
async fn a_compaction_asked_for_holds_for_every_later_call_under_the_trigger() {
    let model = model();
    let agent = agent(model.clone());
    // 20 short messages and a question: far under the 4000-token trigger.
    let mut history = chat(20, 40);
    history.push(Message::human("What is the weather in Paris?").with_id("question"));
    agent.invoke("t", history).await.unwrap();
    assert_eq!(model.internal_calls(), 0, "under the trigger: no summary");
    let before = agent.state("t").await.unwrap().unwrap().messages.len();

    let done = agent.compact("t").await.unwrap();
    assert!(done.compacted, "{done:?}");
    let report = &done.reports["SummarizationMiddleware"];
    assert_eq!(report["action"], "compacted", "{report}");
    assert!(report["summarized"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["reason"], "requested", "{report}");
    assert_eq!(model.internal_calls(), 1, "one summary call");
    let state = agent.state("t").await.unwrap().unwrap();
    assert_eq!(
        state.messages.len(),
        before,
        "the thread keeps every message"
    );
    let mark = &state.values[keel_core::state::COMPACTED_THROUGH];
    assert_eq!(mark["count"], before as u64, "{mark}");
    assert!(done.checkpoint.is_some());

    // The next turn, still under the trigger, is sent compacted from the cached summary.
    let seen = model.requests().len();
    agent
        .invoke("t", vec![Message::human("And in Rome?").with_id("rome")])
        .await
        .unwrap();
    let requests = model.requests();
    let later: Vec<_> = requests[seen..].iter().filter(|r| !r.internal).collect();
    assert!(!later.is_empty());
    for r in &later {
        assert_eq!(r.messages[0].name(), Some("summary"), "{:?}", r.messages[0]);
        assert!(
            r.messages.len() < before,
            "sent {} of {before}",
            r.messages.len()
        );
    }
    assert_eq!(
        model.internal_calls(),
        1,
        "the summary written on request serves"
    );
}

#[tokio::test]
async fn compacting_a_thread_that_never_ran_is_a_typed_error() {
    let agent = agent(model());
    let err = agent.compact("nobody").await.unwrap_err();
    assert!(
        matches!(err, keel_agent::AgentError::UnknownThread { ref thread_id } if thread_id == "nobody"),
        "{err}"
    );
}

/// `compact_tool: true`: the model sees `compact_conversation`, calls it, and its next
/// step (and every later call) is sent compacted, under the trigger.
#[tokio::test]
async fn the_model_can_ask_for_a_compaction_with_the_compact_conversation_tool() {
    let model = Arc::new(ScriptedModel::from_fn(|req| {
        if req.internal {
            return Ok(Message::ai(SUMMARY_TEXT));
        }
        let last = req.messages.last().unwrap();
        if last.is_human() && last.text().contains("compact now") {
            return Ok(Message::ai("").with_tool_calls(vec![ToolCall::new(
                "c1",
                keel_summarization::compact_tool::COMPACT_TOOL,
                json!({}),
            )]));
        }
        Ok(Message::ai("ok"))
    }));
    let cfg = config()
        .trigger(tokens(100_000))
        .keep(msgs(2))
        .compact_tool(true)
        .build()
        .unwrap();
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(middleware(cfg).build().unwrap())
        .build()
        .unwrap();
    agent.invoke("t", chat(12, 40)).await.unwrap();
    let offered = &model.requests()[0].tools;
    assert!(
        offered.iter().any(|t| t.name == "compact_conversation"),
        "{offered:?}"
    );
    assert_eq!(model.internal_calls(), 0);

    agent
        .invoke(
            "t",
            vec![Message::human("compact now please").with_id("ask")],
        )
        .await
        .unwrap();
    assert_eq!(model.internal_calls(), 1, "one summary for the tool call");
    let requests = model.requests();
    let after_tool = requests.iter().filter(|r| !r.internal).last().unwrap();
    assert_eq!(after_tool.messages[0].name(), Some("summary"));
    assert!(after_tool.messages.last().unwrap().is_tool());
    let state = agent.state("t").await.unwrap().unwrap();
    assert!(
        state
            .values
            .contains_key(keel_core::state::COMPACTED_THROUGH),
        "{:?}",
        state.values
    );
    // A later turn is still sent compacted, with no new summary.
    agent
        .invoke("t", vec![Message::human("thanks").with_id("thanks")])
        .await
        .unwrap();
    let last = model
        .requests()
        .into_iter()
        .filter(|r| !r.internal)
        .last()
        .unwrap();
    assert_eq!(last.messages[0].name(), Some("summary"));
    assert_eq!(model.internal_calls(), 1);
}

#[tokio::test]
async fn as_a_layer_summarization_checks_its_triggers_against_the_agents_model() {
    use keel_core::model::ModelProfile;
    use keel_summarization::config::ContextSize;
    let fraction = || {
        config()
            .trigger(ContextSize::Fraction(0.8))
            .build()
            .unwrap()
    };
    // The agent's model has no known context window: a fraction cannot be resolved, and
    // the agent fails to build, naming the setting (no profile was given to the builder).
    let unknown = ScriptedModel::from_fn(|_| Ok(Message::ai("hi")));
    let err = Agent::builder()
        .model(Arc::new(unknown))
        .layer(middleware(fraction()))
        .build()
        .unwrap_err();
    assert!(matches!(err, keel_agent::BuildError::Layer(_)), "{err}");
    assert!(err.to_string().contains("trigger[0].value"), "{err}");
    // With a known window it builds, and runs.
    let mut profile = ModelProfile::new("m", "scripted");
    profile.max_input_tokens = Some(100_000);
    let known = ScriptedModel::from_fn(|_| Ok(Message::ai("hi"))).with_profile(profile);
    let agent = Agent::builder()
        .model(Arc::new(known))
        .layer(middleware(fraction()))
        .build()
        .unwrap();
    assert_eq!(agent.middleware_names(), ["SummarizationMiddleware"]);
    agent
        .invoke("t", vec![Message::human("hello")])
        .await
        .unwrap();
}
