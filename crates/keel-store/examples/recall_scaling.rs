//! Does recall's per-call cost grow with the thread? The same work at two sizes, in one
//! process: a thread of N messages is indexed, then searched once per 10 messages (`--every`; a
//! question of 8 words, then a read of the replies that follow its hits), as a replay
//! that asks every 10th turn would search it. Done at N and at 4N on a fresh scope of
//! the same store: if a search costs the same whatever the thread holds, the searches
//! of the second cost about 4 times those of the first, about 16 times if each search
//! reads the whole thread. A search reads the postings of its rarest terms up to a
//! budget (`MAX_POSTINGS`), so its cost may grow until the budget is reached; sizes
//! from about 10,000 messages are past it.
//!
//! ```text
//! cargo run --release -p keel-store --example recall_scaling -- --backend sqlite --n 25000
//! cargo run --release -p keel-store --example recall_scaling -- --backend memory --n 25000 --max-ratio 4.6
//! ```
//!
//! Prints one line per size with the searches' CPU seconds (the least of three rounds of
//! the process's user + system
//! time, from `/proc/self/stat`: SQLite runs in this process's threads) and the ratio of the two;
//! with `--max-ratio R` it exits with status 1 when the ratio is above `R`.
//! `scripts/scaling.sh` runs it in CI; docs/benchmarks.md has the figures at full size.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a measuring tool: fail loudly

use keel_core::recall::{RecallDocument, RecallIndex};
use keel_core::store::SessionScope;
use keel_store::Store;

/// Distinct words of the generated text.
const VOCABULARY: u64 = 3_000;

/// SplitMix64: the same text on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A word, common ones far more often than rare ones (rank drawn log-uniformly,
    /// close to Zipf's law).
    fn word(&mut self) -> String {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        spell(((VOCABULARY as f64).powf(u) as u64).min(VOCABULARY - 1))
    }

    /// One of the 30 most common words: a question such as "what did we say about
    /// it then" is made of them, and each of its terms is in thousands of messages of
    /// a long thread.
    fn common_word(&mut self) -> String {
        spell(self.next() % 30)
    }

    fn text(&mut self, words: usize) -> String {
        (0..words)
            .map(|_| self.word())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The word of a rank: `w` followed by the rank written in letters.
fn spell(mut rank: u64) -> String {
    let mut w = String::from("w");
    loop {
        w.push(char::from(b'a' + (rank % 26) as u8));
        rank /= 26;
        if rank == 0 {
            break w;
        }
    }
}

/// utime + stime of this process, in seconds (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    ticks(11).unwrap_or(0.0) / 100.0 + ticks(12).unwrap_or(0.0) / 100.0
}

/// Fills a new scope with `n` messages (in batches, not timed), then makes `n / every`
/// searches of it, each followed by a read of the replies after its hits; returns the
/// CPU seconds of the searches (the least of three rounds) and the hits found (so the output shows they found
/// something).
async fn work(store: &Store, n: usize, every: usize, seed: u64) -> (f64, usize) {
    let scope = SessionScope::new("scaling", "user", format!("thread-{n}"), "");
    let mut rng = Rng(seed);
    let mut previous = String::new();
    let documents: Vec<RecallDocument> = (0..n)
        .map(|i| {
            let words = 6 + (rng.next() % 35) as usize;
            let text = rng.text(words);
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let mut doc = RecallDocument::new(format!("m{i}"), i as u64, role, text.clone());
            doc.context = previous.chars().take(300).collect();
            previous = text;
            doc
        })
        .collect();
    for batch in documents.chunks(1_000) {
        store.index_documents(&scope, batch).await.unwrap();
    }
    // One question in four is made of common words only.
    let questions: Vec<Vec<String>> = (0..n / every)
        .map(|q| {
            (0..8)
                .map(|_| {
                    if q % 4 == 3 {
                        rng.common_word()
                    } else {
                        rng.word()
                    }
                })
                .collect()
        })
        .collect();
    // The searches three times, the cheapest counted: another process on the machine
    // can only add time.
    let mut best = f64::INFINITY;
    let mut hits = 0;
    for _ in 0..3 {
        hits = 0;
        let before = cpu_seconds();
        for query in &questions {
            let found = store.search(&scope, query, 8).await.unwrap();
            let seqs: Vec<u64> = found.iter().map(|h| h.document.seq).collect();
            hits += found.len() + store.following(&scope, &seqs).await.unwrap().len();
        }
        best = best.min(cpu_seconds() - before);
    }
    (best, hits)
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let backend = flag(&args, "--backend").unwrap_or_else(|| "sqlite".into());
    let n: usize = flag(&args, "--n").map_or(10_000, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("--n takes a number of messages, got {v:?}"))
    });
    let max_ratio: Option<f64> = flag(&args, "--max-ratio").map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("--max-ratio takes a number, got {v:?}"))
    });
    let every: usize = flag(&args, "--every").map_or(10, |v| {
        v.parse()
            .ok()
            .filter(|&e: &usize| e > 0)
            .unwrap_or_else(|| panic!("--every takes a number of messages above 0, got {v:?}"))
    });
    let dir = tempfile::tempdir().unwrap();
    let store = match backend.as_str() {
        "memory" => Store::memory(),
        "sqlite" => {
            let url = format!("sqlite://{}", dir.path().join("recall.db").display());
            Store::connect(&url).await.unwrap()
        }
        other => panic!("--backend is memory or sqlite, got {other:?}"),
    };
    let (small, small_hits) = work(&store, n, every, 1).await;
    let (large, large_hits) = work(&store, 4 * n, every, 2).await;
    let ratio = large / small.max(0.01);
    println!("recall {backend}: {n} messages {small:.2} s CPU ({small_hits} hits)");
    println!(
        "recall {backend}: {} messages {large:.2} s CPU ({large_hits} hits)",
        4 * n
    );
    println!("recall {backend}: ratio {ratio:.2}");
    if let Some(max) = max_ratio
        && ratio > max
    {
        eprintln!("recall {backend}: cost ratio {ratio:.2} is over {max} for 4x the work");
        std::process::exit(1);
    }
}
