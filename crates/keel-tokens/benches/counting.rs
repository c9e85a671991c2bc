//! Token counting speed.
//!
//! `throughput/*`: each counter over one generated 10 MB mixed corpus (English prose,
//! Rust code, JSON, CJK, emoji, logs), reported in bytes/s.
//! `conversation/*`: a 10,000-message conversation counted from scratch (a cold
//! [`CachedCounter`]) vs counted again after one new message (a warm one: one
//! message tokenized plus 10,000 fingerprint comparisons). Every timed incremental call
//! sees a message it has never seen, so nothing is served from a stale memo.
//!
//! `message/*`: one `count_message` of the LangChain-parity counter on an AI message
//! with three tool calls (realistic argument JSON, ASCII and non-ASCII), and on a plain
//! text message. This is the per-message cost a cold compaction pass pays once per
//! message; the tool-call case is dominated by measuring `repr(tool_calls)`.
//!
//! Run: `cargo bench -p keel-tokens --bench counting`
//! First-load time of the tokenizer is measured in a fresh process instead:
//! `cargo run --release -p keel-tokens --example first_load`.

// A benchmark whose setup fails must stop loudly, like a test.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use keel_core::message::{Message, ToolCall};
use keel_core::tokens::TokenCounter;
use keel_tokens::{ApproximateCounter, CachedCounter, Encoding, TiktokenCounter};

const PIECES: &[&str] = &[
    "The quick brown fox jumps over the lazy dog. Token counting decides when a long conversation is summarized; if the count is too low, the request overflows the model's context window. ",
    "pub fn count(&self, messages: &[Message]) -> u64 {\n    messages.iter().map(|m| self.inner.count_message(m)).sum()\n}\n",
    "{\"id\": 42, \"name\": \"widget\", \"tags\": [\"a\", \"b\"], \"price\": 19.99, \"stock\": {\"eu\": 12, \"us\": 7}}\n",
    "机器学习是人工智能的一个分支。它使计算机能够在没有明确编程的情况下从数据中学习。",
    "吾輩は猫である。名前はまだ無い。대한민국은 동아시아의 한반도 남부에 위치한 민주공화국이다. ",
    "Great job! 🎉🚀👍🏽 Family: 👨‍👩‍👧‍👦 Flags: 🇫🇷🇯🇵 ",
    "2026-11-30T06:12:09.331Z INFO worker[3] req_id=9e3779b9 path=/api/v1/items/17 status=200 latency_ms=221 msg=\"processed batch 17\"\n",
];

/// A deterministic mix of the pieces, `bytes` long (give or take one piece).
fn corpus(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 256);
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    while out.len() < bytes {
        // xorshift: a fixed, uneven interleaving of the pieces.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push_str(PIECES[(state % PIECES.len() as u64) as usize]);
    }
    out
}

/// `n` messages of about 1 KB each: user questions, AI answers with tool calls, tool
/// results.
fn conversation(n: usize) -> Vec<Message> {
    let text = corpus(1_000 * 64);
    let chunk = |i: usize| {
        let start = (i * 997) % (text.len() - 1_200);
        let start = (start..).find(|&s| text.is_char_boundary(s)).unwrap();
        let end = (start + 1_000..)
            .find(|&e| text.is_char_boundary(e))
            .unwrap();
        text[start..end].to_owned()
    };
    (0..n)
        .map(|i| match i % 3 {
            0 => Message::human(chunk(i)).with_id(format!("m{i}")),
            1 => Message::ai(chunk(i))
                .with_tool_calls(vec![ToolCall::new(
                    format!("call_{i}"),
                    "read_file",
                    serde_json::json!({"path": format!("/src/file_{i}.rs")}),
                )])
                .with_id(format!("m{i}")),
            _ => Message::tool(format!("call_{}", i - 1), chunk(i)).with_id(format!("m{i}")),
        })
        .collect()
}

fn counters() -> Vec<Box<dyn TokenCounter>> {
    vec![
        Box::new(ApproximateCounter::langchain()),
        Box::new(ApproximateCounter::anthropic()),
        Box::new(ApproximateCounter::langchain().script_aware()),
        Box::new(TiktokenCounter::new(Encoding::O200kBase).unwrap()),
        Box::new(TiktokenCounter::new(Encoding::Cl100kBase).unwrap()),
    ]
}

fn throughput(c: &mut Criterion) {
    let text = corpus(10 * 1024 * 1024);
    let mut group = c.benchmark_group("throughput");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for counter in counters() {
        group.bench_function(counter.name().to_owned(), |b| {
            b.iter(|| counter.count_text(black_box(&text)))
        });
    }
    group.finish();
}

fn incremental<C: TokenCounter + Clone + 'static>(c: &mut Criterion, inner: C) {
    let base = conversation(10_000);
    let name = inner.name().to_owned();
    let mut group = c.benchmark_group("conversation");
    group.sample_size(10);
    group.bench_function(format!("{name}/10000_from_scratch"), |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let cold = CachedCounter::new(inner.clone());
                let t = Instant::now();
                black_box(cold.count_messages(black_box(&base)));
                spent += t.elapsed();
            }
            spent
        })
    });
    group.sample_size(100);
    group.bench_function(format!("{name}/10000_plus_one_new"), |b| {
        let warm = CachedCounter::new(inner.clone());
        let mut conv = base.clone();
        warm.count_messages(&conv);
        let mut fresh = 0u64;
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                fresh += 1;
                conv.push(
                    Message::human(format!("a new question, number {fresh}, about the design"))
                        .with_id(format!("new{fresh}")),
                );
                let t = Instant::now();
                black_box(warm.count_messages(black_box(&conv)));
                spent += t.elapsed();
                conv.pop();
            }
            spent
        })
    });
    group.finish();
}

fn conversation_benches(c: &mut Criterion) {
    incremental(c, TiktokenCounter::new(Encoding::O200kBase).unwrap());
    incremental(c, ApproximateCounter::langchain());
}

/// An AI message as a coding agent sends it: a short preamble and three tool calls.
fn tool_call_message(path_prefix: &str, needle: &str) -> Message {
    Message::ai("Let me look at the counter and its callers before changing anything.")
        .with_tool_calls(vec![
            ToolCall::new(
                "call_7fQ2mZ1xK9",
                "read_file",
                serde_json::json!({"path": format!("{path_prefix}/src/approx.rs"), "offset": 120, "limit": 80}),
            ),
            ToolCall::new(
                "call_Wd3pL0aV5s",
                "grep",
                serde_json::json!({
                    "pattern": format!("fn count_\\w+\\(|{needle}"),
                    "path": path_prefix,
                    "include": ["*.rs", "*.toml"],
                    "case_sensitive": false,
                    "max_results": 50,
                }),
            ),
            ToolCall::new(
                "call_Hn8rT4cE2j",
                "edit_file",
                serde_json::json!({
                    "path": format!("{path_prefix}/src/cache.rs"),
                    "old_string": "    let total = counts.iter().sum::<u64>();\n    total\n",
                    "new_string": format!("    // {needle}: don't recount a cached prefix\n    counts.iter().sum::<u64>()\n"),
                    "replace_all": false,
                    "confidence": 0.85,
                }),
            ),
        ])
}

fn message_benches(c: &mut Criterion) {
    let counter = ApproximateCounter::langchain();
    let ascii = tool_call_message("crates/keel-tokens", "it's \"cached\"");
    let non_ascii = tool_call_message("docs/説明", "キャッシュ済み ✅");
    let plain = Message::human(
        "Please summarize what changed in the token counter since yesterday, \
         in particular whether the approximate counts still match LangChain's \
         count_tokens_approximately on messages with tool calls, images and names. \
         Keep it short: three bullet points, then the open questions, if any.",
    );
    let mut group = c.benchmark_group("message");
    group.bench_function("approximate/tool_calls_3", |b| {
        b.iter(|| counter.count_message(black_box(&ascii)))
    });
    group.bench_function("approximate/tool_calls_3_non_ascii", |b| {
        b.iter(|| counter.count_message(black_box(&non_ascii)))
    });
    group.bench_function("approximate/plain_text", |b| {
        b.iter(|| counter.count_message(black_box(&plain)))
    });
    group.finish();
}

criterion_group!(benches, message_benches, throughput, conversation_benches);
criterion_main!(benches);
