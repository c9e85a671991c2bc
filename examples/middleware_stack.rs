//! A whole middleware stack from one YAML file: PII redaction, call limits, retries, a
//! todo list, tool-use clearing and summarization, loaded with `keel::stack_loader()`
//! and run on a support thread with scripted answers. It prints what the model received
//! on its last call and the middleware counters a UI or a metrics exporter would show.
//!
//! ```sh
//! cargo run --features middleware --example middleware_stack
//! cargo run --features middleware --example middleware_stack -- my-stack.yaml
//! ```
//!
//! `keel run --config examples/stack/support.yaml --transcript examples/stack/thread.jsonl
//! --script examples/stack/answers.jsonl --json` does the same from the command line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use keel::builtin::stack::ModelRegistry;
use keel::message::Message;
use keel::model::{ChatModel, ModelError, ModelErrorKind};
use keel::stream::{StreamEvent, StreamMode};
use keel_testkit::{FnTool, ScriptedModel};
use serde_json::Value;

fn lines(path: &Path) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        out.push(serde_json::from_str(line)?);
    }
    Ok(out)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/stack");
    let config = std::env::args()
        .nth(1)
        .map_or_else(|| dir.join("support.yaml"), PathBuf::from);
    let stack = keel::stack_loader().load_file(&config)?;
    println!(
        "stack {}: {} middleware, outermost first",
        config.display(),
        stack.middleware.len()
    );

    // The model answers with the scripted lines; `{"error": ...}` lines are failures.
    let mut answers = Vec::new();
    for v in lines(&dir.join("answers.jsonl"))? {
        answers.push(match v.get("error") {
            Some(e) => Err(ModelError::new(
                serde_json::from_value::<ModelErrorKind>(e["kind"].clone())?,
                e["message"].as_str().unwrap_or_default(),
            )),
            None => Ok(serde_json::from_value::<Message>(v)?),
        });
    }
    let model = Arc::new(ScriptedModel::with_results(answers));
    let shared: Arc<dyn ChatModel> = model.clone();
    // Every model name in the file (the summarizer's too) is this model here; an
    // application maps names to its configured models.
    let models: Arc<dyn ModelRegistry> = Arc::new(move |_: &str| Some(shared.clone()));
    let agent = stack
        .agent_builder(model.clone(), models)?
        .tool(FnTool::echo("echo"))
        .build()?;

    let thread: Vec<Message> = lines(&dir.join("thread.jsonl"))?
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<_, _>>()?;
    let mut stream = agent.stream("support-1", thread, &[StreamMode::Custom]);
    println!("\ncounters (custom stream):");
    while let Some(event) = stream.next().await {
        if let StreamEvent::Custom { node, payload } = event {
            println!(
                "  {:<45} {} = {}",
                node,
                payload["counter"].as_str().unwrap_or("?"),
                payload["value"]
            );
        }
    }
    let Some(outcome) = stream.into_result() else {
        return Err("the run ended without an outcome".into());
    };
    let out = outcome?;
    println!("\nlast request the model received:");
    if let Some(last) = model.requests().last() {
        for m in &last.messages {
            println!("  {:>9}: {}", m.role().as_str(), m.text());
        }
    }
    println!(
        "\nanswer: {}",
        out.last_message()
            .map(|m| m.text().into_owned())
            .unwrap_or_default()
    );
    println!(
        "todos:  {}",
        out.state
            .values
            .get("todos")
            .cloned()
            .unwrap_or(Value::Null)
    );
    Ok(())
}
