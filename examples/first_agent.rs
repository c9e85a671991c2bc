//! Your first Keel agent: a real model, a tool, summarization and session memory.
//!
//! - the model: any OpenAI-compatible server, from `OPENAI_BASE_URL`, `OPENAI_API_KEY`
//!   and `KEEL_MODEL` (`KEEL_CONTEXT_WINDOW` for a model whose window Keel does not know);
//! - one tool written by hand (`lookup_order`);
//! - summarization from the `summarization.yaml` next to your `Cargo.toml` (or the path
//!   given as the first argument);
//! - session memory on SQLite (`first_agent.db`, created on first use);
//! - a streamed run per user turn that prints the answer, each `context_compacting` and
//!   `context_compacted` event, and the outcome.
//!
//! ```sh
//! OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=sk-... KEEL_MODEL=my-model \
//!     cargo run --features openai --example first_agent -- examples/first_agent/summarization.yaml
//! ```
//!
//! docs/first-agent.md walks through it. It exits with status 1 and says what to do when
//! no server answers, when `KEEL_MODEL` is missing, or when the `summarization.yaml`
//! would never compact.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use futures::StreamExt;
use keel::model::{ChatChunk, ModelErrorKind};
use keel::openai::{OpenAiChatModel, OpenAiConfig};
use keel::prelude::*;
use serde_json::{Value, json};

/// The conversation: an order question that needs the tool, then enough turns for the
/// summarization trigger of the `summarization.yaml` to fire.
const TURNS: &[&str] = &[
    "Hi, I'm Ada from Northwind. Can you look up order ORD-1042 for me? It was due Monday.",
    "Thanks. The order is for our EU warehouse in Rotterdam; please remember that.",
    "What does 'held at customs' usually mean for a shipment like this?",
    "Could you also look up order ORD-1043? It shipped together with the first one.",
    "Please draft a short note to our warehouse team about the delay.",
    "Make the note more formal, and mention both order numbers.",
    "Now, which warehouse were these orders going to, and which orders were they?",
];

/// A tool written by hand: a name, a description and a JSON schema for its arguments
/// (what the model sees), and `call` (what runs when the model asks for it).
struct LookupOrder(ToolSpec);

impl LookupOrder {
    fn new() -> Self {
        LookupOrder(ToolSpec::new(
            "lookup_order",
            "Finds an order by its id (ORD-1234) and returns its status.",
            json!({
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "the order id, e.g. ORD-1042"}},
                "required": ["order_id"],
            }),
        ))
    }
}

#[async_trait]
impl Tool for LookupOrder {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    async fn call(&self, args: Value) -> Result<Content, ToolError> {
        let Some(id) = args["order_id"].as_str() else {
            // Tool errors go back to the model, which can correct its call.
            return Err(ToolError::InvalidArguments {
                tool: "lookup_order".into(),
                message:
                    "order_id is missing: pass the order id, e.g. {\"order_id\": \"ORD-1042\"}"
                        .into(),
            });
        };
        // A real tool would query a database or an API here.
        Ok(format!(
            "{id}: held at customs in Rotterdam since Monday; carrier DHL; expected release in 2 days"
        )
        .into())
    }
}

/// Why the program stops, in words a user can act on.
fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("first_agent: error: {message}");
    ExitCode::FAILURE
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(message),
    }
}

async fn run() -> Result<(), String> {
    // 1. The model, from OPENAI_BASE_URL / OPENAI_API_KEY / KEEL_MODEL.
    let openai = OpenAiConfig::from_env().map_err(|e| e.to_string())?;
    let base_url = openai.normalized_base_url().to_owned();
    let model = OpenAiChatModel::new(openai).map_err(|e| {
        format!("{e} (e.g. KEEL_MODEL=gpt-4o-mini, or the name your local server serves)")
    })?;
    let model: Arc<dyn ChatModel> = Arc::new(model);

    // 2. Summarization from summarization.yaml. `from_config` refuses a file that would
    //    never compact (DeerFlow's schema leaves `enabled` false) and says why.
    let path = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("summarization.yaml"), PathBuf::from);
    let loaded = SummarizationConfig::from_yaml_file(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for warning in &loaded.warnings {
        eprintln!("first_agent: warning: {}: {warning}", path.display());
    }
    let summarization = SummarizationMiddleware::from_config(loaded.config)
        .map_err(|inactive| format!("{}: {inactive}", path.display()))?;

    // 3. Session memory on SQLite: a rolling summary of the session plus its recent
    //    messages, kept across runs of this program.
    let store = Store::connect("sqlite://first_agent.db?mode=rwc")
        .await
        .map_err(|e| e.to_string())?;
    let mut memory =
        SessionMemorySettings::for_scope(SessionScope::flow("first-agent").user("ada"))
            .with_pinned_keys(["customer", "warehouse"]);
    memory.n_messages = 12;

    // 4. The agent. Session memory is outermost, so summarization compacts what it sends;
    //    both receive the agent's store and model profile as the agent is built.
    let agent = Agent::builder()
        .model(model)
        .system_prompt("You are a concise support assistant for Northwind's orders.")
        .tool(LookupOrder::new())
        .store(Arc::new(store))
        .layer(SessionMemoryMiddleware::builder(memory))
        .layer(summarization)
        .build()
        .map_err(|e| e.to_string())?;
    println!(
        "model {} at {base_url}, config {}",
        agent.model_profile().name,
        path.display()
    );

    // 5. One streamed run per user turn, on one thread.
    let thread = format!("first-agent-{}", std::process::id());
    let modes = [StreamMode::Messages, StreamMode::Custom];
    for text in TURNS {
        println!("\nuser: {text}");
        let mut run = agent.stream(&thread, vec![Message::human(*text)], &modes);
        let mut answering = false;
        while let Some(event) = run.next().await {
            match event {
                StreamEvent::Messages {
                    chunk: ChatChunk::Text { text },
                    ..
                } => {
                    if !answering {
                        print!("assistant: ");
                        answering = true;
                    }
                    print!("{text}");
                }
                StreamEvent::Messages {
                    chunk:
                        ChatChunk::ToolCall {
                            name: Some(name), ..
                        },
                    ..
                } => {
                    println!("[tool call] {name}");
                }
                StreamEvent::Custom { payload, .. } => match payload["type"].as_str() {
                    // A UI shows a toast while the run waits on the summary.
                    Some("context_compacting") => println!(
                        "[context_compacting] {}",
                        payload["message"].as_str().unwrap_or_default()
                    ),
                    Some("context_compacted") => println!(
                        "[context_compacted] {} -> {} tokens, {} messages summarized, {} kept",
                        payload["tokens_before"],
                        payload["tokens_after"],
                        payload["summarized"],
                        payload["kept"]
                    ),
                    _ => {}
                },
                _ => {}
            }
        }
        if answering {
            println!();
        }
        // The outcome: the run's result once its events are read.
        match run.finish().await {
            Ok(output) => println!(
                "[outcome] completed: {} model step(s), {} messages in the thread",
                output.model_steps,
                output.state.messages.len()
            ),
            Err(keel::agent::AgentError::Model { source, .. })
                if matches!(
                    source.kind,
                    ModelErrorKind::Connection | ModelErrorKind::Timeout
                ) =>
            {
                return Err(format!(
                    "no OpenAI-compatible server answered at {base_url} ({source}); start one \
                     (vLLM, llama.cpp's llama-server, Ollama, LM Studio, ...) and set \
                     OPENAI_BASE_URL to its /v1 URL"
                ));
            }
            Err(e) => return Err(format!("the run failed: {e}")),
        }
    }
    Ok(())
}
