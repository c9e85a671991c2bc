//! Where the Anthropic adapter puts its prompt-cache breakpoints, on the bytes it would
//! send for every call of the bundled session under the bundled summarization
//! configuration: between two folds, each call's whole prompt must be a byte-identical
//! prefix of the next one's and be read back from a cache that applies Anthropic's
//! documented rules (keel-testkit's `PromptCache`). A change that moves a breakpoint
//! (off the summary, off the last stable message, onto something that changes) fails
//! here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use keel_anthropic::AnthropicConfig;
use keel_core::model::ChatRequest;
use keel_replay::{Quiet, ReplayOptions, SentRequest, prepare};
use keel_testkit::anthropic_cache::{PromptCache, tokens_of};
use serde_json::Value;

/// The blocks of a body in cache order, without their markers, and the positions of
/// the marked ones.
fn blocks(body: &Value) -> (Vec<String>, Vec<usize>) {
    let mut out = Vec::new();
    let mut marked = Vec::new();
    let mut push = |tag: &str, b: &Value| {
        let mut b = b.clone();
        if b.as_object_mut().unwrap().remove("cache_control").is_some() {
            marked.push(out.len());
        }
        out.push(format!("{tag}{b}"));
    };
    for t in body["tools"].as_array().into_iter().flatten() {
        push("tool:", t);
    }
    for b in body["system"].as_array().into_iter().flatten() {
        push("system:", b);
    }
    for m in body["messages"].as_array().unwrap() {
        for (j, b) in m["content"].as_array().unwrap().iter().enumerate() {
            let tag = if j == 0 {
                m["role"].as_str().unwrap()
            } else {
                ""
            };
            push(tag, b);
        }
    }
    (out, marked)
}

async fn requests() -> Vec<SentRequest> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Recall off: its excerpts change with every question and go before the summary,
    // so with them the prefix is new from the first message on. This test pins where
    // the adapter's breakpoints go on the stable part; recall's placement is its own
    // (known) cost to caching, documented in docs/claude.md.
    let options = ReplayOptions {
        config: Some(root.join("examples/summarization.yaml")),
        recall: Some(false),
        ..ReplayOptions::default()
    };
    let prepared = prepare(
        &root.join("examples/sessions/support-prj123.jsonl"),
        &options,
    )
    .await
    .unwrap();
    let report = prepared.run(&mut Quiet).await.unwrap();
    report.requests.into_iter().flatten().collect()
}

fn body(r: &SentRequest) -> Value {
    let config = AnthropicConfig::new("claude-sonnet-4-5");
    let mut request = ChatRequest::new(&r.messages, &r.settings);
    request.system = r.system.as_ref();
    request.tools = &r.tools;
    keel_anthropic::build_body(&config, &request, false)
        .unwrap()
        .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn between_two_folds_every_call_reads_the_whole_previous_prompt() {
    let requests = requests().await;
    let cache = PromptCache::new();
    let (mut pairs, mut folds, mut read_checked) = (0, 0, 0);
    let mut previous: Option<(&SentRequest, Value)> = None;
    for (i, r) in requests.iter().enumerate() {
        let summary = r
            .messages
            .iter()
            .position(|m| m.name() == Some(keel_summary::SUMMARY_NAME));
        let body = body(r);
        let (blocks_now, marked) = blocks(&body);
        // The markers: the system prompt, the summary when there is one, the last
        // message (no tools in a replay).
        let summary_at = summary.map(|_| {
            let first_user = body["system"].as_array().map_or(0, Vec::len);
            first_user + body["messages"][0]["content"].as_array().unwrap().len() - 1
        });
        let mut want = vec![0];
        want.extend(summary_at);
        want.push(blocks_now.len() - 1);
        want.dedup();
        assert_eq!(marked, want, "call {i}: breakpoints");
        let usage = cache
            .apply(&body, Duration::from_secs(20 * i as u64))
            .unwrap();
        if let Some((prev, prev_body)) = &previous {
            // A fold rewrites what the call sends (the summary, and where the kept
            // messages start; the extractive summary may even read the same after
            // folding a few more messages): between two folds, each call sends the
            // previous call's messages and appends.
            let appends = r.messages.len() >= prev.messages.len()
                && r.messages[..prev.messages.len()] == prev.messages[..];
            if appends {
                pairs += 1;
                let (blocks_prev, _) = blocks(prev_body);
                assert_eq!(
                    blocks_now[..blocks_prev.len()],
                    blocks_prev[..],
                    "call {i}: the previous call's prompt is not a byte-identical prefix"
                );
                let whole_previous: u64 = blocks_prev
                    .iter()
                    .map(|b| tokens_of(&Value::String(b.clone())))
                    .sum();
                // Below the model's minimum (1,024 tokens) nothing is cached at all.
                if whole_previous > 1_100 {
                    read_checked += 1;
                    assert!(
                        usage.cache_read_input_tokens + 64 >= whole_previous * 9 / 10,
                        "call {i}: read {} of the previous prompt's ~{whole_previous} tokens",
                        usage.cache_read_input_tokens
                    );
                }
            } else {
                folds += 1;
            }
        }
        previous = Some((r, body));
    }
    assert!(folds >= 3, "the session folds several times ({folds})");
    assert!(pairs >= 20, "calls between folds: {pairs}");
    assert!(
        read_checked >= 20,
        "calls long enough to cache: {read_checked}"
    );
    eprintln!("{pairs} calls between {folds} folds, {read_checked} checked through the cache");
}
