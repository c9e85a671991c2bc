//! The offline summarizer on a 10,000-message span (it must stay under 50 ms):
//!
//! - `extractive/10k_span`: a first summary of a generated support session of 10,000
//!   messages (tool loops with long logs, chit-chat, planted facts);
//! - `extractive/10k_fold`: the same span folded into a 300-word previous summary;
//! - `extractive/10k_styled`: 10,000 messages of keel-testkit's long styled sessions
//!   (read-only tool results under many names, each read line by line, chat-log
//!   pastes, corrections).
//!
//! Run: `cargo bench -p keel-summarization --bench extractive -- --noplot`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use keel_summarization::extractive::{ExtractiveOptions, summarize};
use keel_testkit::planted::{SessionShape, generate};
use keel_testkit::styles::{self, Style};

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
    let mut styled = Vec::new();
    let mut seed = 1;
    while styled.len() < 10_000 {
        styled.extend(
            styles::generate(Style::Long, seed)
                .messages
                .into_iter()
                .skip(1),
        );
        seed += 1;
    }
    styled.truncate(10_000);
    let once = summarize(None, &styled, &options);
    assert_eq!(once, summarize(None, &styled, &options));
    c.bench_function("extractive/10k_styled", |b| {
        b.iter(|| black_box(summarize(None, black_box(&styled), &options)))
    });
}

criterion_group! {
    name = extractive;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(4));
    targets = benches
}
criterion_main!(extractive);
