//! Parity with LangChain 1.5's `SummarizationMiddleware`.
//!
//! The fixtures in `tests/fixtures/langchain/` were generated once by running the real
//! Python package (`scripts/compare/gen_parity_fixtures.py`, committed, deterministic)
//! over 46 generated conversations (human/AI/tool turns, parallel calls, long tool
//! outputs, string and list content, CJK and emoji, split-parallel orderings) with
//! several trigger/keep configurations each. Every case records whether LangChain
//! triggered, where it cut, and the ids it kept and summarized.
//!
//! With rescue and stickiness headroom disabled and the approximate counter, Keel must
//! cut exactly where LangChain does, except where LangChain's kept window holds a tool
//! result whose call it summarized (an orphan, LangChain #38352): there Keel must send no
//! orphan instead.

// Fixture helpers sit outside #[test] functions; a malformed fixture must fail loudly.
#![allow(clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use keel_core::message::Message;
use keel_core::pairs::check_pairs;
use keel_core::tokens::TokenCounter;
use keel_summarization::config::ContextSize;
use keel_summarization::plan::langchain_split;
use keel_tokens::ApproximateCounter;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Fixture {
    name: String,
    langchain_version: String,
    input_strictly_paired: bool,
    messages: Vec<Message>,
    approx_tokens: Vec<u64>,
    approx_total_usage_scaled: u64,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    config: CaseConfig,
    triggered: bool,
    summarized: bool,
    summarized_ids: Vec<String>,
    kept_ids: Vec<String>,
    langchain_orphans: bool,
    orphan_tool_ids: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct CaseConfig {
    trigger: Vec<Size>,
    keep: Size,
    max_input_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Size {
    kind: String,
    value: serde_json::Number,
}

impl Size {
    fn to_context_size(&self) -> ContextSize {
        match self.kind.as_str() {
            "tokens" => ContextSize::Tokens(self.value.as_u64().expect("integer tokens")),
            "messages" => ContextSize::Messages(self.value.as_u64().expect("integer messages")),
            "fraction" => ContextSize::Fraction(self.value.as_f64().expect("numeric fraction")),
            other => panic!("unknown context size kind {other:?} in a fixture"),
        }
    }
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/langchain")
}

fn fixtures() -> Vec<Fixture> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir())
        .expect("fixture directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).expect("read fixture");
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect()
}

/// The split Keel makes (rescue and headroom disabled, approximate counter): whether it
/// triggered, and (summarized ids, kept ids) in order.
fn keel_split(messages: &[Message], config: &CaseConfig) -> (bool, Vec<String>, Vec<String>) {
    let trigger: Vec<ContextSize> = config.trigger.iter().map(Size::to_context_size).collect();
    let split = langchain_split(
        messages,
        &trigger,
        config.keep.to_context_size(),
        config.max_input_tokens,
    );
    let ids = |ms: &[Message]| ms.iter().map(|m| m.id().to_owned()).collect::<Vec<_>>();
    (
        split.triggered,
        ids(&messages[..split.cut]),
        ids(&messages[split.cut..]),
    )
}

/// Tool results in `kept` whose call is not made by an earlier kept AI message
/// (LangChain's orphan, in the loose form of LangChain #38352), and calls of
/// kept AI messages whose result is not kept after them.
fn loose_orphans(kept: &[Message]) -> Vec<String> {
    let mut issued = HashSet::new();
    let mut out = Vec::new();
    for m in kept {
        for c in m.tool_calls() {
            issued.insert(c.id.as_str());
        }
        if let Some(id) = m.tool_call_id()
            && !issued.contains(id)
        {
            out.push(format!("result {} for call {id}", m.id()));
        }
    }
    let answered: HashSet<&str> = kept.iter().filter_map(Message::tool_call_id).collect();
    for m in kept {
        for c in m.tool_calls() {
            if !answered.contains(c.id.as_str()) {
                out.push(format!("call {} in {} without result", c.id, m.id()));
            }
        }
    }
    out
}

#[test]
fn fixtures_cover_the_acceptance_shapes() {
    let all = fixtures();
    assert!(all.len() >= 40, "only {} fixture conversations", all.len());
    let cases: Vec<&Case> = all.iter().flat_map(|f| &f.cases).collect();
    let has = |pred: &dyn Fn(&Case) -> bool| cases.iter().any(|c| pred(c));
    assert!(has(&|c| c.config.keep.kind == "messages" && c.summarized));
    assert!(has(&|c| c.config.keep.kind == "tokens" && c.summarized));
    assert!(has(&|c| c
        .config
        .trigger
        .iter()
        .any(|t| t.kind == "tokens")));
    assert!(has(&|c| c
        .config
        .trigger
        .iter()
        .any(|t| t.kind == "messages")));
    assert!(has(&|c| c.config.trigger.len() > 1));
    assert!(has(&|c| !c.triggered), "no pass-through case");
    assert!(
        has(&|c| c.triggered && !c.summarized),
        "no triggered-but-nothing-to-cut case"
    );
    assert!(
        has(&|c| c.langchain_orphans),
        "no case where LangChain orphans a result"
    );
    let scaling_decides = all.iter().any(|f| {
        let raw: u64 = f.approx_tokens.iter().sum();
        f.cases.iter().any(|c| {
            c.triggered
                && c.config.trigger.len() == 1
                && c.config.trigger[0].kind == "tokens"
                && (raw + 1..=f.approx_total_usage_scaled)
                    .contains(&c.config.trigger[0].value.as_u64().unwrap_or(0))
        })
    });
    assert!(
        scaling_decides,
        "no case where only usage scaling fires the trigger"
    );
    let msgs = || all.iter().flat_map(|f| &f.messages);
    assert!(
        msgs().any(|m| m.tool_calls().len() > 1),
        "no parallel tool calls"
    );
    assert!(
        msgs().any(|m| m.is_tool() && m.text().chars().count() > 5000),
        "no long tool output"
    );
    assert!(msgs().any(|m| matches!(m.content(), keel_core::message::Content::Parts(_))));
    for f in &all {
        assert!(
            f.langchain_version.starts_with("1.5."),
            "{}: {}",
            f.name,
            f.langchain_version
        );
        assert_eq!(f.messages.len(), f.approx_tokens.len(), "{}", f.name);
    }
}

#[test]
fn approximate_counter_matches_langchain_per_message() {
    let counter = ApproximateCounter::langchain();
    let mut diffs = Vec::new();
    for f in fixtures() {
        for (m, want) in f.messages.iter().zip(&f.approx_tokens) {
            let got = counter.count_message(m);
            if got != *want {
                diffs.push(format!(
                    "{} {}: keel {got}, langchain {want}",
                    f.name,
                    m.id()
                ));
            }
        }
    }
    assert!(
        diffs.is_empty(),
        "{} messages counted differently:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

#[test]
fn split_equals_langchain_except_where_langchain_orphans() {
    let mut failures = Vec::new();
    let (mut compared, mut orphan_cases) = (0, 0);
    for f in fixtures() {
        let ids: Vec<&str> = f.messages.iter().map(Message::id).collect();
        for (i, case) in f.cases.iter().enumerate() {
            let (triggered, summarized, kept) = keel_split(&f.messages, &case.config);
            let label = format!("{} case {i} ({:?})", f.name, case.config);
            // Always: the split is a partition of the thread in order.
            let rejoined: Vec<&str> = summarized.iter().chain(&kept).map(String::as_str).collect();
            if rejoined != ids {
                failures.push(format!("{label}: summarized + kept is not the thread"));
                continue;
            }
            let kept_msgs = &f.messages[summarized.len()..];
            let orphans = loose_orphans(kept_msgs);
            if !orphans.is_empty() {
                failures.push(format!("{label}: Keel keeps orphans {orphans:?}"));
            }
            if f.input_strictly_paired
                && let Err(e) = check_pairs(kept_msgs)
            {
                failures.push(format!("{label}: Keel breaks a valid thread: {e}"));
            }
            if case.langchain_orphans {
                orphan_cases += 1;
                assert!(!case.orphan_tool_ids.is_empty());
                continue;
            }
            compared += 1;
            if triggered != case.triggered {
                failures.push(format!(
                    "{label}: LangChain triggered {}, Keel {triggered}",
                    case.triggered
                ));
            }
            if summarized != case.summarized_ids || kept != case.kept_ids {
                failures.push(format!(
                    "{label}: LangChain (triggered {}, summarized {}) cut at {}, Keel at {}",
                    case.triggered,
                    case.summarized,
                    case.summarized_ids.len(),
                    summarized.len()
                ));
            }
        }
    }
    assert!(
        compared >= 150 && orphan_cases >= 10,
        "{compared} compared, {orphan_cases} orphan cases"
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        compared + orphan_cases,
        failures.join("\n")
    );
}
