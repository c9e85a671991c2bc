//! Time of applying one update of N new messages, then one replacing all N, with the
//! add-messages reducer ([`AgentState::apply`]): the cost of taking in a large run input.
//!
//! ```text
//! cargo run --release -p keel-core --example apply_many -- 100000
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a measuring tool: fail loudly

use std::time::Instant;

use keel_core::message::Message;
use keel_core::state::{AgentState, StateUpdate};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |a| a.parse().unwrap());
    let batch = |text: &str| {
        StateUpdate::messages((0..n).map(|i| Message::human(text).with_id(format!("m{i}"))))
    };
    let (append, replace) = (batch("a"), batch("b"));
    let mut state = AgentState::default();
    let start = Instant::now();
    state.apply(append).unwrap();
    let appended = start.elapsed();
    let start = Instant::now();
    state.apply(replace).unwrap();
    let replaced = start.elapsed();
    assert_eq!(state.messages.len(), n);
    println!(
        "{n} messages: appended in {:.1} ms, replaced in {:.1} ms",
        appended.as_secs_f64() * 1000.0,
        replaced.as_secs_f64() * 1000.0
    );
}
