//! Agent runs against a checkpointer: 64 concurrent runs on one thread under each
//! multitask strategy, and the invariants every strategy must keep (nothing lost,
//! nothing duplicated, every run completes or gets its strategy's typed outcome); and
//! the check of a thread written before the delta schema, shared by the SQL backends.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)] // test code

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_agent::{Agent, AgentError, MultitaskStrategy};
use keel_core::message::{Content, Message, ToolCall, new_id};
use keel_core::state::StateUpdate;
use keel_core::store::{CheckpointWrite, Checkpointer, PutOutcome};
use keel_core::tool::{Tool, ToolError, ToolSpec};
use keel_testkit::ScriptedModel;
use serde_json::json;

/// Every strategy, in the order the tests run them.
pub const STRATEGIES: [MultitaskStrategy; 4] = [
    MultitaskStrategy::Reject,
    MultitaskStrategy::Enqueue,
    MultitaskStrategy::Interrupt,
    MultitaskStrategy::Rollback,
];

/// A tool that takes a little while (so runs overlap) and answers "done".
pub struct Slow(pub ToolSpec, pub Duration);

impl Slow {
    pub fn new(delay: Duration) -> Self {
        Slow(
            ToolSpec::new("slow", "waits, then answers", json!({"type": "object"})),
            delay,
        )
    }
}

#[async_trait]
impl Tool for Slow {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, _: serde_json::Value) -> Result<Content, ToolError> {
        tokio::time::sleep(self.1).await;
        Ok(Content::Text("done".into()))
    }
}

/// A model that calls `slow` once after each user message, then answers.
pub fn tool_then_answer() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::from_fn(|request| {
        let last = request.messages.last();
        Ok(if last.is_some_and(Message::is_human) {
            Message::ai("").with_tool_calls(vec![ToolCall::new(new_id(), "slow", json!({}))])
        } else {
            Message::ai("answered")
        })
    }))
}

/// An agent on `checkpointer` with this strategy.
pub fn agent(checkpointer: Arc<dyn Checkpointer>, strategy: MultitaskStrategy) -> Agent {
    Agent::builder()
        .model(tool_then_answer())
        .tool(Slow::new(Duration::from_millis(2)))
        .checkpointer(checkpointer)
        .multitask_strategy(strategy)
        .build()
        .unwrap()
}

/// What one run ended with.
#[derive(Debug)]
pub enum Ended {
    Completed(Vec<Message>),
    Rejected,
    Interrupted,
    RolledBack,
}

/// Runs `runs` concurrent runs on one fresh thread under `strategy` and checks every
/// invariant; returns how the runs ended, by kind.
pub async fn race(
    checkpointer: Arc<dyn Checkpointer>,
    strategy: MultitaskStrategy,
    runs: usize,
    stagger: Duration,
) -> HashMap<&'static str, usize> {
    let thread = format!("race-{strategy}-{}", new_id());
    let agent = agent(checkpointer.clone(), strategy);
    let start = Arc::new(tokio::sync::Barrier::new(runs));
    let handles: Vec<_> = (0..runs)
        .map(|i| {
            let (agent, thread, start) = (agent.clone(), thread.clone(), start.clone());
            tokio::spawn(async move {
                let input = Message::human(format!("question {i}")).with_id(format!("in-{i}"));
                start.wait().await;
                // Staggered arrivals land in the middle of the active run's tool loop.
                tokio::time::sleep(stagger * i as u32).await;
                let ended = match agent.invoke(&thread, vec![input]).await {
                    Ok(out) => Ended::Completed(out.state.messages.to_vec()),
                    Err(AgentError::Rejected { .. }) => Ended::Rejected,
                    Err(AgentError::Interrupted { .. }) => Ended::Interrupted,
                    Err(AgentError::RolledBack { .. }) => Ended::RolledBack,
                    Err(e) => panic!("run {i} under {strategy} failed: {e}"),
                };
                (i, ended)
            })
        })
        .collect();
    let mut ended = Vec::new();
    for h in handles {
        ended.push(h.await.unwrap());
    }
    let history = checkpointer.history(&thread).await.unwrap();
    let latest = checkpointer.latest(&thread).await.unwrap().unwrap();
    assert_eq!(
        history.last(),
        Some(&latest),
        "latest is the end of history"
    );
    let seqs: Vec<u64> = history.iter().map(|c| c.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "history has gaps: {seqs:?}"
    );
    let last = &latest.messages;
    let mut seen = HashSet::new();
    for m in last {
        assert!(seen.insert(m.id()), "message {:?} is duplicated", m.id());
    }
    // Every message committed anywhere stays, unless a rollback reverted it.
    let mut count: HashMap<&'static str, usize> = HashMap::new();
    for (i, e) in &ended {
        let input = format!("in-{i}");
        let kind = match e {
            Ended::Completed(state) => {
                for m in state.iter().skip_while(|m| m.id() != input) {
                    assert!(
                        seen.contains(m.id()),
                        "run {i} completed, but {:?} of its messages is lost",
                        m.id()
                    );
                }
                assert!(seen.contains(input.as_str()), "run {i}'s input is lost");
                "completed"
            }
            Ended::Rejected => {
                assert!(
                    !seen.contains(input.as_str()),
                    "a rejected run wrote its input"
                );
                "rejected"
            }
            Ended::Interrupted => {
                assert!(
                    seen.contains(input.as_str()),
                    "interrupted run {i} lost its input"
                );
                "interrupted"
            }
            Ended::RolledBack => {
                assert!(
                    !seen.contains(input.as_str()),
                    "rolled-back run {i}'s input is still in the thread"
                );
                "rolled_back"
            }
        };
        *count.entry(kind).or_default() += 1;
    }
    // Every tool call has its result right after it (a stopped run's call is patched).
    for (k, m) in last.iter().enumerate() {
        for call in m.tool_calls() {
            assert!(
                last[k + 1..]
                    .iter()
                    .take_while(|n| n.is_tool())
                    .any(|n| n.tool_call_id() == Some(call.id.as_str())),
                "tool call {} has no result after it",
                call.id
            );
        }
    }
    let allowed: &[&str] = match strategy {
        MultitaskStrategy::Reject => &["completed", "rejected"],
        MultitaskStrategy::Enqueue => &["completed"],
        MultitaskStrategy::Interrupt => &["completed", "interrupted"],
        MultitaskStrategy::Rollback => &["completed", "rolled_back"],
    };
    assert!(
        count.keys().all(|k| allowed.contains(k)),
        "{strategy}: outcomes {count:?}, allowed {allowed:?}"
    );
    assert!(
        count.get("completed").copied().unwrap_or(0) >= 1,
        "{count:?}"
    );
    if strategy == MultitaskStrategy::Enqueue {
        // Runs one after another: each input is followed by its own tool loop.
        assert_eq!(last.len(), runs * 4, "{strategy}: {} messages", last.len());
    }
    count
}

/// [`race`] under every strategy with 64 runs arriving together, then with interrupt
/// and rollback on runs arriving a millisecond apart (mid-step).
pub async fn race_every_strategy(checkpointer: Arc<dyn Checkpointer>) {
    for strategy in [MultitaskStrategy::Interrupt, MultitaskStrategy::Rollback] {
        let count = race(checkpointer.clone(), strategy, 64, Duration::from_millis(1)).await;
        eprintln!("{strategy}, staggered: {count:?}");
    }
    for strategy in STRATEGIES {
        let count = race(checkpointer.clone(), strategy, 64, Duration::ZERO).await;
        eprintln!("{strategy}: {count:?}");
        if strategy != MultitaskStrategy::Enqueue {
            // 64 runs arriving together must actually contend.
            assert!(
                count.get("completed").copied().unwrap_or(0) < 64,
                "{strategy}: no run was refused or stopped: {count:?}"
            );
        }
    }
}

/// Thread `t` as the first schema stored it (messages `a`, `b` at seq 1, values
/// `{"k": 1}`), read through `store` after the upgrade: its latest checkpoint reads back,
/// and the next write continues from it.
pub async fn continues_the_pre_delta_thread(store: &dyn Checkpointer) {
    let latest = store.latest("t").await.unwrap().unwrap();
    assert_eq!(latest.seq, 1);
    assert_eq!(
        latest.messages.iter().map(Message::id).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(latest.values["k"], json!(1));
    let next = CheckpointWrite {
        parent: Some(1),
        run_id: "r1".into(),
        node: "input".into(),
        update: StateUpdate::messages([Message::human("new").with_id("c")]),
        created_at_ms: 6,
    };
    assert_eq!(
        store.put("t", next).await.unwrap(),
        PutOutcome::Saved { seq: 2 }
    );
    assert_eq!(store.latest("t").await.unwrap().unwrap().messages.len(), 3);
}
