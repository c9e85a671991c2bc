//! The path a Rust agent author takes: configure summarization from YAML, compose it
//! with session memory on SQLite around a model and a tool, and show the stream a chat
//! UI receives, including the `context_compacting` toast.
//!
//! ```sh
//! cargo run --example yaml_agent                      # offline, deterministic
//! OPENAI_BASE_URL=http://127.0.0.1:8080/v1 KEEL_MODEL=my-model KEEL_CONTEXT_WINDOW=8192 \
//!     cargo run --example yaml_agent                  # any OpenAI-compatible server
//! cargo run --example yaml_agent -- path/to/summarization.yaml path/to/keel.db
//! ```
//!
//! Without `OPENAI_BASE_URL` the agent talks to `keel::agent::offline::OfflineModel`, a
//! deterministic model that ships with Keel (not a test double): it answers from what it
//! is sent, so its replies show what compaction kept. Summaries are written by the run's
//! model (`model_name: null` in the YAML), which is what makes the UI show the
//! `context_compacting` toast: the run waits on a summary call. Session memory folds
//! with the extractive summarizer offline and with the model online.
//!
//! In an application, enable the facade's `openai` feature and use `keel::openai`; this
//! example depends on `keel-openai` directly so it needs no extra flag.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use keel::agent::offline::OfflineModel;
use keel::model::ChatChunk;
use keel::prelude::*;
use serde_json::{Value, json};

/// Turns of the conversation.
const TURNS: usize = 32;

/// The conversation: a support session with pasted logs and ticket lookups, long
/// enough to compact.
fn turns() -> Vec<String> {
    let mut turns = vec![
        "Hi! I'm Ada from Northwind. I'm working on project PRJ-123, which runs on the EU \
         cluster (eu-west-2), and our nightly ingest job has been failing since Monday."
            .to_owned(),
    ];
    for step in 1..TURNS - 1 {
        let text = if step % 6 == 0 {
            format!(
                "Please lookup ticket INC-{} and compare it with step {step}.",
                4400 + step
            )
        } else {
            let log: String = (0..8)
                .map(|line| {
                    format!(
                        "\n  10:{step:02}:{:02} WARN ingest-{step}: object store timeout after 30s \
                         (bucket ingest-eu, partition {line}, attempt {})",
                        line * 7,
                        line + 1
                    )
                })
                .collect();
            format!(
                "Step {step}: I restarted the ingest worker on node {step}; the job reached {}% \
                 and failed with error E{:03}. Log excerpt:{log}\nWhat should I look at next?",
                step * 3,
                100 + step
            )
        };
        turns.push(text);
    }
    turns.push("Remind me: which cluster were we on again?".to_owned());
    turns
}

/// Looks up a support ticket (deterministic, for the example).
struct LookupTicket(ToolSpec);

impl LookupTicket {
    fn new() -> Self {
        LookupTicket(ToolSpec::new(
            "lookup_ticket",
            "Finds a support ticket by id and returns its status.",
            json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "ticket id or question"}},
                "required": ["query"],
            }),
        ))
    }
}

#[async_trait]
impl Tool for LookupTicket {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    async fn call(&self, args: Value) -> Result<Content, ToolError> {
        let query = args["query"].as_str().unwrap_or_default();
        let id = query
            .split_whitespace()
            .find(|w| w.starts_with("INC-"))
            .unwrap_or("INC-????");
        Ok(format!("{id}: status monitoring, severity SEV-3, owner: platform team").into())
    }
}

/// The model: an OpenAI-compatible server when `OPENAI_BASE_URL` is set, otherwise the
/// offline one. Returns the model and whether it is online.
fn model() -> Result<(Arc<dyn ChatModel>, bool), Box<dyn std::error::Error>> {
    if std::env::var_os("OPENAI_BASE_URL").is_some() {
        let model = keel_openai::OpenAiConfig::from_env()?.build()?;
        return Ok((Arc::new(model), true));
    }
    Ok((Arc::new(OfflineModel::new()), false))
}

/// Prints one stream event the way a chat UI would treat it.
fn show(event: StreamEvent, streaming_text: &mut bool) -> Result<(), std::io::Error> {
    let mut out = std::io::stdout().lock();
    // Tokens are printed inline; anything else starts on a fresh line.
    if !matches!(event, StreamEvent::Messages { .. }) && *streaming_text {
        writeln!(out)?;
        *streaming_text = false;
    }
    match event {
        StreamEvent::Messages { chunk, .. } => match chunk {
            ChatChunk::Text { text } => {
                if !*streaming_text {
                    write!(out, "  [messages] assistant: ")?;
                    *streaming_text = true;
                }
                write!(out, "{text}")?;
            }
            ChatChunk::ToolCall {
                name: Some(name), ..
            } => writeln!(out, "  [messages] assistant calls tool {name}")?,
            _ => {}
        },
        StreamEvent::Updates { node, update } => {
            let ops = update.messages.len();
            let values: Vec<&str> = update.values.keys().map(String::as_str).collect();
            writeln!(
                out,
                "  [updates]  {node}: {ops} message op(s){}",
                if values.is_empty() {
                    String::new()
                } else {
                    format!(", values {values:?}")
                }
            )?;
        }
        StreamEvent::Values { state } => {
            writeln!(out, "  [values]   state: {} messages", state.messages.len())?;
        }
        StreamEvent::Custom { node, payload } => match payload["type"].as_str() {
            // The toast: shown while the run waits on a summary call.
            Some("context_compacting") => {
                let text = payload["message"].as_str().unwrap_or("Compacting…");
                let width = text.chars().count() + 4;
                writeln!(out, "  ╭{}╮", "─".repeat(width))?;
                writeln!(out, "  │ ⏳ {text} │")?;
                writeln!(out, "  ╰{}╯", "─".repeat(width))?;
            }
            Some("context_compacted") => writeln!(
                out,
                "  [custom]   context compacted: {} → {} tokens ({} messages summarized by {}, {} kept)",
                payload["tokens_before"],
                payload["tokens_after"],
                payload["summarized"],
                payload["source"].as_str().unwrap_or("?"),
                payload["kept"],
            )?,
            Some("session_memory_folded") => writeln!(
                out,
                "  [custom]   session memory folded {} messages (version {}, {} in the summary)",
                payload["messages"], payload["version"], payload["absorbed_count"]
            )?,
            _ => writeln!(out, "  [custom]   {node}: {payload}")?,
        },
        // Task and checkpoint events come only for the modes that ask for them.
        _ => {}
    }
    out.flush()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let config_path = args.next().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/summarization.yaml")
    });
    let db_path = args.next().map(PathBuf::from).unwrap_or_else(|| {
        std::env::temp_dir().join(format!("keel-yaml-agent-{}.db", std::process::id()))
    });

    // 1. Summarization from YAML (DeerFlow's schema plus Keel's keys).
    let loaded = SummarizationConfig::from_yaml_file(&config_path)?;
    for warning in &loaded.warnings {
        println!("config warning: {warning}");
    }
    let config = loaded.config;

    // 2. The model.
    let (model, online) = model()?;

    // 3. Session memory: a rolling summary with pinned keys per session, kept in the
    // agent's store (SQLite here).
    let store =
        Arc::new(Store::connect(&format!("sqlite://{}?mode=rwc", db_path.display())).await?);
    let mut settings =
        SessionMemorySettings::for_scope(SessionScope::flow("yaml-agent").user("ada"))
            .with_pinned_keys(["project_id", "cluster"]);
    // Recent messages sent verbatim, and older ones folded 10 at a time. The window holds
    // more tokens than the YAML's trigger, so summarization compacts it as it fills.
    settings.n_messages = 40;
    settings.fold_batch = 10;
    let memory = SessionMemoryMiddleware::builder(settings).fold_engine(if online {
        FoldEngine::Model
    } else {
        FoldEngine::Extractive
    });

    // 4. The agent: one store for checkpoints and session memory, the model's profile
    // for summarization's triggers (both handed to the middleware as the agent is
    // built); session memory outermost, so summarization compacts what it sends.
    let agent = Agent::builder()
        .model(model)
        .system_prompt("You are a support assistant for Northwind's data platform.")
        .tool(LookupTicket::new())
        .store(store.clone())
        .layer(memory)
        .layer(SummarizationMiddleware::builder(config))
        .build()?;
    let profile = agent.model_profile().clone();

    println!(
        "model: {} ({}), config: {}, database: {}\n",
        profile.name,
        if online {
            "OpenAI-compatible server"
        } else {
            "offline, deterministic"
        },
        config_path.display(),
        db_path.display()
    );

    // 5. The conversation, streamed in every mode.
    let thread = format!("session-{}", std::process::id());
    let modes = [
        StreamMode::Values,
        StreamMode::Updates,
        StreamMode::Messages,
        StreamMode::Custom,
    ];
    let mut toasts = 0;
    for (i, text) in turns().iter().enumerate() {
        let first_line = text.lines().next().unwrap_or_default();
        let more = text.lines().count() - 1;
        println!(
            "── turn {} ── user: {first_line}{}",
            i + 1,
            if more > 0 {
                format!(" [+{more} log lines]")
            } else {
                String::new()
            }
        );
        let mut run = agent.stream(&thread, vec![Message::human(text.as_str())], &modes);
        let mut streaming_text = false;
        while let Some(event) = run.next().await {
            if let StreamEvent::Custom { payload, .. } = &event
                && payload["type"] == "context_compacting"
            {
                toasts += 1;
            }
            show(event, &mut streaming_text)?;
        }
        if streaming_text {
            println!();
        }
        run.finish().await?;
    }

    let state = agent.state(&thread).await?.unwrap_or_default();
    println!(
        "\n{} messages in the thread's state (nothing is deleted); {toasts} compacting toast(s) shown.",
        state.messages.len()
    );
    if std::env::args().len() < 3 {
        // A database of our own: remove it (pass a path to keep it).
        drop(agent);
        drop(store);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db_path.display()));
        }
    }
    Ok(())
}
