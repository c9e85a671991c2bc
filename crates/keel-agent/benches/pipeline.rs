//! Overhead of the middleware pipeline per model call.
//!
//! `agent/*`: a whole one-call run (`invoke`) with no middleware vs 10 no-op middlewares,
//! either implementing only `wrap_model_call` through `#[keel_core::middleware]` (the
//! agent skips the rest) or implementing nothing without the attribute (`Hooks::ALL`:
//! all six defaults run, the worst case). `next/*`: the `wrap_model_call` chain alone.
//! The model is a cheap in-bench echo and the checkpointer discards, so the differences
//! are the pipeline's own cost. `calibration/alloc_1KiB` shows how fast the machine was
//! during the run.
//!
//! Time is the bench thread's CPU time (`/proc/thread-self/schedstat`), not wall time:
//! the machine is shared, and a descheduled thread must not count as pipeline cost.
//! Everything runs on a current-thread runtime, so the thread's CPU time is the work.
//!
//! Run: `cargo bench -p keel-agent --bench pipeline`

// A benchmark whose setup fails must stop loudly, like a test.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use keel_agent::Agent;
use keel_core::message::Message;
use keel_core::middleware::{Middleware, ModelHandler, ModelRequest, ModelResponse, Next, Runtime};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelProfile, ModelSettings};
use keel_core::state::AgentState;
use keel_core::store::{Checkpoint, CheckpointWrite, Checkpointer, PutOutcome, StoreError};
use keel_testkit::cpu::ThreadCpu;

/// Answers "ok" to everything; costs a message allocation.
struct Echo(ModelProfile);

#[async_trait]
impl ChatModel for Echo {
    fn profile(&self) -> &ModelProfile {
        &self.0
    }
    async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
        Ok(Message::ai("ok"))
    }
}

/// Keeps nothing, so every iteration starts from an empty thread.
struct Discard;

#[async_trait]
impl Checkpointer for Discard {
    async fn put(&self, _: &str, w: CheckpointWrite) -> Result<PutOutcome, StoreError> {
        Ok(PutOutcome::Saved {
            seq: w.parent.map_or(0, |p| p + 1),
        })
    }
    async fn latest(&self, _: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(None)
    }
    async fn history(&self, _: &str) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(Vec::new())
    }
    async fn delete_thread(&self, _: &str) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// A pass-through middleware that implements no hook and keeps `Hooks::ALL` (no
/// attribute): the agent calls all six defaults.
struct Noop {
    name: String,
}

#[async_trait]
impl Middleware for Noop {
    fn name(&self) -> &str {
        &self.name
    }
}

/// A pass-through `wrap_model_call`, the only hook the attribute declares for it.
struct WrapNoop {
    name: String,
}

#[keel_core::middleware]
impl Middleware for WrapNoop {
    fn name(&self) -> &str {
        &self.name
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        next.run(request).await
    }
}

/// `n` no-op middlewares: wrapping the model call only, or with every hook.
fn stack(n: usize, wrap_only: bool) -> Vec<Arc<dyn Middleware>> {
    (0..n)
        .map(|i| {
            let name = format!("Noop{i}");
            if wrap_only {
                Arc::new(WrapNoop { name }) as Arc<dyn Middleware>
            } else {
                Arc::new(Noop { name })
            }
        })
        .collect()
}

fn agent(middleware: Vec<Arc<dyn Middleware>>) -> Agent {
    let mut b = Agent::builder()
        .model(Arc::new(Echo(ModelProfile::new("echo", "bench"))))
        .checkpointer(Arc::new(Discard));
    for m in middleware {
        b = b.middleware_shared(m);
    }
    b.build().unwrap()
}

/// [`stack`]'s `wrap_only`.
const WRAP_ONLY: bool = true;

/// Measured in the bench thread's CPU time (`keel_testkit::cpu::ThreadCpu`; the machine
/// is shared). The kernel refreshes that figure at scheduler ticks, so each sample must
/// span many ticks: the groups use flat sampling (every sample the same, long, iteration
/// count); the tick error averages out.
type Cpu = Criterion<ThreadCpu>;

fn bench_agent(c: &mut Cpu) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("agent");
    g.sampling_mode(SamplingMode::Flat);
    for (label, agent) in [
        ("bare", agent(Vec::new())),
        ("10_noop_wrap", agent(stack(10, WRAP_ONLY))),
        ("10_noop_all_hooks", agent(stack(10, !WRAP_ONLY))),
    ] {
        g.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async {
                let out = agent
                    .invoke("bench", vec![Message::human("hi")])
                    .await
                    .unwrap();
                black_box(out)
            })
        });
    }
    g.finish();
}

/// The terminal the chain ends in: the echo model, called directly.
struct Terminal;

#[async_trait]
impl ModelHandler for Terminal {
    async fn call(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let message = request.model.invoke(request.chat_request()).await?;
        Ok(ModelResponse::new(message))
    }
}

fn bench_next(c: &mut Cpu) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let request = ModelRequest {
        messages: Arc::new(vec![Message::human("hi")]),
        system: None,
        tools: Arc::new(Vec::new()),
        tool_choice: None,
        settings: ModelSettings::default(),
        model: Arc::new(Echo(ModelProfile::new("echo", "bench"))),
        state: Arc::new(AgentState::default()),
        runtime: Runtime::detached("bench"),
    };
    let mut g = c.benchmark_group("next");
    g.sampling_mode(SamplingMode::Flat);
    for (label, chain) in [("bare", Vec::new()), ("10_noop", stack(10, WRAP_ONLY))] {
        g.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async {
                let r = Next::new(&chain, &Terminal).run(request.clone()).await;
                black_box(r.unwrap())
            })
        });
    }
    g.finish();
}

/// The machine's current speed, measured in the same run: a 1 KiB heap allocation
/// (zeroed, then freed) costs ~20-40 ns on an idle modern x86 core. Figures from a
/// loaded machine scale with it.
fn bench_calibration(c: &mut Cpu) {
    let mut g = c.benchmark_group("calibration");
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("alloc_1KiB", |b| {
        b.iter(|| black_box(Box::new([0u8; 1024])))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench_agent, bench_next, bench_calibration
}
criterion_main!(benches);
