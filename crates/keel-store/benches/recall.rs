//! One recall `search` (a question of 8 terms) on a scope of 1,000, 10,000 and 100,000
//! indexed messages, with other scopes' messages in the same index, for the memory store,
//! SQLite (a WAL file in a temp dir) and PostgreSQL. A search reads the postings of its
//! rarest terms, up to a fixed budget, so its cost should stop growing with the thread
//! (the goal: p99 at most 2 ms at 10,000 messages on SQLite).
//!
//! ```text
//! cargo bench -p keel-store --bench recall                               # memory, SQLite
//! scripts/postgres.sh -- cargo bench -p keel-store --features postgres --bench recall
//! ```
//!
//! Besides criterion's figures, each case prints the median and the 99th percentile of
//! its own timing loop (`recall_search/BACKEND/N: median … p99 …`). Built with
//! `--features postgres` and without `KEEL_TEST_POSTGRES_URL`, PostgreSQL is skipped with
//! a note.
//!
//! `KEEL_RECALL_BENCH_BACKENDS` (a comma-separated subset of `memory,sqlite,postgres`)
//! runs only those backends. `KEEL_RECALL_BENCH_DB` names the SQLite file to use instead
//! of one in a temp dir: it is kept, and a later run finds its scopes filled already, so
//! two builds can be timed on the same file without writing it again.
#![allow(missing_docs)] // criterion's macros generate undocumented items
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code: fail loudly

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keel_core::recall::{RecallDocument, RecallIndex, query_terms};
use keel_core::store::SessionScope;
use keel_store::Store;

/// Messages of the searched scope.
const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// Messages of another scope written beside each searched one.
const NOISE: usize = 2_000;
/// Searches of the timing loop that gives the percentiles.
const TIMED: usize = 2_000;
/// Distinct questions, asked in turn.
const QUESTIONS: usize = 512;
/// Distinct words of the generated language.
const VOCABULARY: usize = 20_000;

/// SplitMix64: deterministic on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A number in `0..1`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A generated language: pronounceable words used with Zipf's law (the `k`-th most
/// common word about `1/k` as often as the first), as words are in real chats.
struct Language {
    words: Vec<String>,
    /// Cumulative weights of `words`.
    cumulative: Vec<f64>,
}

impl Language {
    fn new(rng: &mut Rng) -> Self {
        const ONSETS: [&str; 16] = [
            "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "br",
        ];
        const VOWELS: [&str; 6] = ["a", "e", "i", "o", "u", "ai"];
        const CODAS: [&str; 8] = ["", "n", "r", "s", "t", "l", "m", "x"];
        let mut seen = std::collections::HashSet::new();
        let mut words = Vec::with_capacity(VOCABULARY);
        while words.len() < VOCABULARY {
            let syllables = 1 + rng.below(3);
            let mut w = String::new();
            for _ in 0..syllables {
                w.push_str(ONSETS[rng.below(ONSETS.len())]);
                w.push_str(VOWELS[rng.below(VOWELS.len())]);
                w.push_str(CODAS[rng.below(CODAS.len())]);
            }
            // Words the tokenizer would drop or cut are not words of this language.
            if query_terms(&w) == [w.clone()] && seen.insert(w.clone()) {
                words.push(w);
            }
        }
        let mut total = 0.0;
        let cumulative = (1..=VOCABULARY)
            .map(|k| {
                total += 1.0 / k as f64;
                total
            })
            .collect();
        Language { words, cumulative }
    }

    fn word(&self, rng: &mut Rng) -> &str {
        let total = self.cumulative[self.cumulative.len() - 1];
        let x = rng.unit() * total;
        let i = self.cumulative.partition_point(|&c| c < x);
        &self.words[i.min(self.words.len() - 1)]
    }

    /// A message of 6 to 40 words, now and then with a number in it.
    fn message(&self, rng: &mut Rng) -> String {
        let n = 6 + rng.below(35);
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            if rng.below(12) == 0 {
                out.push(format!("{}", rng.below(10_000)));
            } else {
                out.push(self.word(rng).to_owned());
            }
        }
        out.join(" ")
    }

    /// A question: 8 distinct words, common and rare as the language has them.
    fn question(&self, rng: &mut Rng) -> Vec<String> {
        let mut q: Vec<String> = Vec::with_capacity(8);
        while q.len() < 8 {
            let w = self.word(rng).to_owned();
            if !q.contains(&w) {
                q.push(w);
            }
        }
        q
    }
}

/// `n` messages of a thread, each with the one before as its context.
fn thread(language: &Language, rng: &mut Rng, n: usize) -> Vec<RecallDocument> {
    let mut previous = String::new();
    (0..n)
        .map(|i| {
            let text = language.message(rng);
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let mut d = RecallDocument::new(format!("m{i}"), i as u64, role, text.clone());
            d.context = previous.chars().take(300).collect();
            previous = text;
            d
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The searched scope of size `n`, and the scope written beside it.
fn scopes(n: usize) -> (SessionScope, SessionScope) {
    (
        SessionScope::new("bench", "user", format!("thread-{n}"), ""),
        SessionScope::new("bench", "other", format!("thread-{n}"), ""),
    )
}

async fn fill(store: &Store, language: &Language, seed: u64) {
    let mut rng = Rng(seed);
    for n in SIZES {
        let (scope, other) = scopes(n);
        for (s, size) in [(&scope, n), (&other, NOISE)] {
            if store.indexed_count(s).await.unwrap() as usize == size {
                continue;
            }
            for batch in thread(language, &mut rng, size).chunks(1_000) {
                store.index_documents(s, batch).await.unwrap();
            }
            assert_eq!(store.indexed_count(s).await.unwrap() as usize, size);
        }
    }
}

/// `sorted[q]` for a quantile `q` of a sorted sample.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn search(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: Arc<Store>) {
    let mut rng = Rng(7);
    let language = Language::new(&mut rng);
    rt.block_on(fill(&store, &language, 11));
    let questions: Vec<Vec<String>> = (0..QUESTIONS)
        .map(|_| language.question(&mut rng))
        .collect();
    let mut group = c.benchmark_group("recall_search");
    group.sample_size(50);
    group.measurement_time(Duration::from_secs(5));
    for n in SIZES {
        let (scope, _) = scopes(n);
        // The percentiles, from a loop of our own (criterion reports mean and median).
        let mut times: Vec<Duration> = rt.block_on(async {
            let mut times = Vec::with_capacity(TIMED);
            for i in 0..TIMED {
                let q = &questions[i % QUESTIONS];
                let start = Instant::now();
                let hits = store.search(&scope, q, 32).await.unwrap();
                times.push(start.elapsed());
                std::hint::black_box(hits);
            }
            times
        });
        times.sort_unstable();
        println!(
            "recall_search/{name}/{n}: median {:.3} ms, p99 {:.3} ms, max {:.3} ms ({TIMED} searches)",
            quantile(&times, 0.5).as_secs_f64() * 1e3,
            quantile(&times, 0.99).as_secs_f64() * 1e3,
            quantile(&times, 1.0).as_secs_f64() * 1e3,
        );
        let next = AtomicUsize::new(0);
        group.bench_function(BenchmarkId::new(name, n), |b| {
            b.to_async(rt).iter(|| async {
                let q = &questions[next.fetch_add(1, Ordering::Relaxed) % QUESTIONS];
                std::hint::black_box(store.search(&scope, q, 32).await.unwrap());
            });
        });
    }
    group.finish();
}

/// Whether `KEEL_RECALL_BENCH_BACKENDS` (all when unset) names `backend`.
fn wanted(backend: &str) -> bool {
    match std::env::var("KEEL_RECALL_BENCH_BACKENDS") {
        Ok(list) => list.split(',').any(|b| b.trim() == backend),
        Err(_) => true,
    }
}

fn memory(c: &mut Criterion) {
    if !wanted("memory") {
        return;
    }
    let rt = runtime();
    search(c, &rt, "memory", Arc::new(Store::memory()));
}

fn sqlite(c: &mut Criterion) {
    if !wanted("sqlite") {
        return;
    }
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = match std::env::var("KEEL_RECALL_BENCH_DB") {
        Ok(path) => std::path::PathBuf::from(path),
        Err(_) => dir.path().join("bench.db"),
    };
    let url = format!("sqlite://{}", path.display());
    let store = rt.block_on(Store::connect(&url)).unwrap();
    search(c, &rt, "sqlite", Arc::new(store));
}

#[cfg(feature = "postgres")]
fn postgres(c: &mut Criterion) {
    if !wanted("postgres") {
        return;
    }
    let Ok(url) = std::env::var("KEEL_TEST_POSTGRES_URL") else {
        println!("recall_search/postgres: skipped, KEEL_TEST_POSTGRES_URL is not set");
        return;
    };
    let rt = runtime();
    let store = rt.block_on(Store::connect(&url)).unwrap();
    search(c, &rt, "postgres", Arc::new(store));
}

#[cfg(not(feature = "postgres"))]
fn postgres(_: &mut Criterion) {
    if !wanted("postgres") {
        return;
    }
    println!("recall_search/postgres: skipped, built without --features postgres");
}

criterion_group!(benches, memory, sqlite, postgres);
criterion_main!(benches);
