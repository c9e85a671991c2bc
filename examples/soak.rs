//! A soak run anyone can repeat: many threads, many concurrent runs, summarization and
//! session memory on, a scripted model; then every thread's checkpoints and chat history
//! are checked for lost and duplicated messages.
//!
//! ```text
//! cargo run --release --example soak -- --threads 1000 --messages 200 --concurrency 64 [--db URL]
//! ```
//!
//! Each thread gets `--messages` messages: `--messages / 2` runs of one user message and
//! one answer. Runs go round-robin over the threads, `--concurrency` at a time, so
//! consecutive runs of a thread may overlap (the agent's default `enqueue` strategy
//! orders them). Without `--db`, checkpoints live in the agent's bounded
//! `InMemoryCheckpointer` and history in a `MemoryStore`; with `--db` (a `keel-store` URL:
//! `sqlite://soak.db`, `postgres://...`) both live in that database.
//!
//! Prints one JSON object: `runs`, `lost_messages` and `duplicate_messages` (over the
//! latest checkpoint and the chat history of every thread), `peak_rss_mb` (the
//! process's high-water mark, from `/proc/self/status`), and `p50_step_us` /
//! `p99_step_us`: the latency of one step, here one run of one model call (input
//! checkpoint, session memory, summarization, the model, its checkpoint, history),
//! waiting time for the thread included. Exits 1 when anything was lost or duplicated,
//! 2 on bad arguments or a failed run.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use keel::Message;
use keel::agent::{Agent, InMemoryCheckpointer};
use keel::memory::{SessionMemoryMiddleware, SessionMemorySettings};
use keel::sql::Store;
use keel::store::{ChatHistoryStore, Checkpointer, SessionScope};
use keel::summarization::cache::SummaryCache;
use keel::summarization::config::SummarizationConfig;
use keel::summarization::middleware::SummarizationMiddleware;
use keel_testkit::{RecordedRequest, ScriptedModel};

const USAGE: &str = "usage: soak [--threads N] [--messages N] [--concurrency N] [--db URL]  (defaults: 1000, 200, 64, in memory)";

/// Summarization as a user would configure it: compact past 40 messages, keep 10.
const SUMMARIZATION_YAML: &str = "
summarization:
  enabled: true
  trigger:
    - type: messages
      value: 40
  keep:
    type: messages
    value: 10
";

const FOLD_ANSWER: &str =
    r#"{"pinned": {"project_id": "PRJ-123"}, "summary": "- the user works on PRJ-123"}"#;

/// What the command line asked for.
struct Args {
    threads: usize,
    messages: usize,
    concurrency: usize,
    db: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        threads: 1000,
        messages: 200,
        concurrency: 64,
        db: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| {
            v.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag} = {v:?}: expected a whole number of at least 1"))
        };
        match flag.as_str() {
            "--threads" => args.threads = number(value()?)?,
            "--messages" => args.messages = number(value()?)?,
            "--concurrency" => args.concurrency = number(value()?)?,
            "--db" => args.db = Some(value()?),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.messages < 2 || !args.messages.is_multiple_of(2) {
        return Err(format!(
            "--messages = {}: expected an even number of at least 2 (each run adds a question and an answer)",
            args.messages
        ));
    }
    Ok(args)
}

/// The process's peak resident set, in MiB (Linux); 0 where `/proc` is missing.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| (kb / 1024.0 * 10.0).round() / 10.0)
}

fn input_id(thread: usize, run: usize) -> String {
    format!("t{thread}-r{run}-q")
}

fn answer_id(input: &str) -> String {
    format!("{input}-a")
}

/// The run's model: answers the latest user message under an id derived from it, so
/// the checks below know exactly which messages every thread must hold.
fn run_model() -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::from_fn(|r: &RecordedRequest| {
            let question = r
                .messages
                .iter()
                .rev()
                .find(|m| m.is_human() && m.name().is_none())
                .map(|m| m.id().to_owned())
                .unwrap_or_default();
            Ok(
                Message::ai("Noted; the ingest job on PRJ-123 is being checked.")
                    .with_id(answer_id(&question)),
            )
        })
        // A soak makes 100,000 calls: keep no copy of them.
        .without_recording(),
    )
}

async fn build(
    args: &Args,
) -> Result<
    (
        Agent,
        Arc<dyn Checkpointer>,
        Arc<dyn ChatHistoryStore>,
        SessionMemoryMiddleware,
    ),
    String,
> {
    let (checkpointer, store): (Arc<dyn Checkpointer>, Arc<Store>) = match &args.db {
        None => (
            Arc::new(InMemoryCheckpointer::new()),
            Arc::new(Store::memory()),
        ),
        Some(url) => {
            let store = Arc::new(Store::connect(url).await.map_err(|e| e.to_string())?);
            (store.clone(), store)
        }
    };
    let summary = Arc::new(
        ScriptedModel::from_fn(|_| {
            Ok(Message::ai(
                "- the user works on PRJ-123; the ingest job fails",
            ))
        })
        .without_recording(),
    );
    let fold =
        Arc::new(ScriptedModel::from_fn(|_| Ok(Message::ai(FOLD_ANSWER))).without_recording());
    let mut settings = SessionMemorySettings::for_scope(SessionScope::new("soak", "user", "", ""))
        .with_pinned_keys(["project_id"]);
    settings.n_messages = 8;
    let memory = || {
        SessionMemoryMiddleware::builder(settings.clone())
            .store(store.clone())
            .summary_model(fold.clone())
            .build()
            .map_err(|e| e.to_string())
    };
    let config = SummarizationConfig::from_yaml_str(SUMMARIZATION_YAML)
        .map_err(|e| e.to_string())?
        .config;
    let summarization = SummarizationMiddleware::builder(config)
        .summary_model(summary)
        .cache(Arc::new(SummaryCache::new(args.threads.min(4096))))
        .build()
        .map_err(|e| e.to_string())?;
    let agent = Agent::builder()
        .model(run_model())
        .system_prompt("You are a support assistant.")
        .middleware(memory()?)
        .middleware(summarization)
        .checkpointer(checkpointer.clone())
        .build()
        .map_err(|e| e.to_string())?;
    let checker = memory()?;
    let history: Arc<dyn ChatHistoryStore> = store;
    Ok((agent, checkpointer, history, checker))
}

/// Lost and duplicated messages of one thread, in its latest checkpoint and its history.
async fn check_thread(
    prefix: &str,
    thread: usize,
    runs: usize,
    checkpointer: &dyn Checkpointer,
    history: &dyn ChatHistoryStore,
    memory: &SessionMemoryMiddleware,
) -> Result<(usize, usize), String> {
    let name = format!("{prefix}-{thread}");
    let expected: Vec<String> = (0..runs)
        .flat_map(|r| {
            let q = input_id(thread, r);
            let a = answer_id(&q);
            [q, a]
        })
        .collect();
    let state = checkpointer
        .latest(&name)
        .await
        .map_err(|e| e.to_string())?
        .map(|c| c.messages)
        .unwrap_or_default();
    let stored = history
        .after(&memory.scope_for_thread(&name), None, usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let (mut lost, mut duplicated) = (0, 0);
    for ids in [
        state.iter().map(|m| m.id().to_owned()).collect::<Vec<_>>(),
        stored.iter().map(|m| m.message.id().to_owned()).collect(),
    ] {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for id in &ids {
            *count.entry(id).or_default() += 1;
        }
        lost += expected
            .iter()
            .filter(|id| !count.contains_key(id.as_str()))
            .count();
        duplicated += count.values().map(|n| n - 1).sum::<usize>();
    }
    Ok((lost, duplicated))
}

async fn soak(args: Args) -> Result<bool, String> {
    let (agent, checkpointer, history, memory) = build(&args).await?;
    let runs_per_thread = args.messages / 2;
    // Fresh thread ids on every soak, so a database that already holds one stays valid.
    let prefix = format!("soak-{}", keel::message::new_id());
    let total = args.threads * runs_per_thread;
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..args.concurrency.min(total) {
        let (agent, next, prefix) = (agent.clone(), next.clone(), prefix.clone());
        let threads = args.threads;
        workers.push(tokio::spawn(async move {
            let mut steps_us = Vec::new();
            loop {
                let task = next.fetch_add(1, Ordering::Relaxed);
                if task >= total {
                    return Ok::<_, String>(steps_us);
                }
                let (run, thread) = (task / threads, task % threads);
                let input = Message::human(format!(
                    "Run {run}: the ingest job on PRJ-123 failed again with exit code 137, can you check the EU cluster?"
                ))
                .with_id(input_id(thread, run));
                let started = Instant::now();
                agent
                    .invoke(&format!("{prefix}-{thread}"), vec![input])
                    .await
                    .map_err(|e| format!("run {run} of thread {thread} failed: {e}"))?;
                steps_us.push(started.elapsed().as_micros() as u64);
            }
        }));
    }
    let mut steps = Vec::with_capacity(total);
    for w in workers {
        steps.extend(w.await.map_err(|e| format!("a worker panicked: {e}"))??);
    }
    let (mut lost, mut duplicated) = (0, 0);
    for thread in 0..args.threads {
        let (l, d) = check_thread(
            &prefix,
            thread,
            runs_per_thread,
            &*checkpointer,
            &*history,
            &memory,
        )
        .await?;
        lost += l;
        duplicated += d;
    }
    steps.sort_unstable();
    let pct = |p: f64| {
        steps
            .get(((steps.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    // Written by hand to keep the issue's key order (serde_json sorts object keys).
    println!(
        "{{\"runs\": {}, \"lost_messages\": {lost}, \"duplicate_messages\": {duplicated}, \"peak_rss_mb\": {:.1}, \"p50_step_us\": {}, \"p99_step_us\": {}}}",
        steps.len(),
        peak_rss_mb(),
        pct(0.50),
        pct(0.99)
    );
    Ok(lost == 0 && duplicated == 0)
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("soak: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("soak: cannot start the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(soak(args)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
