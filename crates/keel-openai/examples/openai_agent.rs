//! An agent with transient summarization against any OpenAI-compatible endpoint.
//!
//! ```text
//! OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=sk-... KEEL_MODEL=gpt-4o-mini \
//!     cargo run -p keel-openai --example openai_agent -- "What is Keel?"
//! ```
//!
//! Reads the endpoint, key and model from the environment (`KEEL_CONTEXT_WINDOW` for
//! models whose window is not built in), streams the answer to stdout, and reports on
//! stderr when the summarization middleware compacts the conversation. Type further
//! questions on stdin; an empty line ends the session.

use std::io::{BufRead, Write};
use std::sync::Arc;

use futures::StreamExt;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::model::{ChatChunk, ChatModel};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_openai::OpenAiChatModel;
use keel_summarization::config::{ContextSize, SummarizationConfig};
use keel_summarization::middleware::SummarizationMiddleware;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = OpenAiChatModel::from_env()?;
    let profile = model.profile().clone();
    eprintln!(
        "model {} at {} (context window: {})",
        profile.name,
        model.config().normalized_base_url(),
        profile
            .max_input_tokens
            .map_or("unknown".to_owned(), |n| n.to_string())
    );
    // Compact at 80% of a known window; without one, at a fixed budget.
    let trigger = if profile.max_input_tokens.is_some() {
        ContextSize::Fraction(0.8)
    } else {
        ContextSize::Tokens(3000)
    };
    let model: Arc<dyn ChatModel> = Arc::new(model);
    let summarization = SummarizationMiddleware::builder(
        SummarizationConfig::builder()
            .trigger(trigger)
            .keep(ContextSize::Messages(10))
            .build()?,
    )
    .summary_model(model.clone())
    .model_profile(profile)
    .build()?;
    let agent = Agent::builder()
        .model(model)
        .system_prompt("You are a concise, helpful assistant.")
        .middleware(summarization)
        .build()?;

    let first: Vec<String> = std::env::args().skip(1).collect();
    let mut question = if first.is_empty() {
        None
    } else {
        Some(first.join(" "))
    };
    let stdin = std::io::stdin();
    loop {
        let text = match question.take() {
            Some(q) => q,
            None => {
                eprint!("> ");
                let mut line = String::new();
                if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(());
                }
                line.trim().to_owned()
            }
        };
        let mut events = agent.stream(
            "example",
            vec![Message::human(text)],
            &[StreamMode::Messages, StreamMode::Custom],
        );
        while let Some(event) = events.next().await {
            match event {
                StreamEvent::Messages {
                    chunk: ChatChunk::Text { text },
                    ..
                } => {
                    print!("{text}");
                    std::io::stdout().flush()?;
                }
                StreamEvent::Custom { payload, .. } => eprintln!("\n[{payload}]"),
                _ => {}
            }
        }
        println!();
        if let Some(Err(error)) = events.into_result() {
            eprintln!("run failed: {error}");
        }
    }
}
