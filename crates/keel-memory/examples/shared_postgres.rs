//! Two processes sharing one PostgreSQL database: a session folded by one is continued by
//! the other, which reuses the summary without folding again.
//!
//! ```sh
//! KEEL_POSTGRES_URL=postgres://user:password@127.0.0.1:5432/keel \
//!     cargo run -p keel-memory --example shared_postgres
//! ```
//!
//! The example starts itself a second time as a child process (`worker`): the child runs
//! the first 30 turns of the session with its own connection pool and exits; the parent
//! then answers the next question with another pool. Folds use the extractive summarizer
//! so no model server is needed.

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

/// A stand-in for a real chat model so the example runs offline.
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
        Ok(Message::ai("Noted."))
    }
}

/// An agent with session memory on its own pool; returns the agent, its model and store.
async fn agent(
    url: &str,
    flow: &str,
) -> Result<(Agent, Arc<OfflineModel>, Arc<Store>), Box<dyn std::error::Error>> {
    let store = Arc::new(Store::connect(url).await?);
    let mut settings = SessionMemorySettings::for_scope(SessionScope::new(flow, "ada", "", ""))
        .with_pinned_keys(["project_id", "cluster"]);
    settings.n_messages = 6;
    let memory = SessionMemoryMiddleware::builder(settings)
        .store(store.clone())
        .fold_engine(FoldEngine::Extractive)
        .build()?;
    let model = Arc::new(OfflineModel {
        profile: ModelProfile::new("offline", "example"),
        last_request: Mutex::new(Vec::new()),
    });
    let agent = Agent::builder()
        .model(model.clone())
        .middleware(memory)
        .build()?;
    Ok((agent, model, store))
}

/// Runs one turn and returns how many folds it made.
async fn turn(agent: &Agent, text: &str) -> Result<usize, Box<dyn std::error::Error>> {
    let mut folds = 0;
    let mut run = agent.stream(
        "session-7",
        vec![Message::human(text)],
        &[StreamMode::Custom],
    );
    while let Some(event) = run.next().await {
        if let StreamEvent::Custom { payload, .. } = event
            && payload["type"] == "session_memory_folded"
        {
            folds += 1;
        }
    }
    run.finish().await?;
    Ok(folds)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("KEEL_POSTGRES_URL")
        .or_else(|_| std::env::var("KEEL_TEST_POSTGRES_URL"))
        .map_err(|_| "set KEEL_POSTGRES_URL to a PostgreSQL URL (scripts/test.sh provisions one as KEEL_TEST_POSTGRES_URL)")?;
    let args: Vec<String> = std::env::args().collect();

    if args.get(1).map(String::as_str) == Some("worker") {
        let flow = args.get(2).ok_or("worker needs a flow id")?;
        let (agent, _, _) = agent(&url, flow).await?;
        let mut folds = turn(&agent, "I'm working on project PRJ-123 on the EU cluster.").await?;
        for i in 1..30 {
            folds += turn(
                &agent,
                &format!("Step {i}: restarting the ingest job gives error E{i:03}."),
            )
            .await?;
        }
        println!(
            "[worker pid {}] 30 turns, {folds} fold(s)",
            std::process::id()
        );
        return Ok(());
    }

    // A flow id no earlier run used, so reruns start a fresh session.
    let flow = format!("shared-example-{}", std::process::id());
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(["worker", &flow])
        .status()?;
    if !status.success() {
        return Err(format!("the worker process failed: {status}").into());
    }

    let (agent, model, store) = agent(&url, &flow).await?;
    let scope = SessionScope::new(&flow, "ada", "session-7", "");
    let before = store
        .get_state(&scope)
        .await?
        .ok_or("the worker saved no state")?;
    let folds = turn(&agent, "Which cluster were we on again?").await?;
    let sent = model.last_request.lock().clone();
    println!(
        "[parent pid {}] state written by the worker: version {}, {} messages folded; folds in this process: {folds}",
        std::process::id(),
        before.version,
        before.absorbed_count
    );
    println!(
        "the model was sent {} messages; the first one:\n{}",
        sent.len(),
        sent[0].text()
    );
    if folds != 0 || !sent[0].text().contains("PRJ-123") {
        return Err("the parent should reuse the worker's summary".into());
    }
    store
        .delete_session_states(&scope.flow_id, &scope.user_id, &scope.session_id)
        .await?;
    Ok(())
}
