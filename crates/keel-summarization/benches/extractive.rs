//! The offline summarizer on a 10,000-message span (issue 17 asks for < 50 ms):
//!
//! - `extractive/10k_span`: a first summary of a generated support session of 10,000
//!   messages (tool loops with long logs, chit-chat, planted facts);
//! - `extractive/10k_fold`: the same span folded into a 300-word previous summary.
//!
//! Run: `cargo bench -p keel-summarization --bench extractive -- --noplot`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use keel_summarization::extractive::{ExtractiveOptions, summarize};
use keel_testkit::planted::{SessionShape, generate};

fn benches(c: &mut Criterion) {
    let shape = SessionShape {
        messages: 10_000,
        facts: 60,
        planted_before_per_mille: 1000,
    };
    let session = generate(17, &shape);
    // The span a summary covers: everything after the system prompt, 10,000 messages.
    let span = &session.messages[1..=10_000.min(session.messages.len() - 1)];
    let options = ExtractiveOptions::default();
    let first = summarize(None, span, &options);
    // Byte-identical across runs (the doc of this bench states it; a check is cheap).
    assert_eq!(first, summarize(None, span, &options));
    c.bench_function("extractive/10k_span", |b| {
        b.iter(|| black_box(summarize(None, black_box(span), &options)))
    });
    c.bench_function("extractive/10k_fold", |b| {
        b.iter(|| black_box(summarize(Some(&first), black_box(span), &options)))
    });
}

criterion_group! {
    name = extractive;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(4));
    targets = benches
}
criterion_main!(extractive);
