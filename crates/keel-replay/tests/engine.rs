//! The replay loop with small middleware written for these tests: hook order, what is
//! recorded as sent, how summary calls, cache hits, events and broken pairs are
//! reported, and what reaches the chat history store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::{
    HookOutcome, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next, Runtime,
};
use keel_core::model::ModelError;
use keel_core::state::{AgentState, StateUpdate};
use keel_replay::{Quiet, ReplayEngine, ReplayError, ReplayObserver, Transcript};
use keel_tokens::ApproximateCounter;
use parking_lot::Mutex;
use serde_json::json;

fn counter() -> Arc<ApproximateCounter> {
    Arc::new(ApproximateCounter::langchain())
}

/// `[h, ai(call), tool, ai]` then `[h, ai]`: two turns, three model calls.
fn two_turns() -> Transcript {
    Transcript::from_messages(vec![
        Message::system("be brief").with_id("s"),
        Message::human("list the files").with_id("h1"),
        Message::ai("")
            .with_tool_calls(vec![ToolCall::new("c1", "ls", json!({"dir": "/"}))])
            .with_id("a1"),
        Message::tool("c1", "a.txt b.txt").with_id("t1"),
        Message::ai("a.txt and b.txt").with_id("a2"),
        Message::human("thanks").with_id("h2"),
        Message::ai("you're welcome").with_id("a3"),
    ])
    .unwrap()
}

/// Logs every hook it sees into a shared list.
struct Log {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl Log {
    fn push(&self, what: &str) {
        self.log.lock().push(format!("{}.{what}", self.name));
    }
}

#[async_trait]
impl Middleware for Log {
    fn name(&self) -> &str {
        self.name
    }
    async fn before_agent(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.push("before_agent");
        Ok(HookOutcome::proceed())
    }
    async fn before_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.push("before_model");
        Ok(HookOutcome::proceed())
    }
    async fn wrap_model_call(
        &self,
        r: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        self.push("wrap");
        next.run(r).await
    }
    async fn after_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.push("after_model");
        Ok(HookOutcome::proceed())
    }
    async fn after_agent(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.push("after_agent");
        Ok(HookOutcome::proceed())
    }
}

#[tokio::test]
async fn hooks_run_in_agent_order_once_per_turn_and_per_call() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let stack: Vec<Arc<dyn Middleware>> = vec![
        Arc::new(Log {
            name: "A",
            log: log.clone(),
        }),
        Arc::new(Log {
            name: "B",
            log: log.clone(),
        }),
    ];
    let replay = ReplayEngine::new(stack, counter())
        .run(&two_turns(), &mut Quiet)
        .await
        .unwrap();
    assert_eq!(replay.report.calls.len(), 3);
    let call = [
        "A.before_model",
        "B.before_model",
        "A.wrap",
        "B.wrap",
        "B.after_model",
        "A.after_model",
    ];
    let mut expected: Vec<&str> = vec!["A.before_agent", "B.before_agent"];
    expected.extend(call);
    expected.extend(call);
    expected.extend([
        "B.after_agent",
        "A.after_agent",
        "A.before_agent",
        "B.before_agent",
    ]);
    expected.extend(call);
    expected.extend(["B.after_agent", "A.after_agent"]);
    assert_eq!(*log.lock(), expected);
}

#[tokio::test]
async fn without_middleware_the_request_is_the_history_and_the_baselines_agree() {
    let t = two_turns();
    let replay = ReplayEngine::new(vec![], counter())
        .run(&t, &mut Quiet)
        .await
        .unwrap();
    let r = &replay.report;
    let sizes: Vec<(usize, usize, usize)> = r
        .calls
        .iter()
        .map(|c| (c.line, c.history_messages, c.request_messages))
        .collect();
    assert_eq!(sizes, vec![(3, 1, 1), (5, 3, 3), (7, 5, 5)]);
    for c in &r.calls {
        assert_eq!(c.request_tokens, c.history_tokens, "nothing compacted");
        assert!(!c.summary_call && !c.cache_hit && c.pair_violation.is_none());
    }
    // Under 100 messages the last-100 baseline is the full history.
    assert_eq!(r.totals.sent_tokens, r.totals.full_history_tokens);
    assert_eq!(
        r.totals.baseline_last100_tokens,
        r.totals.full_history_tokens
    );

    let sent = replay.requests[2].as_ref().unwrap();
    assert_eq!(sent.system.as_ref().unwrap().text(), "be brief");
    let ids: Vec<&str> = sent.messages.iter().map(Message::id).collect();
    assert_eq!(ids, ["h1", "a1", "t1", "a2", "h2"]);
    let body = sent.to_json();
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(
        body["messages"][2]["tool_calls"][0]["function"]["name"],
        "ls"
    );
    assert_eq!(body["messages"][3]["tool_call_id"], "c1");
}

#[tokio::test]
async fn the_last_100_baseline_counts_only_the_window() {
    let mut msgs = Vec::new();
    for i in 0..60 {
        msgs.push(Message::human(format!("question {i}")).with_id(format!("h{i}")));
        msgs.push(Message::ai(format!("answer {i}")).with_id(format!("a{i}")));
    }
    let t = Transcript::from_messages(msgs).unwrap();
    let replay = ReplayEngine::new(vec![], counter())
        .run(&t, &mut Quiet)
        .await
        .unwrap();
    let c = counter();
    let expected: u64 = (0..60)
        .map(|call| {
            let history = &t.messages()[..2 * call + 1];
            let window = &history[history.len().saturating_sub(100)..];
            keel_core::tokens::TokenCounter::count_messages(c.as_ref(), window)
        })
        .sum();
    assert_eq!(replay.report.totals.baseline_last100_tokens, expected);
    assert!(expected < replay.report.totals.full_history_tokens);
}

/// Keeps the last `keep` messages, cutting blindly (so it can orphan a tool result).
struct NaiveWindow {
    keep: usize,
}

#[async_trait]
impl Middleware for NaiveWindow {
    fn name(&self) -> &str {
        "NaiveWindow"
    }
    async fn wrap_model_call(
        &self,
        r: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let cut = r.messages.len().saturating_sub(self.keep);
        let recent = r.messages[cut..].to_vec();
        next.run(r.with_messages(recent)).await
    }
}

#[tokio::test]
async fn a_request_with_an_orphan_tool_result_is_reported() {
    let replay = ReplayEngine::new(vec![Arc::new(NaiveWindow { keep: 1 })], counter())
        .run(&two_turns(), &mut Quiet)
        .await
        .unwrap();
    // Call 2 sends only the tool result `t1`, without the AI message that called it.
    let c = &replay.report.calls[1];
    assert!(c.pair_violation.as_deref().unwrap().contains("c1"), "{c:?}");
    assert_eq!(replay.report.totals.pair_violations, 1);
    assert!(replay.report.render().contains("INVALID REQUEST"));
}

/// Replaces all but the last two messages with a summary, cached per thread until the
/// history grows by `refresh` messages, and reports each compaction with the
/// `context_compacted` event the real middleware emits.
struct TestSummarizer {
    refresh: usize,
    cache: Mutex<HashMap<String, (usize, String)>>,
}

#[async_trait]
impl Middleware for TestSummarizer {
    fn name(&self) -> &str {
        "TestSummarizer"
    }
    async fn wrap_model_call(
        &self,
        r: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        if r.messages.len() < 3 {
            return next.run(r).await;
        }
        let cut = r.messages.len() - 2;
        let thread = r.runtime.thread_id.to_string();
        let cached = self.cache.lock().get(&thread).cloned();
        let (summary, cache_hit) = match cached {
            Some((at, text)) if cut < at + self.refresh => (text, true),
            _ => {
                let text = format!("{} older messages", cut);
                self.cache.lock().insert(thread, (cut, text.clone()));
                (text, false)
            }
        };
        r.runtime.writer.custom(json!({
            "type": "context_compacted", "cache_hit": cache_hit,
            "source": if cache_hit { "cache" } else { "extractive" },
        }));
        let mut msgs = vec![keel_summarization::summary_message(&summary)];
        msgs.extend_from_slice(&r.messages[cut..]);
        next.run(r.with_messages(msgs)).await
    }
}

#[tokio::test]
async fn summary_calls_cache_hits_and_events_are_told_apart() {
    let mut msgs = Vec::new();
    for i in 0..6 {
        msgs.push(Message::human(format!("question {i}")).with_id(format!("h{i}")));
        msgs.push(Message::ai(format!("answer {i}")).with_id(format!("a{i}")));
    }
    let t = Transcript::from_messages(msgs).unwrap();
    let summarizer = TestSummarizer {
        refresh: 4,
        cache: Mutex::new(HashMap::new()),
    };
    let replay = ReplayEngine::new(vec![Arc::new(summarizer)], counter())
        .run(&t, &mut Quiet)
        .await
        .unwrap();
    let flags: Vec<(bool, bool, usize)> = replay
        .report
        .calls
        .iter()
        .map(|c| (c.summary_call, c.cache_hit, c.events.len()))
        .collect();
    // Histories of 1, 3, 5, 7, 9, 11 messages: no summary, then summarize at cut 1,
    // reuse at cut 3, summarize at cut 5, reuse at 7, summarize at 9.
    assert_eq!(
        flags,
        vec![
            (false, false, 0),
            (true, false, 1),
            (false, true, 1),
            (true, false, 1),
            (false, true, 1),
            (true, false, 1),
        ]
    );
    let totals = &replay.report.totals;
    assert_eq!((totals.summary_calls, totals.cache_hits), (3, 2));
    assert_eq!(replay.report.calls[1].events[0]["source"], "extractive");
    assert_eq!(replay.report.summary.as_deref(), Some("9 older messages"));
    assert!(totals.sent_tokens < totals.full_history_tokens);
}

/// Counts its own before_model calls in state, the way a middleware keeps a value.
struct Counts;

#[async_trait]
impl Middleware for Counts {
    fn name(&self) -> &str {
        "Counts"
    }
    async fn before_model(
        &self,
        state: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let n: u64 = state.get("seen").unwrap_or(0);
        Ok(HookOutcome::update(StateUpdate::value(
            "seen",
            json!(n + 1),
        )))
    }
    async fn wrap_model_call(
        &self,
        r: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let n: u64 = r.state.get("seen").unwrap_or(0);
        let mut msgs = r.messages.to_vec();
        msgs.push(Message::human(format!("call {n}")).with_id(format!("marker-{n}")));
        next.run(r.with_messages(msgs)).await
    }
}

#[tokio::test]
async fn state_updates_from_hooks_carry_over_to_later_calls() {
    let replay = ReplayEngine::new(vec![Arc::new(Counts)], counter())
        .run(&two_turns(), &mut Quiet)
        .await
        .unwrap();
    let markers: Vec<String> = replay
        .requests
        .iter()
        .map(|r| {
            r.as_ref()
                .unwrap()
                .messages
                .last()
                .unwrap()
                .text()
                .into_owned()
        })
        .collect();
    assert_eq!(markers, ["call 1", "call 2", "call 3"]);
}

/// Answers without calling the model.
struct ShortCircuit;

#[async_trait]
impl Middleware for ShortCircuit {
    fn name(&self) -> &str {
        "ShortCircuit"
    }
    async fn wrap_model_call(
        &self,
        _: ModelRequest,
        _: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        Err(ModelError::new(
            keel_core::model::ModelErrorKind::Rejected,
            "blocked by policy",
        ))
    }
}

#[tokio::test]
async fn a_failing_chain_names_the_call_and_the_line() {
    let err = ReplayEngine::new(vec![Arc::new(ShortCircuit)], counter())
        .run(&two_turns(), &mut Quiet)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ReplayError::Model {
                call: 1,
                line: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("blocked by policy"));
}

#[derive(Default)]
struct Progress(Vec<String>);

impl ReplayObserver for Progress {
    fn started(&mut self, calls: usize) {
        self.0.push(format!("start {calls}"));
    }
    fn call_done(
        &mut self,
        call: &keel_replay::CallReport,
        request: Option<&keel_replay::SentRequest>,
    ) {
        self.0.push(format!(
            "{} {}",
            call.index,
            request.map_or(0, |r| r.messages.len())
        ));
    }
}

#[tokio::test]
async fn the_observer_sees_every_call() {
    let mut p = Progress::default();
    ReplayEngine::new(vec![], counter())
        .run(&two_turns(), &mut p)
        .await
        .unwrap();
    assert_eq!(p.0, ["start 3", "1 1", "2 3", "3 5"]);
}

/// Implements `before_model` only (the attribute declares just that), counting calls.
struct BeforeModelCount(Arc<std::sync::atomic::AtomicUsize>);

#[keel_core::middleware]
impl Middleware for BeforeModelCount {
    fn name(&self) -> &str {
        "BeforeModelCount"
    }
    async fn before_model(
        &self,
        _: &AgentState,
        _: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(HookOutcome::proceed())
    }
}

#[tokio::test]
async fn the_replay_calls_the_hooks_the_attribute_declares() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let m = BeforeModelCount(calls.clone());
    assert!(m.hooks().before_model() && !m.hooks().wrap_model_call());
    ReplayEngine::new(vec![Arc::new(m)], counter())
        .run(&two_turns(), &mut Progress::default())
        .await
        .unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 3);
}
