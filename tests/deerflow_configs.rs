//! DeerFlow's example `summarization:` configurations (minimal, production, multi-model,
//! conservative; from DeerFlow's summarization docs), stored in `tests/configs/`, loaded
//! as is through the `keel` facade and run in an agent over a long conversation.

// Test helpers may unwrap: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use keel::agent::Agent;
use keel::summarization::SUMMARY_NAME;
use keel::summarization::cache::SummaryCache;
use keel::summarization::config::{ContextSize, SummarizationConfig};
use keel::summarization::middleware::SummarizationMiddleware;
use keel::{ChatModel, Message, ModelProfile, ToolCall};
use keel_testkit::ScriptedModel;
use serde_json::json;

/// The run's model: a 16,000-token window (the multi-model file's fractions need one).
fn run_model() -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::from_fn(|r| {
            Ok(Message::ai(if r.internal {
                "- Ada works on PRJ-123 (summary by the run's model)"
            } else {
                "ok"
            }))
        })
        .with_profile(ModelProfile::new("gpt-4o", "openai").with_max_input_tokens(16_000)),
    )
}

/// 140 messages of about 110 tokens each (15,000 tokens, under the window), with a
/// tool call and its result every tenth exchange.
fn history() -> Vec<Message> {
    let filler = "the nightly ingest job on the EU cluster failed with a timeout again ";
    let mut out = vec![Message::human(
        "I'm Ada; project PRJ-123 on the EU cluster.",
    )];
    let mut i = 0;
    while out.len() < 139 {
        if i % 10 == 9 {
            let id = format!("call_{i}");
            out.push(Message::ai("").with_tool_calls(vec![ToolCall::new(
                id.clone(),
                "read_logs",
                json!({"step": i}),
            )]));
            out.push(Message::tool(id, filler.repeat(6)).with_name("read_logs"));
        } else {
            out.push(Message::ai(format!("Step {i}: {}", filler.repeat(6))));
            out.push(Message::human(format!(
                "Step {i} again: {}",
                filler.repeat(6)
            )));
        }
        i += 1;
    }
    out.push(Message::human("Which project was it?"));
    out
}

fn config_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/configs")
        .join(name)
}

/// What one configuration did with the conversation.
struct Outcome {
    config: SummarizationConfig,
    run: Arc<ScriptedModel>,
    summary: Arc<ScriptedModel>,
    sent: Vec<Message>,
}

async fn run(file: &str) -> Outcome {
    let loaded = SummarizationConfig::from_yaml_file(config_path(file)).unwrap();
    assert!(loaded.warnings.is_empty(), "{file}: {:?}", loaded.warnings);
    let config = loaded.config;
    let run = run_model();
    let summary = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(Message::ai("- Ada works on PRJ-123 on the EU cluster"))
    }));
    let named = summary.clone();
    let middleware = SummarizationMiddleware::builder(config.clone())
        .model_registry(move |name: &str| {
            ["gpt-4o-mini", "gpt-4"]
                .contains(&name)
                .then(|| named.clone() as Arc<dyn ChatModel>)
        })
        .model_profile(run.profile().clone())
        .cache(Arc::new(SummaryCache::new(4)))
        .build()
        .unwrap();
    let agent = Agent::builder()
        .model(run.clone())
        .middleware(middleware)
        .build()
        .unwrap();
    let out = agent.invoke(file, history()).await.unwrap();
    assert_eq!(out.state.messages.len(), 141, "state keeps everything");
    let sent = run
        .requests()
        .into_iter()
        .rfind(|r| !r.internal)
        .unwrap()
        .messages;
    Outcome {
        config,
        run,
        summary,
        sent,
    }
}

/// Checks every configuration's common promises on what the model was sent.
fn check(o: &Outcome, file: &str) {
    let all = history();
    // A summary first, then a verbatim, pair-safe tail ending with the question.
    assert_eq!(o.sent[0].name(), Some(SUMMARY_NAME), "{file}");
    assert!(o.sent[0].text().contains("PRJ-123"), "{file}");
    assert!(o.sent.len() < all.len(), "{file}: compacted");
    let tail = &o.sent[1..];
    let texts =
        |ms: &[Message]| -> Vec<String> { ms.iter().map(|m| m.text().into_owned()).collect() };
    assert!(
        texts(tail) == texts(&all[all.len() - tail.len()..]),
        "{file}: the tail is the end of the conversation, verbatim"
    );
    assert!(
        tail[0].tool_call_id().is_none(),
        "{file}: no orphan tool result"
    );
    if let ContextSize::Messages(keep) = o.config.keep {
        assert!(tail.len() as u64 >= keep, "{file}: keeps at least {keep}");
    }
}

#[tokio::test]
async fn minimal_summarizes_with_the_run_model() {
    let o = run("deerflow-minimal.yaml").await;
    assert_eq!(o.config.model_name, None);
    check(&o, "minimal");
    assert_eq!(o.summary.calls(), 0);
    assert_eq!(
        o.run.internal_calls(),
        1,
        "one summary call, by the run's model"
    );
    assert!(o.sent[0].text().contains("summary by the run's model"));
}

#[tokio::test]
async fn production_summarizes_with_the_named_model() {
    let o = run("deerflow-production.yaml").await;
    assert_eq!(o.config.model_name.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(
        o.config.trigger,
        [ContextSize::Tokens(6000), ContextSize::Messages(75)]
    );
    check(&o, "production");
    assert_eq!(o.summary.calls(), 1);
    assert_eq!(o.run.internal_calls(), 0);
}

#[tokio::test]
async fn multi_model_fractions_follow_the_run_models_window() {
    let o = run("deerflow-multi-model.yaml").await;
    assert_eq!(o.config.trigger, [ContextSize::Fraction(0.7)]);
    check(&o, "multi-model");
    assert_eq!(o.summary.calls(), 1);
}

#[tokio::test]
async fn conservative_gives_the_summary_model_every_evicted_message() {
    let o = run("deerflow-conservative.yaml").await;
    assert_eq!(o.config.trim_tokens_to_summarize, None);
    check(&o, "conservative");
    assert!(o.sent.len() > 40, "keeps 40 messages verbatim");
    assert_eq!(o.summary.calls(), 1);
    // Untrimmed: the first message of the conversation reached the summary call.
    let prompt = o.summary.requests()[0]
        .messages
        .last()
        .unwrap()
        .text()
        .into_owned();
    assert!(
        prompt.contains("I&#x27;m Ada") || prompt.contains("I'm Ada"),
        "{prompt}"
    );
}

#[test]
fn a_fraction_config_with_an_unknown_window_is_refused_at_build() {
    let config = SummarizationConfig::from_yaml_file(config_path("deerflow-multi-model.yaml"))
        .unwrap()
        .config;
    let err = SummarizationMiddleware::builder(config)
        .model_profile(ModelProfile::new("local", "llama.cpp"))
        .summary_model(run_model())
        .build()
        .err()
        .expect("refused");
    assert!(err.to_string().contains("fraction"), "{err}");
}
