//! Per-call cost of the middleware on a 10,000-message agent thread:
//!
//! - `pass_through/10k_growing`: the threshold check on a thread growing by one message
//!   per call, under every trigger (what every model call of a long thread pays), with
//!   requests that do not carry the state's lineage (a list rebuilt by an outer layer);
//! - `pass_through_state/{100,10k}`: the same call as the agent makes it, on one agent
//!   state growing by appending (the request carries its lineage), on a 100- and a
//!   10,000-message thread: the cost of a call should not depend on the thread's length;
//!   `pass_through_state/10k_near_trigger` is the 10,000-message call within half of the
//!   trigger, where each call also keeps the list's planning index up to date;
//! - `cache_reuse/10k_growing`: over the trigger, the cached summary still fits;
//! - `full_compaction/10k`: a full compaction pass (plan, rescue, headroom, transcript,
//!   fold) with a fake summary model that answers instantly, cold cache every pass.
//!
//! Run: `cargo bench -p keel-summarization --bench summarization`

// A benchmark harness, like a test: a broken setup should stop it loudly.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::{ModelRequest, Runtime};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile, ModelSettings};
use keel_core::state::AgentState;
use keel_summarization::cache::SummaryCache;
use keel_summarization::config::{ContextSize, SummarizationConfig};
use keel_summarization::middleware::{Action, SummarizationMiddleware};
use serde_json::json;

/// A summary model that answers at once (the fake summarizer of the comparison).
struct FakeSummarizer(ModelProfile);

#[async_trait]
impl ChatModel for FakeSummarizer {
    fn profile(&self) -> &ModelProfile {
        &self.0
    }
    async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
        Ok(Message::ai(
            "- the user is debugging a flaky CI job; logs were read; next: pin the runner image",
        ))
    }
}

/// A deterministic agent thread: user turns, answers, tool calls (some parallel, some
/// skill reads) with outputs of varied length.
fn thread(n: usize) -> Vec<Message> {
    let mut out = Vec::with_capacity(n + 8);
    let mut i = 0usize;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rand = move |m: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % m
    };
    while out.len() < n {
        out.push(
            Message::human(format!(
                "turn {i}: please check the build log and tell me what failed {}",
                "detail ".repeat(rand(20) as usize)
            ))
            .with_id(format!("u{i}")),
        );
        let calls = 1 + rand(3) as usize;
        let tc: Vec<ToolCall> = (0..calls)
            .map(|c| {
                if rand(5) == 0 {
                    ToolCall::new(
                        format!("c{i}_{c}"),
                        "read_file",
                        json!({"path": format!("/mnt/skills/ci/{c}/SKILL.md")}),
                    )
                } else {
                    ToolCall::new(
                        format!("c{i}_{c}"),
                        "bash",
                        json!({"cmd": format!("grep -n error job{i}.log")}),
                    )
                }
            })
            .collect();
        out.push(Message::ai("").with_tool_calls(tc).with_id(format!("a{i}")));
        for c in 0..calls {
            let len = 50 + rand(1500) as usize;
            out.push(
                Message::tool(format!("c{i}_{c}"), "log line ".repeat(len / 9))
                    .with_id(format!("t{i}_{c}")),
            );
        }
        out.push(
            Message::ai(format!(
                "The failure in turn {i} is a missing dependency; I will pin it. {}",
                "because ".repeat(rand(30) as usize)
            ))
            .with_id(format!("f{i}")),
        );
        i += 1;
    }
    out.truncate(n);
    // End on a whole turn so the request is pair-valid.
    while out
        .last()
        .is_some_and(|m| m.is_tool() || !m.tool_calls().is_empty())
    {
        out.pop();
    }
    out
}

fn request(messages: Vec<Message>, model: Arc<dyn ChatModel>) -> ModelRequest {
    ModelRequest {
        messages: Arc::new(messages),
        system: Some(Message::system("You are a CI assistant.")),
        tools: Arc::new(vec![]),
        tool_choice: None,
        settings: ModelSettings::default(),
        model,
        state: Arc::new(AgentState::default()),
        runtime: Runtime::detached("bench-thread"),
    }
}

fn middleware(trigger: u64, cache: Arc<SummaryCache>) -> SummarizationMiddleware {
    let config = SummarizationConfig::builder()
        .trigger(ContextSize::Tokens(trigger))
        .keep(ContextSize::Messages(20))
        .build()
        .expect("valid config");
    SummarizationMiddleware::builder(config)
        .cache(cache)
        .build()
        .expect("valid middleware")
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let model: Arc<dyn ChatModel> = Arc::new(FakeSummarizer(ModelProfile::new("fake", "fake")));
    let base = thread(10_000);
    let extra = thread(12_000).split_off(base.len());

    // Pass-through: under every trigger; the thread grows by one message per call
    // (wrapping back to 10,000 so every call sees the same size of thread).
    // The largest trigger a configuration accepts: never reached by the bench thread.
    let mw = middleware(1_000_000_000, Arc::new(SummaryCache::new(16)));
    let mut grow = base.clone();
    let mut k = 0usize;
    c.bench_function("pass_through/10k_growing", |b| {
        b.iter(|| {
            if grow.len() >= base.len() + extra.len() {
                grow.truncate(base.len());
                k = 0;
            }
            grow.push(extra[k].clone());
            k += 1;
            let req = request(std::mem::take(&mut grow), model.clone());
            let p = rt.block_on(mw.prepare(&req));
            debug_assert_eq!(p.report.action, Action::PassThrough);
            drop(p);
            grow = Arc::try_unwrap(req.messages).unwrap_or_else(|a| (*a).clone());
            black_box(&grow);
        })
    });

    // Pass-through as the agent calls it: the request shares the state's own list, so
    // its lineage tells the counter and the memo which messages are new. Each size grows
    // its own state by one message per call and wraps back (an edit, new lineage)
    // outside the timing.
    // `near_trigger`: the trigger sits just above the thread (every call within half of
    // it), so each call also extends the list's planning index by the new message.
    for (name, size, near_trigger) in [
        ("pass_through_state/100", 100, false),
        ("pass_through_state/10k", 10_000, false),
        ("pass_through_state/10k_near_trigger", 10_000, true),
    ] {
        let start = thread(size);
        let more = thread(size + 2_000).split_off(start.len());
        let trigger = if near_trigger {
            let mut all = start.clone();
            all.extend(more.iter().cloned());
            let counter = middleware(1_000_000_000, Arc::new(SummaryCache::new(1)))
                .counter_for(model.profile());
            counter.count_messages(&all) + 1_000
        } else {
            1_000_000_000
        };
        let mw = middleware(trigger, Arc::new(SummaryCache::new(16)));
        let mut state = AgentState::with_messages(start.clone());
        let mut k = 0usize;
        c.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut spent = std::time::Duration::ZERO;
                for _ in 0..iters {
                    if k == more.len() {
                        Arc::make_mut(&mut state.messages).truncate(start.len());
                        state.renew_lineage();
                        k = 0;
                    }
                    Arc::make_mut(&mut state.messages).push(more[k].clone());
                    k += 1;
                    let req = ModelRequest {
                        messages: state.messages.clone(),
                        system: Some(Message::system("You are a CI assistant.")),
                        tools: Arc::new(vec![]),
                        tool_choice: None,
                        settings: ModelSettings::default(),
                        model: model.clone(),
                        state: Arc::new(state.clone()),
                        runtime: Runtime::detached("bench-state"),
                    };
                    let t = std::time::Instant::now();
                    let p = rt.block_on(mw.prepare(&req));
                    spent += t.elapsed();
                    debug_assert_eq!(p.report.action, Action::PassThrough);
                    black_box(p);
                }
                spent
            })
        });
    }

    // Cache reuse: over the trigger; the summary made once still fits.
    let cache = Arc::new(SummaryCache::new(16));
    let mw = middleware(60_000, cache);
    let first = rt.block_on(mw.prepare(&request(base.clone(), model.clone())));
    assert_eq!(
        first.report.action,
        Action::Compacted,
        "{:?}",
        first.report.action
    );
    let mut grow = base.clone();
    let mut k = 0usize;
    c.bench_function("cache_reuse/10k_growing", |b| {
        b.iter(|| {
            if k >= 20 {
                grow.truncate(base.len());
                k = 0;
            }
            grow.push(Message::human(format!("follow-up {k}")).with_id(format!("x{k}")));
            k += 1;
            let req = request(std::mem::take(&mut grow), model.clone());
            let p = rt.block_on(mw.prepare(&req));
            debug_assert_eq!(p.report.action, Action::CacheReused);
            drop(p);
            grow = Arc::try_unwrap(req.messages).unwrap_or_else(|a| (*a).clone());
        })
    });

    // Full compaction pass, cold cache each time.
    let req = request(base.clone(), model.clone());
    c.bench_function("full_compaction/10k", |b| {
        b.iter(|| {
            let mw = middleware(60_000, Arc::new(SummaryCache::new(1)));
            let p = rt.block_on(mw.prepare(&req));
            debug_assert_eq!(p.report.action, Action::Compacted);
            black_box(p)
        })
    });
}

criterion_group! {
    name = summarization;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(4));
    targets = benches
}
criterion_main!(summarization);
