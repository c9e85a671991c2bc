//! A run over a large input gives control back while it works through the messages, so
//! dropping it (what a cancel does) takes effect before it writes, instead of after all
//! of its CPU-bound work.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::sync::Arc;
use std::task::Poll;

use keel_agent::{Agent, InMemoryCheckpointer};
use keel_core::message::Message;
use keel_core::store::Checkpointer;
use keel_testkit::ScriptedModel;

const MESSAGES: usize = 50_000;

fn agent(checkpointer: Arc<InMemoryCheckpointer>) -> Agent {
    let model = ScriptedModel::from_fn(|_| Ok(Message::ai("ok")));
    Agent::builder()
        .model(Arc::new(model))
        .checkpointer(checkpointer)
        .build()
        .unwrap()
}

fn input() -> Vec<Message> {
    (0..MESSAGES)
        .map(|i| Message::human(format!("m{i}")))
        .collect()
}

/// Polled by hand (a waker that does nothing): the run returns `Pending` many times
/// while it takes in its input, then completes and has written everything. Without
/// yield points it completes in a single poll, and nothing can stop it in between.
#[tokio::test(flavor = "current_thread")]
async fn a_large_input_is_taken_in_with_yield_points() {
    let checkpointer = Arc::new(InMemoryCheckpointer::with_limits(0, 16));
    let agent = agent(checkpointer.clone());
    let mut run = Box::pin(agent.invoke("t", input()));
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut pending = 0;
    let out = loop {
        match run.as_mut().poll(&mut cx) {
            Poll::Ready(out) => break out.unwrap(),
            Poll::Pending => pending += 1,
        }
    };
    assert_eq!(out.state.messages.len(), MESSAGES + 1);
    assert!(
        pending >= 8,
        "the run gave control back {pending} times over {MESSAGES} input messages"
    );
    let latest = checkpointer.latest("t").await.unwrap().unwrap();
    assert_eq!(latest.messages.len(), MESSAGES + 1);
}

/// Dropped after its first poll, the run has written nothing: the input's checkpoint
/// comes only after the messages were taken in, and the run yielded before that.
#[tokio::test(flavor = "current_thread")]
async fn dropping_a_run_during_a_large_input_writes_nothing() {
    let checkpointer = Arc::new(InMemoryCheckpointer::with_limits(0, 16));
    let agent = agent(checkpointer.clone());
    let mut run = Box::pin(agent.invoke("t", input()));
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(
        run.as_mut().poll(&mut cx).is_pending(),
        "the whole run happened in one poll"
    );
    drop(run);
    // At most the thread's empty first checkpoint, which holds no message.
    assert!(
        checkpointer
            .latest("t")
            .await
            .unwrap()
            .is_none_or(|cp| cp.messages.is_empty()),
        "the input was checkpointed before the run first gave control back"
    );
    // The thread is free again: a new run on it proceeds normally.
    let out = agent.invoke("t", vec![Message::human("hi")]).await.unwrap();
    assert_eq!(out.state.messages.len(), 2);
}
