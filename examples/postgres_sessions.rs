//! Two agent processes sharing one session through PostgreSQL.
//!
//! ```sh
//! cargo run --example postgres_sessions -- postgres://user:password@127.0.0.1:5432/keel
//! KEEL_POSTGRES_URL=postgres://... cargo run --example postgres_sessions
//! ```
//!
//! The example starts itself twice as child processes, one after the other, each with
//! its own connection pool and its own `Agent`. Process A holds the first 16 turns of a
//! support session; process B continues the same session: it loads the thread's
//! checkpoints and the session memory that A saved, and answers a question about a fact
//! A heard at the start, which has long left the recent window. Session memory saves
//! with compare-and-swap, so two processes may also serve one session at the same time
//! (see docs/session-memory.md).
//!
//! Both use `keel::agent::offline::OfflineModel` and fold with the extractive summarizer,
//! so only PostgreSQL is needed. scripts/test.sh runs this example against its
//! throwaway server.

use std::process::ExitCode;
use std::sync::Arc;

use futures::StreamExt;
use keel::agent::Agent;
use keel::agent::offline::OfflineModel;
use keel::memory::{FoldEngine, SessionMemoryMiddleware, SessionMemorySettings};
use keel::sql::Store;
use keel::store::{SessionMemoryStore, SessionScope};
use keel::{Message, StreamEvent, StreamMode};

/// Environment variables read for the URL, in order, when no argument is given.
const URL_VARS: [&str; 3] = [
    "KEEL_POSTGRES_URL",
    "DATABASE_URL",
    "KEEL_TEST_POSTGRES_URL",
];

const USER: &str = "ada";

fn usage() -> String {
    format!(
        "postgres_sessions: two agent processes sharing one session through PostgreSQL.\n\n\
         It needs a PostgreSQL URL (a database it may create tables in), as the first\n\
         argument or in one of {URL_VARS:?}:\n\n  \
         cargo run --example postgres_sessions -- postgres://user:password@127.0.0.1:5432/keel\n\n\
         scripts/test.sh starts a throwaway server and runs this example against it."
    )
}

/// One agent on its own pool: session memory, and checkpoints in the same database.
async fn agent(url: &str, flow: &str) -> Result<(Agent, Arc<Store>), Box<dyn std::error::Error>> {
    let store = Arc::new(Store::connect(url).await?);
    let mut settings = SessionMemorySettings::for_scope(SessionScope::new(flow, USER, "", ""))
        .with_pinned_keys(["project_id", "cluster"]);
    settings.n_messages = 6;
    let memory = SessionMemoryMiddleware::builder(settings)
        .store(store.clone())
        .fold_engine(FoldEngine::Extractive)
        .build()?;
    let agent = Agent::builder()
        .model(Arc::new(OfflineModel::new()))
        .system_prompt("You are a support assistant.")
        .middleware(memory)
        .checkpointer(store.clone())
        .build()?;
    Ok((agent, store))
}

/// Runs one turn; returns the answer and how many folds the turn made.
async fn turn(
    agent: &Agent,
    thread: &str,
    text: &str,
) -> Result<(String, usize), Box<dyn std::error::Error>> {
    let mut run = agent.stream(thread, vec![Message::human(text)], &[StreamMode::Custom]);
    let mut folds = 0;
    while let Some(event) = run.next().await {
        if let StreamEvent::Custom { payload, .. } = event
            && payload["type"] == "session_memory_folded"
        {
            folds += 1;
        }
    }
    let out = run.finish().await?;
    let answer = out
        .last_message()
        .map(|m| m.text().into_owned())
        .unwrap_or_default();
    Ok((answer, folds))
}

/// A child process: `worker <url> <flow> <a|b>`.
async fn worker(url: &str, flow: &str, part: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (agent, store) = agent(url, flow).await?;
    // The session (and the thread's checkpoints) belong to this run of the example.
    let thread = flow;
    let pid = std::process::id();
    let before = agent.state(thread).await?.map_or(0, |s| s.messages.len());
    let turns: Vec<String> = if part == "a" {
        std::iter::once("I'm working on project PRJ-123 on the EU cluster.".to_owned())
            .chain(
                (1..16)
                    .map(|i| format!("Step {i}: restarting the ingest job gives error E{i:03}.")),
            )
            .collect()
    } else {
        (16..20)
            .map(|i| format!("Step {i}: restarting the ingest job gives error E{i:03}."))
            .chain(std::iter::once(
                "Which cluster were we on again?".to_owned(),
            ))
            .collect()
    };
    let mut folds = 0;
    let mut last = String::new();
    for text in &turns {
        let (answer, f) = turn(&agent, thread, text).await?;
        folds += f;
        last = answer;
    }
    let scope = SessionScope::new(flow, USER, thread, "");
    let state = store.get_state(&scope).await?.unwrap_or_default();
    println!(
        "[process {part}, pid {pid}] found {before} messages in the thread, ran {} turns, {folds} fold(s); \
         session memory: version {}, {} messages folded",
        turns.len(),
        state.version,
        state.absorbed_count
    );
    if part == "b" {
        println!(
            "[process b, pid {pid}] last question: {:?}",
            turns.last().map(String::as_str).unwrap_or("")
        );
        println!("[process b, pid {pid}] answer: {last}");
        if !last.contains("EU cluster") {
            return Err(
                "process b should recall the EU cluster from process a's session memory".into(),
            );
        }
        store
            .delete_session_states(&scope.flow_id, &scope.user_id, &scope.session_id)
            .await?;
    }
    Ok(())
}

fn run_child(url: &str, flow: &str, part: &str) -> Result<(), Box<dyn std::error::Error>> {
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(["worker", url, flow, part])
        .status()?;
    if !status.success() {
        return Err(format!("process {part} failed: {status}").into());
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("worker") => match (args.get(1), args.get(2), args.get(3)) {
            (Some(url), Some(flow), Some(part)) => worker(url, flow, part).await,
            _ => Err("usage: postgres_sessions worker <url> <flow> <a|b>".into()),
        },
        Some("-h" | "--help") => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        url => {
            let url = url
                .map(str::to_owned)
                .or_else(|| URL_VARS.iter().find_map(|v| std::env::var(v).ok()));
            let Some(url) = url else {
                eprintln!("{}", usage());
                return ExitCode::from(2);
            };
            // A flow no earlier run used, so reruns start a fresh session.
            let flow = format!("postgres-sessions-example-{}", std::process::id());
            run_child(&url, &flow, "a").and_then(|()| run_child(&url, &flow, "b"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("postgres_sessions: {e}");
            ExitCode::FAILURE
        }
    }
}
