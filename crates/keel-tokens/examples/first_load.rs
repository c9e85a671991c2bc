//! Time to load a tokenizer the first time in a process, then to count once.
//!
//! The load happens once per process, so it can only be measured in a fresh one:
//! `cargo run --release -p keel-tokens --example first_load -- o200k_base`
//! (or `cl100k_base`); run it several times and read the spread.

use std::process::ExitCode;
use std::time::Instant;

use keel_core::tokens::TokenCounter;
use keel_tokens::exact::{Encoding, TiktokenCounter, is_loaded, warm_up};

fn main() -> ExitCode {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "o200k_base".to_owned());
    let Some(encoding) = Encoding::from_name(&name) else {
        eprintln!("unknown encoding {name:?}; valid: o200k_base, cl100k_base");
        return ExitCode::FAILURE;
    };
    assert_not_loaded(encoding);
    let start = Instant::now();
    if let Err(e) = warm_up(encoding) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let load = start.elapsed();
    let start = Instant::now();
    let tokens = TiktokenCounter::new(encoding).map(|c| c.count_text("hello world"));
    let first = start.elapsed();
    match tokens {
        Ok(n) => {
            println!(
                "{name}: first load {:.1} ms; next use {:.1} us ({n} tokens)",
                load.as_secs_f64() * 1e3,
                first.as_secs_f64() * 1e6
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn assert_not_loaded(encoding: Encoding) {
    if is_loaded(encoding) {
        eprintln!(
            "warning: {} was already loaded; the figure is not a first load",
            encoding.name()
        );
    }
}
