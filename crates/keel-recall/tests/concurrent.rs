//! Two agents, each with its own store connection (as two processes would have), index
//! the same threads and threads of their own at once through the middleware, on one
//! SQLite file and one PostgreSQL schema: every message that reached a model call is
//! indexed exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use common::*;
use keel_agent::Agent;
use keel_core::message::Message;
use keel_store::Store;

const TURNS: usize = 4;

fn agent_on(store: Store) -> Agent {
    let store = Arc::new(store);
    Agent::builder()
        .model(model())
        .middleware_shared(recall(store))
        .middleware_shared(Arc::new(KeepLast(4)))
        .build()
        .unwrap()
}

/// Runs `TURNS` turns on each of `threads`, interleaved.
async fn run(agent: Agent, threads: Vec<String>) -> Agent {
    for turn in 0..TURNS {
        for thread in &threads {
            let input = Message::human(format!(
                "Turn {turn} on {thread}: the backup window is {turn} hours."
            ))
            .with_id(format!("{thread}-q{turn}"));
            agent.invoke(thread, vec![input]).await.unwrap();
        }
    }
    agent
}

async fn concurrent_on(a: Store, b: Store, probe: Store) {
    let shared: Vec<String> = (0..3).map(|i| format!("shared-{i}")).collect();
    let own = |who: &str| (0..3).map(|i| format!("{who}-{i}")).collect::<Vec<_>>();
    let ta = tokio::spawn(run(agent_on(a), [shared.clone(), own("a")].concat()));
    let tb = tokio::spawn(run(agent_on(b), [shared.clone(), own("b")].concat()));
    let (agent_a, agent_b) = (ta.await.unwrap(), tb.await.unwrap());
    for (agent, threads) in [
        (&agent_a, own("a")),
        (&agent_b, own("b")),
        (&agent_a, shared.clone()),
    ] {
        for thread in threads {
            let state = agent.state(&thread).await.unwrap().unwrap();
            // Every message but the last answer reached a model call.
            let mut expected: Vec<String> = state.messages[..state.messages.len() - 1]
                .iter()
                .map(|m| m.id().to_owned())
                .collect();
            expected.sort();
            assert_eq!(expected.len(), 2 * TURNS - 1);
            assert_eq!(
                indexed_ids(&probe, &thread).await,
                expected,
                "{thread}: none lost, none twice"
            );
        }
    }
    // Both agents wrote the shared threads alike (same inputs, same answers).
    for thread in &shared {
        assert_eq!(
            agent_a.state(thread).await.unwrap().unwrap().messages,
            agent_b.state(thread).await.unwrap().unwrap().messages
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_on_one_sqlite_file() {
    let (url, _dir) = sqlite_url();
    let a = Store::connect(&url).await.unwrap();
    let b = Store::connect(&url).await.unwrap();
    let probe = Store::connect(&url).await.unwrap();
    concurrent_on(a, b, probe).await;
}

#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_on_one_postgres_schema() {
    let options = postgres_schema().await;
    let a = postgres_store(&options).await;
    let b = postgres_store(&options).await;
    let probe = postgres_store(&options).await;
    concurrent_on(a, b, probe).await;
}
