//! Writes one generated session of a given style, and its probes, for `keel eval`:
//!
//! ```text
//! cargo run -p keel-testkit --example styled_session -- corrected 1000 /tmp/corrected
//! keel eval /tmp/corrected.jsonl --probes /tmp/corrected.probes.jsonl \
//!     --config examples/summarization.yaml
//! ```
//!
//! Styles: plain, corrected, read-tools, dense, multilingual, long, paste-heavy,
//! reworded, answer-next. Tune on seeds 1-99;
//! report figures on seeds 1000 and up.

use std::process::ExitCode;

use keel_testkit::styles::{Style, generate};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [style, seed, prefix] = args.as_slice() else {
        eprintln!(
            "usage: styled_session STYLE SEED OUT_PREFIX (writes OUT_PREFIX.jsonl and OUT_PREFIX.probes.jsonl)"
        );
        return ExitCode::from(2);
    };
    let Some(style) = Style::from_name(style) else {
        let names: Vec<&str> = Style::ALL.iter().map(|s| s.as_str()).collect();
        eprintln!("unknown style {style:?}; one of: {}", names.join(", "));
        return ExitCode::from(2);
    };
    let Ok(seed) = seed.parse::<u64>() else {
        eprintln!("SEED must be a whole number, got {seed:?}");
        return ExitCode::from(2);
    };
    let session = generate(style, seed);
    let transcript = match session.to_jsonl() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot serialize the session: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (path, text) in [
        (format!("{prefix}.jsonl"), transcript),
        (format!("{prefix}.probes.jsonl"), session.probes_jsonl()),
    ] {
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("cannot write {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    println!(
        "{prefix}.jsonl: {} messages; {prefix}.probes.jsonl: {} probes",
        session.messages.len(),
        session.probes.len()
    );
    ExitCode::SUCCESS
}
