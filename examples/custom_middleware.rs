//! Middleware written from scratch: the README's example, runnable.
//!
//! ```sh
//! cargo run --example custom_middleware
//! ```
//!
//! `Temperature` sets the temperature of every model call and `LastN` keeps only the
//! last message in what the model is sent (state keeps everything). A third middleware,
//! `ShowRequest`, innermost, prints what actually reaches the model, so you can see the
//! other two at work. Middleware are added outermost first: `before_*` hooks run in that
//! order, `after_*` in reverse, and wrap hooks nest (docs/writing-middleware.md).
//!
//! `Temperature` and `ShowRequest` are one hook each, so they are closures
//! (`keel::middleware::from_fn`); `LastN` is a struct implementing the `Middleware`
//! trait, the form for a middleware with several hooks or state of its own. Its impl
//! block is marked `#[keel::middleware]`, which applies `#[async_trait]` and derives
//! `hooks()` from the hooks the block defines, so the agent skips the other five. Both
//! kinds mix in one stack.
//!
//! The model is `keel::agent::offline::OfflineModel`, which runs without a server; swap
//! in `keel::openai::OpenAiConfig::from_env()?.build()?` (feature `openai`) for a real
//! one.

use std::sync::Arc;

use keel::agent::Agent;
use keel::agent::offline::OfflineModel;
use keel::middleware::{Middleware, ModelRequest, ModelResponse, Next, from_fn};
use keel::{Message, ModelError};

/// Keeps only the last `n` messages in what the model is sent (state keeps everything).
struct LastN(usize);

#[keel::middleware]
impl Middleware for LastN {
    fn name(&self) -> &str {
        "LastN"
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let skip = request.messages.len().saturating_sub(self.0);
        let recent = request.messages[skip..].to_vec();
        next.run(request.with_messages(recent)).await
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = Agent::builder()
        .model(Arc::new(OfflineModel::new()))
        .system_prompt("You are a helpful assistant.")
        // Sets the temperature of every model call (outermost).
        .middleware(from_fn::wrap_model("Temperature", |mut request, next| {
            Box::pin(async move {
                request.settings.temperature = Some(0.2);
                next.run(request).await
            })
        }))
        .middleware(LastN(1))
        // Prints what reaches the model and what it answers (innermost: closest to it).
        .middleware(from_fn::wrap_model("ShowRequest", |request, next| {
            Box::pin(async move {
                println!(
                    "model sees {} message(s) at temperature {:?}, starting with {:?}",
                    request.messages.len(),
                    request.settings.temperature,
                    request.messages.first().map(|m| m.text().into_owned()),
                );
                let response = next.run(request).await?;
                println!("model answers: {}", response.message.text());
                Ok(response)
            })
        }))
        .build()?;

    let history = vec![
        Message::human("hello"),
        Message::ai("hello!"),
        Message::human("hi"),
    ];
    let out = agent.invoke("thread-1", history).await?;
    println!(
        "state keeps all {} messages; the last one: {}",
        out.state.messages.len(),
        out.last_message()
            .map(|m| m.text().into_owned())
            .unwrap_or_default()
    );
    Ok(())
}
