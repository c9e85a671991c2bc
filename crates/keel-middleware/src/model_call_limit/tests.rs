use std::sync::Arc;

use keel_agent::AgentError;
use keel_core::message::Message;
use keel_testkit::ScriptedModel;
use serde_json::json;

use super::*;
use crate::test_support::{agent, call};

fn looping_model(n: usize) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(
        (0..n).map(|i| call(&format!("c{i}"), "echo", json!({"i": i}))),
    ))
}

#[tokio::test]
async fn run_limit_ends_with_langchains_closing_message() {
    let model = looping_model(5);
    let limit = ModelCallLimit::new(None, Some(2), ModelCallExit::End).unwrap();
    let out = agent(&model, vec![Arc::new(limit)])
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap();
    assert_eq!(model.calls(), 2);
    let last = out.state.messages.last().unwrap();
    assert!(last.is_ai());
    assert_eq!(last.text(), "Model call limits exceeded: run limit (2/2)");
    assert_eq!(out.state.values[THREAD_KEY], json!(2));
}

#[tokio::test]
async fn thread_limit_spans_runs_and_run_limit_resets() {
    let model = looping_model(0);
    for answer in ["one", "two", "three"] {
        model.push(Ok(Message::ai(answer)));
    }
    let limit = ModelCallLimit::new(Some(2), Some(1), ModelCallExit::End).unwrap();
    let agent = agent(&model, vec![Arc::new(limit)]);
    let first = agent.invoke("t", vec![Message::human("a")]).await.unwrap();
    assert_eq!(first.last_message().unwrap().text(), "one");
    // A new run: the run count is back to 0, the thread count is 1.
    let second = agent.invoke("t", vec![Message::human("b")]).await.unwrap();
    assert_eq!(second.last_message().unwrap().text(), "two");
    let third = agent.invoke("t", vec![Message::human("c")]).await.unwrap();
    assert_eq!(
        third.last_message().unwrap().text(),
        "Model call limits exceeded: thread limit (2/2)"
    );
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn both_limits_are_named_when_both_are_reached() {
    let model = looping_model(3);
    let limit = ModelCallLimit::new(Some(1), Some(1), ModelCallExit::End).unwrap();
    let out = agent(&model, vec![Arc::new(limit)])
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap();
    assert_eq!(
        out.last_message().unwrap().text(),
        "Model call limits exceeded: thread limit (1/1), run limit (1/1)"
    );
}

#[tokio::test]
async fn exit_error_fails_the_run() {
    let model = looping_model(3);
    let limit = ModelCallLimit::new(None, Some(1), ModelCallExit::Error).unwrap();
    let err = agent(&model, vec![Arc::new(limit)])
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap_err();
    let AgentError::Middleware(e) = err else {
        panic!("middleware error expected, got {err}")
    };
    assert_eq!(e.message, "Model call limits exceeded: run limit (1/1)");
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn a_zero_limit_stops_before_any_call() {
    let model = looping_model(1);
    let limit = ModelCallLimit::new(None, Some(0), ModelCallExit::End).unwrap();
    let out = agent(&model, vec![Arc::new(limit)])
        .invoke("t", vec![Message::human("go")])
        .await
        .unwrap();
    assert_eq!(model.calls(), 0);
    assert_eq!(
        out.last_message().unwrap().text(),
        "Model call limits exceeded: run limit (0/0)"
    );
}

#[test]
fn no_limit_at_all_is_refused() {
    let err = ModelCallLimit::new(None, None, ModelCallExit::End).unwrap_err();
    assert!(err.to_string().contains("at least one limit"), "{err}");
}

#[tokio::test]
async fn each_counted_call_reports_its_tokens_on_the_custom_stream() {
    use futures::StreamExt;
    use keel_core::message::{AiMessage, Usage};
    use keel_core::stream::{StreamEvent, StreamMode};
    let answer = Message::from(AiMessage {
        content: "hi".into(),
        usage: Some(Usage {
            input_tokens: 12,
            output_tokens: 3,
            total_tokens: 15,
            cached_input_tokens: 0,
            cache_creation_input_tokens: 0,
        }),
        ..Default::default()
    });
    let model = Arc::new(ScriptedModel::new([answer]));
    let limit = ModelCallLimit::new(None, Some(5), ModelCallExit::End).unwrap();
    let agent = agent(&model, vec![Arc::new(limit)]);
    let mut stream = agent.stream("t", vec![Message::human("go")], &[StreamMode::Custom]);
    let mut payloads = Vec::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Custom { payload, .. } = event {
            payloads.push(payload);
        }
    }
    assert_eq!(payloads.len(), 1);
    let p = &payloads[0];
    assert_eq!(
        (
            p["counter"].as_str(),
            p["input_tokens"].as_u64(),
            p["output_tokens"].as_u64()
        ),
        (Some("model_calls"), Some(12), Some(3))
    );
    assert_eq!(p["type"], crate::events::COUNTER_EVENT);
}
