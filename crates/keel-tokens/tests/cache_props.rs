//! The cached counter always agrees with the counter it wraps, whatever happens to the
//! conversation between counts: growth, edits, truncation, a summary replacing a prefix,
//! and interleaved conversations.

use keel_core::message::{Message, MessageBody};
use keel_core::tokens::TokenCounter;
use keel_tokens::{ApproximateCounter, CachedCounter};
use proptest::prelude::*;
use std::num::NonZeroUsize;

#[derive(Clone, Debug)]
enum Op {
    Push(String),
    Edit(usize, String),
    Truncate(usize),
    Summarize(usize),
    Switch,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => "[a-z 中😀]{0,40}".prop_map(Op::Push),
        1 => (any::<usize>(), "[a-z]{0,40}").prop_map(|(i, s)| Op::Edit(i, s)),
        1 => any::<usize>().prop_map(Op::Truncate),
        1 => any::<usize>().prop_map(Op::Summarize),
        1 => Just(Op::Switch),
    ]
}

proptest! {
    #[test]
    fn cached_equals_plain(ops in prop::collection::vec(op(), 1..60), small in any::<bool>()) {
        let plain = ApproximateCounter::langchain();
        // A tiny cache exercises eviction on every step.
        let cached = if small {
            CachedCounter::with_capacity(plain.clone(), NonZeroUsize::new(3).unwrap(), NonZeroUsize::new(1).unwrap())
        } else {
            CachedCounter::new(plain.clone())
        };
        let mut convs = [vec![Message::system("sys").with_id("s0")], vec![Message::human("other").with_id("o0")]];
        let mut cur = 0;
        for (step, op) in ops.into_iter().enumerate() {
            let conv = &mut convs[cur];
            match op {
                Op::Push(s) => conv.push(Message::human(s).with_id(format!("m{step}"))),
                Op::Edit(i, s) => {
                    let i = i % conv.len();
                    if let MessageBody::Human(h) = conv[i].body_mut() {
                        h.content = s.into();
                    }
                }
                Op::Truncate(n) => conv.truncate(1 + n % conv.len()),
                Op::Summarize(n) => {
                    let cut = n % conv.len();
                    let mut next = vec![Message::human(format!("summary {step}")).with_id(format!("sum{step}"))];
                    next.extend_from_slice(&conv[cut..]);
                    *conv = next;
                }
                Op::Switch => cur = 1 - cur,
            }
            let conv = &convs[cur];
            prop_assert_eq!(cached.count_messages(conv), plain.count_messages(conv));
            prop_assert_eq!(cached.count_each(conv), plain.count_each(conv));
        }
    }
}
