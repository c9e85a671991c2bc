//! Speculative summaries (`precompute_at`), two figures:
//!
//! 1. **Latency of the crossing call.** `THREADS` threads (default 40), each with a
//!    summary model that takes `DELAY_MS` (default 2000) per summary: a call at 16
//!    messages (0.8 of a 20-message trigger), then, after `GAP_MS` (default 2500: the
//!    model's answer and the user's next message), the call at 20 messages that crosses
//!    the trigger. Reported: what the middleware adds to that call, p50 and p99,
//!    blocking (`precompute_at: null`) and precomputed (`precompute_at: 0.8`).
//! 2. **Extra summary calls** over a replay of the bundled session
//!    (`examples/sessions/support-prj123.jsonl`) with `examples/summarization.yaml`'s
//!    triggers and an instant summary model: one model call after each user and tool
//!    message, background summaries settled before the next call.
//!
//! Run: `cargo bench -p keel-summarization --bench precompute`
//! (`THREADS=200 DELAY_MS=2000 SHARE=0.9 cargo bench ...`: more threads, another
//! `precompute_at`).

// A benchmark harness, like a test: a broken setup should stop it loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use keel_core::message::Message;
use keel_core::middleware::{ModelRequest, Runtime};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile, ModelSettings};
use keel_core::state::AgentState;
use keel_summarization::cache::SummaryCache;
use keel_summarization::config::{ContextSize, SummarizationConfig};
use keel_summarization::middleware::SummarizationMiddleware;

/// A summary model that takes `delay` per summary and counts its calls.
struct SlowSummarizer {
    profile: ModelProfile,
    delay: Duration,
    calls: AtomicUsize,
}

#[async_trait]
impl ChatModel for SlowSummarizer {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }
    async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        Ok(Message::ai(format!(
            "- summary #{n}: the user works on PRJ-123."
        )))
    }
}

fn model(delay: Duration) -> Arc<SlowSummarizer> {
    Arc::new(SlowSummarizer {
        profile: ModelProfile::new("bench-summarizer", "scripted"),
        delay,
        calls: AtomicUsize::new(0),
    })
}

fn request(
    messages: &[Message],
    system: Option<&Message>,
    model: Arc<dyn ChatModel>,
    thread: &str,
) -> ModelRequest {
    ModelRequest {
        messages: Arc::new(messages.to_vec()),
        system: system.cloned(),
        tools: Arc::new(Vec::new()),
        tool_choice: None,
        settings: ModelSettings::default(),
        model,
        state: Arc::new(AgentState::default()),
        runtime: Runtime::detached(thread),
    }
}

fn chat(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let text = format!("turn {i}: {}", "words about the deployment ".repeat(8));
            let m = if i % 2 == 0 {
                Message::human(text)
            } else {
                Message::ai(text)
            };
            m.with_id(format!("m{i}"))
        })
        .collect()
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The middleware's share of each crossing call, one per thread.
async fn crossing_latency(
    share: Option<f64>,
    threads: usize,
    delay: Duration,
    gap: Duration,
) -> Vec<Duration> {
    let config = SummarizationConfig::builder()
        .trigger(ContextSize::Messages(20))
        .keep(ContextSize::Messages(6))
        .precompute_at(share)
        .precompute_max_concurrent(threads.max(1))
        .build()
        .expect("config");
    let mw = Arc::new(
        SummarizationMiddleware::builder(config)
            .cache(Arc::new(SummaryCache::new(threads * 2)))
            .build()
            .expect("middleware"),
    );
    let summarizer = model(delay);
    let mut tasks = Vec::new();
    for t in 0..threads {
        let (mw, summarizer) = (mw.clone(), summarizer.clone());
        tasks.push(tokio::spawn(async move {
            let thread = format!("thread-{t}");
            let history = chat(20);
            mw.prepare(&request(&history[..16], None, summarizer.clone(), &thread))
                .await;
            tokio::time::sleep(gap).await;
            let crossing = request(&history, None, summarizer, &thread);
            let started = Instant::now();
            let prepared = mw.prepare(&crossing).await;
            let took = started.elapsed();
            assert!(
                prepared.report.source.is_some(),
                "the crossing call sends a summary"
            );
            took
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out.sort();
    out
}

/// Summary calls over a replay of the bundled session.
async fn replay_calls(share: Option<f64>) -> (usize, u64) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let transcript =
        keel_core::transcript::read_jsonl(root.join("examples/sessions/support-prj123.jsonl"))
            .expect("the bundled session");
    let mut config = SummarizationConfig::from_yaml_file(root.join("examples/summarization.yaml"))
        .expect("the bundled configuration")
        .config;
    config.precompute_at = share;
    let mw = SummarizationMiddleware::builder(config)
        .cache(Arc::new(SummaryCache::new(4)))
        .build()
        .expect("middleware");
    let summarizer = model(Duration::ZERO);
    let (system, messages): (Vec<Message>, Vec<Message>) = transcript
        .into_iter()
        .partition(|m| m.role() == keel_core::message::Role::System);
    for i in 0..messages.len() {
        let answered_next = messages.get(i + 1).is_none_or(Message::is_ai);
        if !(messages[i].is_human() || messages[i].is_tool()) || !answered_next {
            continue;
        }
        let p = mw
            .prepare(&request(
                &messages[..=i],
                system.first(),
                summarizer.clone(),
                "replay",
            ))
            .await;
        if std::env::var("TRACE").is_ok() {
            eprintln!(
                "{share:?} {i} {:?} {}->{} calls={} ahead={}",
                p.report.action,
                p.report.tokens_before,
                p.report.tokens_after,
                summarizer.calls.load(Ordering::SeqCst),
                mw.precomputed_count()
            );
        }
        mw.settle("replay").await;
    }
    (
        summarizer.calls.load(Ordering::SeqCst),
        mw.precomputed_count(),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let threads = env("THREADS", 40) as usize;
    let delay = Duration::from_millis(env("DELAY_MS", 2000));
    let gap = Duration::from_millis(env("GAP_MS", 2500));
    println!("crossing call, {threads} threads, summary model {delay:?}, {gap:?} between calls");
    let share = std::env::var("SHARE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.8);
    for (name, share) in [("blocking", None), ("precomputed", Some(share))] {
        let lat = crossing_latency(share, threads, delay, gap).await;
        println!(
            "  {name:<12} p50 {:>10.3} ms   p99 {:>10.3} ms",
            percentile(&lat, 0.5).as_secs_f64() * 1e3,
            percentile(&lat, 0.99).as_secs_f64() * 1e3,
        );
    }
    let (off, _) = replay_calls(None).await;
    let (on, ahead) = replay_calls(Some(share)).await;
    println!(
        "replay of the bundled session: {off} summary calls blocking, {on} with precompute_at {share} ({ahead} written ahead): {:+.1}%",
        (on as f64 - off as f64) * 100.0 / off.max(1) as f64
    );
}
