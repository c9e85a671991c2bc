//! Property: over generated conversations (parallel tool calls, interleaved skill reads,
//! long tool outputs, reminders) and generated configurations, as the thread grows
//! call by call, every request handed to the model satisfies the pair invariant, keeps
//! the latest user message, holds each input message at most once and in order, and no
//! stored message is ever changed.

// Helpers outside #[test] functions may unwrap too: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use keel_core::message::{DYNAMIC_CONTEXT, Message};
use keel_core::pairs::check_pairs;
use keel_core::tokens::TokenCounter;
use keel_summarization::config::ContextSize;
use keel_summarization::plan::latest_user_message;
use proptest::prelude::*;
use serde_json::json;

#[derive(Clone, Debug)]
enum Turn {
    User {
        size: usize,
        reminder: bool,
    },
    Answer {
        size: usize,
    },
    Tools {
        calls: Vec<(u8, usize)>,
        order: Vec<usize>,
    },
}

fn turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        3 => (1usize..400, prop::bool::weighted(0.15)).prop_map(|(size, reminder)| Turn::User { size, reminder }),
        2 => (1usize..600).prop_map(|size| Turn::Answer { size }),
        4 => prop::collection::vec((0u8..5, prop_oneof![3 => 1usize..300, 1 => 1000usize..4000]), 1..4)
            .prop_flat_map(|calls| {
                let n = calls.len();
                (Just(calls), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
            })
            .prop_map(|(calls, order)| Turn::Tools { calls, order }),
    ]
}

/// Builds the thread; returns it and the indices after which a model call happens.
fn build(turns: &[Turn]) -> (Vec<Message>, Vec<usize>) {
    let mut out = vec![Message::human("start the task").with_id("u0")];
    let mut calls_at = Vec::new();
    let mut n = 0usize;
    let mut id = |p: &str| {
        n += 1;
        format!("{p}{n}")
    };
    for t in turns {
        match t {
            Turn::User { size, reminder } => {
                let mut m = Message::human("q".repeat(*size)).with_id(id("u"));
                if *reminder {
                    m = m.with_metadata(DYNAMIC_CONTEXT, json!(true));
                }
                out.push(m);
                calls_at.push(out.len());
            }
            Turn::Answer { size } => out.push(Message::ai("a".repeat(*size)).with_id(id("a"))),
            Turn::Tools { calls, order } => {
                let ai_id = id("t");
                let specs: Vec<(String, &str, serde_json::Value)> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (kind, _))| {
                        let cid = format!("{ai_id}c{i}");
                        match kind {
                            0 => (cid, "read_file", json!({"path": format!("/mnt/skills/s{i}/SKILL.md")})),
                            1 => (cid, "view", json!({"file_path": format!("/mnt/skills/../skills/x{}/a.md", i % 2)})),
                            2 => (cid, "cat", json!({"path": "/etc/hosts"})),
                            _ => (cid, "bash", json!({"cmd": "ls"})),
                        }
                    })
                    .collect();
                let refs: Vec<(&str, &str, serde_json::Value)> = specs
                    .iter()
                    .map(|(a, b, c)| (a.as_str(), *b, c.clone()))
                    .collect();
                out.push(ai_calls(&ai_id, &refs));
                for &i in order {
                    out.push(tool(
                        &format!("{ai_id}r{i}"),
                        &specs[i].0,
                        &"o".repeat(calls[i].1),
                    ));
                }
                calls_at.push(out.len());
            }
        }
    }
    calls_at.push(out.len());
    calls_at.dedup();
    (out, calls_at)
}

#[derive(Clone, Debug)]
struct Cfg {
    trigger: Vec<ContextSize>,
    keep: ContextSize,
    headroom: Option<f64>,
    trim: Option<u64>,
    skills: (u64, u64, u64),
    model: bool,
}

fn cfg() -> impl Strategy<Value = Cfg> {
    let size = prop_oneof![
        (200u64..6000).prop_map(ContextSize::Tokens),
        (4u64..60).prop_map(ContextSize::Messages)
    ];
    let keep = prop_oneof![
        (1u64..30).prop_map(ContextSize::Messages),
        (50u64..3000).prop_map(ContextSize::Tokens)
    ];
    (
        prop::collection::vec(size, 1..3),
        keep,
        prop::option::of(0.3f64..=1.0),
        prop::option::of(50u64..3000),
        (0u64..6, 0u64..3000, 0u64..1500),
        any::<bool>(),
    )
        .prop_map(|(trigger, keep, headroom, trim, skills, model)| Cfg {
            trigger,
            keep,
            headroom,
            trim,
            skills,
            model,
        })
}

/// The middleware configuration a generated `Cfg` describes.
fn summarization_config(c: &Cfg) -> keel_summarization::config::SummarizationConfig {
    let config = config()
        .keep(c.keep)
        .stickiness_headroom(c.headroom)
        .trim_tokens_to_summarize(c.trim)
        .preserve_recent_skill_count(c.skills.0)
        .preserve_recent_skill_tokens(c.skills.1)
        .preserve_recent_skill_tokens_per_skill(c.skills.2);
    c.trigger
        .iter()
        .fold(config, |b, t| b.trigger(*t))
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_request_is_pair_safe_and_keeps_the_latest_user_message(
        turns in prop::collection::vec(turn(), 5..60),
        c in cfg(),
    ) {
        let (thread, calls_at) = build(&turns);
        let snapshot = thread.clone();
        let builder = middleware(summarization_config(&c));
        let mw = if c.model { builder.build().unwrap() } else { builder.extractive().build().unwrap() };
        let model = SummaryModel::new();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let position: HashMap<&str, usize> = thread.iter().enumerate().map(|(i, m)| (m.id(), i)).collect();
        rt.block_on(async {
            let terminal = Terminal::default();
            for &end in &calls_at {
                let prefix: Vec<Message> = thread[..end].to_vec();
                let req = request(prefix.clone(), model.clone(), "prop");
                run(&mw, req.clone(), &terminal).await.unwrap();
                let sent = terminal.last().messages;
                // No stored message changes.
                prop_assert_eq!(&*req.messages, &prefix);
                // At most one summary, first.
                let body: &[Message] = if sent.first().is_some_and(is_summary) { &sent[1..] } else { &sent[..] };
                prop_assert!(!body.iter().any(is_summary));
                // Pair invariant on what the model receives.
                if let Err(e) = check_pairs(body) {
                    return Err(TestCaseError::fail(format!("call at {end}: {e}; sent {:?}", ids(body))));
                }
                // The latest user message is always there.
                let latest = latest_user_message(&prefix).map(|i| prefix[i].id().to_owned());
                if let Some(latest) = latest {
                    prop_assert!(body.iter().any(|m| m.id() == latest), "latest user message {} missing at {}", latest, end);
                }
                // Each input message at most once, in the original order, unchanged.
                let mut last = None;
                for m in body {
                    let i = *position.get(m.id()).expect("sent message comes from the thread");
                    prop_assert!(last.is_none_or(|l| l < i), "out of order or duplicated: {}", m.id());
                    prop_assert_eq!(m, &thread[i]);
                    last = Some(i);
                }
            }
            Ok(())
        })?;
        prop_assert_eq!(thread, snapshot);
        let _ = Arc::strong_count(&model);
    }
}

/// Indices a request must always carry whatever headroom wants: the newest message with
/// its tool bundle, the message before it with its bundle, and the share of `keep` that
/// is the floor (half of it).
fn floor_start(thread: &[Message], keep: ContextSize) -> usize {
    let n = thread.len();
    let bundle_start = |i: usize| -> usize {
        // A tool result belongs to the AI message that opened its run.
        let mut s = i;
        while s > 0 && thread[s].is_tool() {
            s -= 1;
        }
        s
    };
    let newest = bundle_start(n - 1);
    let structural = if newest > 0 {
        bundle_start(newest - 1)
    } else {
        0
    };
    let share = match keep {
        ContextSize::Messages(k) => n.saturating_sub(k.div_ceil(2) as usize),
        ContextSize::Tokens(t) => {
            let half = t / 2;
            let mut start = n;
            let mut used = 0u64;
            while start > 0 {
                let c = CharCounter.count_message(&thread[start - 1]);
                if used + c > half {
                    break;
                }
                used += c;
                start -= 1;
            }
            if start == n { n - 1 } else { start }
        }
        ContextSize::Fraction(_) => n,
    };
    structural.min(bundle_start(share.min(n - 1)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Headroom may shrink the kept window, never empty it: with a fixed part (system
    /// prompt) from nothing to twice the trigger, every request keeps the floor, is
    /// pair-safe and is never larger than the uncompacted request.
    #[test]
    fn headroom_keeps_the_floor_whatever_the_fixed_part_costs(
        turns in prop::collection::vec(turn(), 5..50),
        trigger in 500u64..5000,
        keep in prop_oneof![(2u64..30).prop_map(ContextSize::Messages), (100u64..3000).prop_map(ContextSize::Tokens)],
        headroom in 0.3f64..=1.0,
        fixed_share in 0.0f64..=2.0,
        skills in (0u64..6, 0u64..3000, 0u64..1500),
        latest_user in any::<bool>(),
    ) {
        let (thread, calls_at) = build(&turns);
        let fixed = (trigger as f64 * fixed_share) as usize;
        let config = config()
            .trigger(ContextSize::Tokens(trigger))
            .keep(keep)
            .stickiness_headroom(Some(headroom))
            .preserve_latest_user_message(latest_user)
            .preserve_recent_skill_count(skills.0)
            .preserve_recent_skill_tokens(skills.1)
            .preserve_recent_skill_tokens_per_skill(skills.2)
            .build()
            .unwrap();
        let mw = middleware(config).extractive().build().unwrap();
        let model = SummaryModel::new();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let position: HashMap<&str, usize> = thread.iter().enumerate().map(|(i, m)| (m.id(), i)).collect();
        rt.block_on(async {
            let terminal = Terminal::default();
            for &end in &calls_at {
                let prefix: Vec<Message> = thread[..end].to_vec();
                let mut req = request(prefix.clone(), model.clone(), "floor");
                req.system = (fixed > 0).then(|| Message::system("s".repeat(fixed)));
                run(&mw, req, &terminal).await.unwrap();
                let sent = terminal.last();
                let body: &[Message] = if sent.messages.first().is_some_and(is_summary) { &sent.messages[1..] } else { &sent.messages[..] };
                if let Err(e) = check_pairs(body) {
                    return Err(TestCaseError::fail(format!("call at {end}: {e}; sent {:?}", ids(body))));
                }
                let sent_at: Vec<usize> = body.iter().map(|m| position[m.id()]).collect();
                let floor = floor_start(&prefix, keep);
                for (i, m) in prefix.iter().enumerate().skip(floor) {
                    prop_assert!(sent_at.contains(&i), "call at {}: floor message {} ({}) missing; sent {:?}", end, i, m.id(), ids(body));
                }
                if let Some(u) = latest_user_message(&prefix) {
                    prop_assert!(sent_at.contains(&u), "latest user message missing at {}", end);
                }
                let size = |msgs: &[Message]| -> u64 { msgs.iter().map(|m| CharCounter.count_message(m)).sum() };
                prop_assert!(size(&sent.messages) <= size(&prefix), "call at {}: the request grew", end);
            }
            Ok(())
        })?;
    }
}

/// A request on `state`'s own list, as the agent makes it: it carries the list's lineage,
/// so the middleware's per-list memos (counts, the dangling scan, the planning index)
/// are used and kept.
fn request_in(
    state: &keel_core::state::AgentState,
    model: Arc<dyn keel_core::model::ChatModel>,
    thread: &str,
) -> keel_core::middleware::ModelRequest {
    let mut r = request(Vec::new(), model, thread);
    r.messages = state.messages.clone();
    r.state = Arc::new(state.clone());
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// What a list remembers between calls (the planning index kept from half a trigger
    /// on, the dangling-call scan, counts) never changes what is sent: the same thread
    /// grown call by call in one agent state sends exactly what fresh, lineage-less
    /// requests of the same messages send.
    #[test]
    fn memos_kept_as_a_thread_grows_never_change_what_is_sent(
        turns in prop::collection::vec(turn(), 5..60),
        c in cfg(),
    ) {
        let (thread, calls_at) = build(&turns);
        let make = || middleware(summarization_config(&c)).extractive().build().unwrap();
        let (kept, fresh) = (make(), make());
        let model = SummaryModel::new();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (a, b) = (Terminal::default(), Terminal::default());
            let mut state = keel_core::state::AgentState::with_messages(Vec::new());
            let mut had = 0;
            for &end in &calls_at {
                Arc::make_mut(&mut state.messages).extend_from_slice(&thread[had..end]);
                had = end;
                run(&kept, request_in(&state, model.clone(), "grown"), &a).await.unwrap();
                run(&fresh, request(thread[..end].to_vec(), model.clone(), "fresh"), &b).await.unwrap();
                let (x, y) = (a.last().messages, b.last().messages);
                prop_assert_eq!(ids(&x[usize::from(x.first().is_some_and(is_summary))..]),
                    ids(&y[usize::from(y.first().is_some_and(is_summary))..]), "call at {}", end);
                prop_assert_eq!(x.first().map(is_summary), y.first().map(is_summary));
                prop_assert_eq!(x.first().map(Message::text), y.first().map(Message::text));
            }
            Ok(())
        })?;
    }
}
