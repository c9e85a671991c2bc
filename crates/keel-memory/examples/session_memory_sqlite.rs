//! Session memory on SQLite: the support scenario of the Langflow feature request #15799, offline.
//!
//! The user names project PRJ-123 on the EU cluster, troubleshoots for 30 exchanges, then
//! asks "Which cluster were we on again?". With `n_messages = 6` the first message left
//! the window long ago, yet the model still sees it: in the rolling summary.
//!
//! ```sh
//! cargo run -p keel-memory --example session_memory_sqlite [path/to/keel.db]
//! ```
//!
//! Folds use the deterministic extractive summarizer so the example runs without a model
//! server; in production, drop `.fold_engine(..)` and folds use your chat model (one
//! extra call per fold) with the pinned keys filled in by it.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile};
use keel_core::store::{SessionMemoryStore, SessionScope};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_memory::{FoldEngine, SessionMemoryMiddleware, SessionMemorySettings};
use keel_store::Store;
use parking_lot::Mutex;

/// A stand-in for a real chat model so the example runs offline: it answers every
/// question with a fixed sentence and remembers the last request it was sent.
struct OfflineModel {
    profile: ModelProfile,
    last_request: Mutex<Vec<Message>>,
}

#[async_trait]
impl ChatModel for OfflineModel {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        *self.last_request.lock() = request.messages.to_vec();
        let question = request
            .messages
            .last()
            .map(|m| m.text().into_owned())
            .unwrap_or_default();
        Ok(Message::ai(format!("Let me check that: {question}")))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = match std::env::args().nth(1) {
        Some(p) => std::path::PathBuf::from(p),
        None => std::env::temp_dir().join(format!("keel-session-memory-{}.db", std::process::id())),
    };
    let store = Arc::new(Store::connect(&format!("sqlite://{}?mode=rwc", path.display())).await?);

    let mut settings =
        SessionMemorySettings::for_scope(SessionScope::new("support-agent", "ada", "", ""))
            .with_pinned_keys(["project_id", "cluster"]);
    settings.n_messages = 6;
    let memory = SessionMemoryMiddleware::builder(settings)
        .store(store.clone())
        .fold_engine(FoldEngine::Extractive)
        .build()?;
    let scope = memory.scope_for_thread("session-42");
    let memory = Arc::new(memory);

    let model = Arc::new(OfflineModel {
        profile: ModelProfile::new("offline", "example"),
        last_request: Mutex::new(Vec::new()),
    });
    let agent = Agent::builder()
        .model(model.clone())
        .system_prompt("You are a support assistant.")
        .middleware_shared(memory.clone())
        .build()?;

    let mut turns = vec!["I'm working on project PRJ-123 on the EU cluster.".to_owned()];
    turns.extend((1..=30).map(|i| format!("Step {i}: the deploy still fails with error E{i:03}.")));
    turns.push("Which cluster were we on again?".to_owned());
    let mut folds = 0;
    for text in &turns {
        let mut run = agent.stream(
            "session-42",
            vec![Message::human(text.as_str())],
            &[StreamMode::Custom],
        );
        while let Some(event) = run.next().await {
            if let StreamEvent::Custom { payload, .. } = event
                && payload["type"] == "session_memory_folded"
            {
                folds += 1;
                println!(
                    "fold #{folds}: {} messages, version {}",
                    payload["messages"], payload["version"]
                );
            }
        }
        run.finish().await?;
    }

    let sent = model.last_request.lock().clone();
    println!(
        "\nThe last model call carried {} messages (not {}):",
        sent.len(),
        2 * turns.len() - 1
    );
    for m in &sent {
        let text = m.text();
        let short: String = text.chars().take(300).collect();
        println!(
            "--- {} {}\n{short}",
            m.role().as_str(),
            m.name().unwrap_or("")
        );
    }
    let state = store.get_state(&scope).await?.unwrap_or_default();
    println!(
        "\nstate in {}: version {}, {} messages folded, cursor {:?}",
        path.display(),
        state.version,
        state.absorbed_count,
        state.covered_until.map(|c| c.message_id)
    );
    assert!(
        sent[0].text().contains("PRJ-123"),
        "the first message survives in the summary"
    );

    // Deleting the session deletes its state (chat history is append-only).
    let deleted = memory.delete_session(&scope).await?;
    println!(
        "deleted {deleted} state row(s) of session {:?}",
        scope.session_id
    );
    Ok(())
}
