//! Exact counts equal OpenAI's Python tiktoken on the committed fixture
//! (scripts/fixtures/tokens/gen_tiktoken.py), and the script-aware estimate tracks them
//! on non-Latin text where chars/4 does not.
#![cfg(feature = "tiktoken")]
// Fixture helpers sit outside #[test] functions; a malformed fixture should fail loudly.
#![allow(clippy::unwrap_used)]

use keel_core::message::Message;
use keel_core::tokens::TokenCounter;
use keel_tokens::{ApproximateCounter, Encoding, TiktokenCounter};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/tiktoken_counts.json")).unwrap()
}

fn counters() -> Vec<TiktokenCounter> {
    Encoding::ALL
        .iter()
        .map(|e| TiktokenCounter::new(*e).unwrap())
        .collect()
}

#[test]
fn texts_match_python_tiktoken() {
    let fx = fixture();
    let mut failures = Vec::new();
    for counter in counters() {
        for case in fx["texts"].as_array().unwrap() {
            let got = counter.count_text(case["text"].as_str().unwrap());
            let want = case[counter.name()].as_u64().unwrap();
            if got != want {
                failures.push(format!(
                    "{} {}: got {got}, tiktoken {want}",
                    counter.name(),
                    case["name"]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn messages_and_request_match_python_tiktoken() {
    let fx = fixture();
    let msgs: Vec<Message> = fx["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| serde_json::from_value(c["message"].clone()).unwrap())
        .collect();
    for counter in counters() {
        for (m, case) in msgs.iter().zip(fx["messages"].as_array().unwrap()) {
            assert_eq!(
                counter.count_message(m),
                case[counter.name()].as_u64().unwrap(),
                "{} {}",
                counter.name(),
                m.id()
            );
        }
        // The fixture's first message is the system prompt; a request adds reply priming.
        let (system, rest) = msgs.split_first().unwrap();
        assert_eq!(
            counter.count_request(Some(system), rest, &[]),
            fx["conversation"][counter.name()].as_u64().unwrap(),
            "{}",
            counter.name()
        );
    }
}

#[test]
fn script_aware_estimate_tracks_non_latin_text() {
    let fx = fixture();
    let plain = ApproximateCounter::langchain();
    let script = ApproximateCounter::langchain().script_aware();
    for name in ["chinese", "japanese", "korean", "cjk_x10", "emoji"] {
        let case = fx["texts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap();
        let text = case["text"].as_str().unwrap();
        let o200k = case["o200k_base"].as_u64().unwrap() as f64;
        let cl100k = case["cl100k_base"].as_u64().unwrap() as f64;
        let uniform = plain.count_text(text) as f64;
        let aware = script.count_text(text) as f64;
        // chars/4 under-counts by 2x or more; the script-aware estimate never
        // under-counts o200k and stays within 1.6x of either tokenizer.
        assert!(
            uniform * 2.0 <= o200k,
            "{name}: chars/4 gave {uniform}, o200k {o200k}"
        );
        assert!(
            aware >= o200k,
            "{name}: script-aware {aware} < o200k {o200k}"
        );
        assert!(
            aware <= 1.6 * o200k.max(cl100k),
            "{name}: script-aware {aware} vs cl100k {cl100k}"
        );
    }
    // On English it is the LangChain estimate.
    let english = fx["texts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "english")
        .unwrap();
    let text = english["text"].as_str().unwrap();
    assert_eq!(script.count_text(text), plain.count_text(text));
}
