//! Keel's side of `scripts/compare/run.sh`: the same measurements as
//! `scripts/compare/langchain_bench.py`, on the same generated thread (JSONL in
//! `KEEL_BENCH_THREAD`), through the middleware's public hook (`wrap_model_call` with a
//! model handler that answers at once).
//!
//! - `passthrough_10k_growing`: the first 10,000 messages, growing by one message of the
//!   file per call (wrapping back to 10,000 after the last one, outside the timing);
//!   trigger far above the count, so every call passes through. LangChain's
//!   `before_model` under the same trigger is the comparison.
//! - `passthrough_count_only_10k_growing` (diagnostic): the token count alone, same
//!   counter and thread, to show how much of the pass-through is counting.
//! - `compaction_10k_warm_counts`: one full compaction pass over the first 10,000
//!   messages (trigger tokens 100,000, keep 20 messages, every other setting at its
//!   default: trim 4,000, headroom 0.75, rescue on) with a fake summary model, as it
//!   happens on the growing thread: the earlier calls have counted its messages, the
//!   summary cache is cold (a fresh thread id per pass), so every pass plans, trims,
//!   condenses the overflow, calls the summarizer and assembles the request. This is the
//!   pass LangChain's compaction figure is compared with (the 20x target).
//! - `compaction_10k_cold`: the same pass on a cold process: every pass sees the thread
//!   under fresh message ids (nothing counted or fingerprinted) and a fresh thread id
//!   (no summary cached), like the first call after a restart.
//! - `cold_floor_10k` (diagnostic): fingerprinting and counting each message of the cold
//!   thread once and nothing else, the part of the cold pass no design that keeps exact
//!   counts and content-verified summary reuse can skip.
//! - `cold_read_10k` (diagnostic): reading every byte of the cold thread's text once,
//!   with no work on it.
//!
//! Requests are built as the agent builds them: the messages belong to the agent state
//! and the request shares them, so the thread outlives the call (LangChain's
//! `before_model` likewise reads a state that lives on). Freeing a 10,000-message thread
//! is therefore not timed on either side.
//!
//! `KEEL_BENCH_JSON` (optional) receives a description of each bench for the report.

// A benchmark harness, like a test: a broken setup must stop it loudly.
#![allow(clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use keel_core::message::Message;
use keel_core::middleware::{Middleware, ModelHandler, ModelRequest, ModelResponse, Next, Runtime};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile, ModelSettings};
use keel_core::state::AgentState;
use keel_core::tokens::TokenCounter;
use keel_summarization::cache::SummaryCache;
use keel_summarization::config::{ContextSize, SummarizationConfig};
use keel_summarization::middleware::SummarizationMiddleware;

/// Must match `scripts/compare/langchain_bench.py`.
const BASE: usize = 10_000;
const COMPACTION_TRIGGER_TOKENS: u64 = 100_000;
const KEEP_MESSAGES: u64 = 20;
const FAKE_SUMMARY: &str = "FAKE SUMMARY: the user asked for work; tools ran; results were noted.";

/// The summary model: answers at once with a fixed text (LangChain side: FakeListChatModel).
struct FakeSummarizer(ModelProfile);

#[async_trait]
impl ChatModel for FakeSummarizer {
    fn profile(&self) -> &ModelProfile {
        &self.0
    }
    async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
        Ok(Message::ai(FAKE_SUMMARY))
    }
}

/// The main model call behind the middleware: answers at once.
struct Answer(Message);

#[async_trait]
impl ModelHandler for Answer {
    async fn call(&self, _request: ModelRequest) -> Result<ModelResponse, ModelError> {
        Ok(ModelResponse::new(self.0.clone()))
    }
}

fn middleware(trigger: u64, cache: Arc<SummaryCache>) -> SummarizationMiddleware {
    let config = SummarizationConfig::builder()
        .trigger(ContextSize::Tokens(trigger))
        .keep(ContextSize::Messages(KEEP_MESSAGES))
        .build()
        .expect("valid config");
    SummarizationMiddleware::builder(config)
        .cache(cache)
        .build()
        .expect("valid middleware")
}

/// A request as the agent builds it: its messages are the state's (one shared `Arc`),
/// so the thread outlives the model call and freeing it is not part of the call.
fn request(messages: Vec<Message>, model: &Arc<dyn ChatModel>, thread: &str) -> ModelRequest {
    request_in(&AgentState::with_messages(messages), model, thread)
}

/// A request on `state` as the agent loop makes it: the state's own message list.
fn request_in(state: &AgentState, model: &Arc<dyn ChatModel>, thread: &str) -> ModelRequest {
    ModelRequest {
        messages: state.messages.clone(),
        system: None,
        tools: Arc::new(Vec::new()),
        tool_choice: None,
        settings: ModelSettings::default(),
        model: model.clone(),
        state: Arc::new(state.clone()),
        runtime: Runtime::detached(thread),
    }
}

fn with_fresh_ids(messages: &[Message], pass: u64) -> Vec<Message> {
    messages
        .iter()
        .map(|m| {
            let id = format!("{}~{pass}", m.id());
            m.clone().with_id(id)
        })
        .collect()
}

/// Adds up every byte of `m`'s text (see the `cold_read_10k` diagnostic).
fn read_every_byte(m: &Message) -> u64 {
    fn bytes(s: &str) -> u64 {
        s.bytes().map(u64::from).sum()
    }
    fn value(v: &serde_json::Value) -> u64 {
        match v {
            serde_json::Value::String(s) => bytes(s),
            serde_json::Value::Array(a) => a.iter().map(value).sum(),
            serde_json::Value::Object(o) => o.iter().map(|(k, x)| bytes(k) + value(x)).sum(),
            _ => 1,
        }
    }
    let mut n = bytes(m.id()) + m.tool_call_id().map_or(0, bytes);
    match m.content() {
        keel_core::message::Content::Text(s) => n += bytes(s),
        keel_core::message::Content::Parts(parts) => {
            for p in parts {
                if let keel_core::message::ContentPart::Text(t) = p {
                    n += bytes(&t.text);
                }
            }
        }
    }
    for c in m.tool_calls() {
        n += bytes(&c.id) + bytes(&c.name) + value(&c.args);
    }
    n
}

fn benches(c: &mut Criterion) {
    let path = std::env::var("KEEL_BENCH_THREAD")
        .expect("KEEL_BENCH_THREAD: the thread JSONL written by langchain_bench.py gen-thread");
    let all = keel_core::transcript::read_jsonl(&path).expect("thread JSONL");
    assert!(
        all.len() > BASE,
        "{path}: {} messages, need more than {BASE}",
        all.len()
    );
    let base = all[..BASE].to_vec();
    let growth = all[BASE..].to_vec();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let model: Arc<dyn ChatModel> =
        Arc::new(FakeSummarizer(ModelProfile::new("fake-summarizer", "fake")));
    let answer = Answer(Message::ai("ok").with_id("answer"));
    let call = |mw: &SummarizationMiddleware, req: ModelRequest| {
        rt.block_on(mw.wrap_model_call(req, Next::new(&[], &answer)))
            .expect("model call")
    };

    let mut group = c.benchmark_group("vs_langchain");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(2));

    // Pass-through on a growing thread. Only the hook call is timed.
    let mw = middleware(1_000_000_000, Arc::new(SummaryCache::new(16)));
    // The thread is one agent state that grows by appending, as in a run: its lineage
    // lets the counter and the middleware's memo look at the new message only. Wrapping
    // around (truncating) is an edit, so it starts a fresh lineage.
    let mut thread = AgentState::with_messages(base.clone());
    let mut next = 0usize;
    group.bench_function("passthrough_10k_growing", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                if next == growth.len() {
                    Arc::make_mut(&mut thread.messages).truncate(BASE);
                    thread.renew_lineage();
                    next = 0;
                }
                Arc::make_mut(&mut thread.messages).push(growth[next].clone());
                next += 1;
                let req = request_in(&thread, &model, "passthrough");
                let start = Instant::now();
                let out = call(&mw, req);
                spent += start.elapsed();
                black_box(out);
            }
            spent
        })
    });
    // The pass-through really passed through (no summary was made or cached).
    assert!(mw.cache().is_empty(), "the pass-through bench summarized");

    // Diagnostic: how much of the pass-through is the token count itself (the same
    // shared cached counter the middleware uses, same growing thread).
    let counter = mw.counter_for(model.profile());
    group.bench_function("passthrough_count_only_10k_growing", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                if next == growth.len() {
                    Arc::make_mut(&mut thread.messages).truncate(BASE);
                    thread.renew_lineage();
                    next = 0;
                }
                Arc::make_mut(&mut thread.messages).push(growth[next].clone());
                next += 1;
                let start = Instant::now();
                let n = counter.count_messages_in(&thread.messages, Some(thread.lineage));
                spent += start.elapsed();
                black_box(n);
            }
            spent
        })
    });

    // Full compaction, nothing warm.
    let cache = Arc::new(SummaryCache::new(1));
    let mw = middleware(COMPACTION_TRIGGER_TOKENS, cache.clone());
    let pass = AtomicU64::new(0);
    let check = call(&mw, request(base.clone(), &model, "check"));
    assert_eq!(
        check.message.text(),
        "ok",
        "the compaction setup did not reach the model"
    );
    assert_eq!(cache.len(), 1, "the compaction setup did not summarize");
    group.bench_function("compaction_10k_cold", |b| {
        b.iter_batched(
            || {
                let p = pass.fetch_add(1, Ordering::Relaxed);
                request(with_fresh_ids(&base, p), &model, &format!("compaction-{p}"))
            },
            // The state (and with it the thread) is returned, so criterion drops it
            // after the timed call, as an agent keeps its state after a model call.
            |req| {
                let state = req.state.clone();
                (call(&mw, req), state)
            },
            BatchSize::PerIteration,
        )
    });

    // Diagnostic: the least any cold pass must do, whatever its design, as long as the
    // trigger and the report use exact counts and a summary is reused only for a prefix
    // verified by content: fingerprint every message and count it once (no cache, no
    // planning, no summary). LangChain's compaction time over this is the highest ratio
    // a cold pass can reach.
    let approx = keel_tokens::ApproximateCounter::langchain();
    group.bench_function("cold_floor_10k", |b| {
        b.iter_batched(
            || with_fresh_ids(&base, pass.fetch_add(1, Ordering::Relaxed)),
            |msgs| {
                let (mut h, mut n) = (0u64, 0u64);
                for m in &msgs {
                    h ^= m.fingerprint();
                    n += approx.count_message(m);
                }
                (black_box((h, n)), msgs)
            },
            BatchSize::PerIteration,
        )
    });

    // Diagnostic: reading every byte of the cold thread's text once (ids, content, call
    // names, ids and arguments), with no hashing or counting: what touching a thread
    // that is not in cache costs before any work is done on it.
    group.bench_function("cold_read_10k", |b| {
        b.iter_batched(
            || with_fresh_ids(&base, pass.fetch_add(1, Ordering::Relaxed)),
            |msgs| {
                let sum: u64 = msgs.iter().map(read_every_byte).sum();
                (black_box(sum), msgs)
            },
            BatchSize::PerIteration,
        )
    });

    // Full compaction when the counts are warm (the summary cache is still cold).
    let req = request(base.clone(), &model, "warm");
    let _ = call(&mw, req.clone());
    group.bench_function("compaction_10k_warm_counts", |b| {
        b.iter_batched(
            || {
                let p = pass.fetch_add(1, Ordering::Relaxed);
                let mut r = req.clone();
                r.runtime = Runtime::detached(&format!("warm-{p}"));
                r
            },
            |r| {
                let state = r.state.clone();
                (call(&mw, r), state)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();

    if let Ok(out) = std::env::var("KEEL_BENCH_JSON") {
        let doc = serde_json::json!({
            "side": "keel",
            "thread": path,
            "base_messages": BASE,
            "growth_messages": growth.len(),
            "benches": {
                "passthrough": {
                    "id": "passthrough_10k_growing",
                    "what": format!("Keel wrap_model_call under the trigger, thread growing {BASE} -> {} by one message per call", BASE + growth.len()),
                },
                "compaction": {
                    "id": "compaction_10k_warm_counts",
                    "what": "Keel full compaction pass as it happens on the growing thread: the earlier calls counted its messages, the summary cache is cold, so the pass plans, trims, condenses the overflow, calls the fake summarizer and assembles the request; trigger 100000 tokens, keep 20 messages, defaults otherwise (trim 4000, headroom 0.75, rescue on)",
                },
                "compaction_cold": {
                    "id": "compaction_10k_cold",
                    "what": "the same pass on a cold process: fresh message ids (nothing counted or fingerprinted) and a fresh thread (no cached summary), e.g. the first call after a restart on a 10000-message thread",
                },
                "cold_floor": {
                    "id": "cold_floor_10k",
                    "what": "diagnostic: fingerprint and count every message of the cold thread once, nothing else: the least a cold pass does while counts are exact and summaries are reused only for a content-verified prefix (LangChain's compaction over this is the ceiling of the cold ratio)",
                },
                "cold_read": {
                    "id": "cold_read_10k",
                    "what": "diagnostic: read every byte of the cold thread's text once (ids, content, tool calls), no hashing or counting: what touching a thread that is not in cache costs",
                },
                "passthrough_count_only": {
                    "id": "passthrough_count_only_10k_growing",
                    "what": "diagnostic: the token count alone (the middleware's shared cached counter) on the same growing thread",
                },
            },
        });
        std::fs::write(&out, serde_json::to_string_pretty(&doc).expect("json"))
            .unwrap_or_else(|e| panic!("{out}: {e}"));
    }
}

criterion_group!(vs_langchain, benches);
criterion_main!(vs_langchain);
