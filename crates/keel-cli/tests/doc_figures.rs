//! Every figure the documentation quotes for the bundled session is what `keel replay`
//! prints for it, so the docs cannot drift from the command.
//!
//! The docs mark each such figure, and this test runs the command and compares:
//!
//! - inline: `<!-- fig STACK.NAME -->343,655<!-- /fig -->` (an HTML comment, invisible
//!   once rendered), the value of `NAME` in `keel replay ... --json` for `STACK`;
//! - a whole block: a line `<!-- fig-lines STACK -->` right before a ```text block,
//!   each line of which (but `...`) must be a line of the command's text output: the
//!   row of the same call, or the totals line of the same label.
//!
//! `STACK` is one of `summarization` (`--config examples/summarization.yaml`), `memory`
//! (`--memory session --n-messages 10`), `both` (the two together), and
//! `memory_pinned` / `both_pinned` (the same with `--pinned-keys project_id,cluster`, as
//! docs/getting-started.md runs them). `NAME` is a field of `totals` (`sent_tokens`,
//! `baseline_last100_tokens`, `full_history_tokens`, `summary_calls`, `cache_hits`,
//! `pair_violations`, `calls`), a share (`sent_vs_last100` and `sent_vs_full` with one
//! decimal, `sent_vs_last100_2` with two, written `19.96 %`), or `first_compacted_call`
//! and `compacted_calls` (calls whose request the summarization middleware compacted).
//!
//! When the figures change on purpose, one command rewrites every marked figure and
//! line in place (then review the diff):
//!
//! ```sh
//! KEEL_UPDATE_DOC_FIGURES=1 cargo test -p keel-cli --test doc_figures
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const STACKS: [&str; 5] = [
    "summarization",
    "memory",
    "both",
    "memory_pinned",
    "both_pinned",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pages that may quote the bundled session.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// `keel replay` of the bundled session through `stack`, as text or `--json`.
fn replay(stack: &str, json: bool, db: &Path) -> String {
    let mut args: Vec<String> = vec![
        "replay".into(),
        "examples/sessions/support-prj123.jsonl".into(),
        "--progress".into(),
        "none".into(),
    ];
    if stack.starts_with("summarization") || stack.starts_with("both") {
        args.extend(["--config".into(), "examples/summarization.yaml".into()]);
    }
    if stack != "summarization" {
        args.extend(["--memory", "session", "--n-messages", "10"].map(String::from));
        if stack.ends_with("_pinned") {
            args.extend(["--pinned-keys".into(), "project_id,cluster".into()]);
        }
        // A database of its own per run: a fresh session memory, as on a first run.
        args.extend([
            "--db".into(),
            format!(
                "sqlite://{}?mode=rwc",
                db.join(format!("{stack}-{json}.db")).display()
            ),
        ]);
    }
    if json {
        args.push("--json".into());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(&args)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "keel {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The named figures of one `--json` report.
fn figures(report: &Value) -> BTreeMap<String, String> {
    let t = &report["totals"];
    let n = |key: &str| {
        t[key]
            .as_u64()
            .unwrap_or_else(|| panic!("totals.{key}: {t}"))
    };
    let mut f = BTreeMap::new();
    for key in [
        "calls",
        "sent_tokens",
        "baseline_last100_tokens",
        "full_history_tokens",
        "summary_calls",
        "cache_hits",
        "pair_violations",
    ] {
        f.insert(key.to_owned(), thousands(n(key)));
    }
    let share = |a: u64, b: u64| 100.0 * a as f64 / b as f64;
    let last100 = share(n("sent_tokens"), n("baseline_last100_tokens"));
    let full = share(n("sent_tokens"), n("full_history_tokens"));
    f.insert("sent_vs_last100".into(), format!("{last100:.1} %"));
    f.insert("sent_vs_last100_2".into(), format!("{last100:.2} %"));
    f.insert("sent_vs_full".into(), format!("{full:.1} %"));
    let compacted: Vec<u64> = report["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["type"] == "context_compacted"))
        })
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    f.insert("compacted_calls".into(), thousands(compacted.len() as u64));
    if let Some(first) = compacted.first() {
        f.insert("first_compacted_call".into(), first.to_string());
    }
    f
}

/// The key a line of the text output is matched by: a row's call number, a totals
/// line's label.
fn line_key(line: &str) -> String {
    let trimmed = line.trim();
    match trimmed.split_whitespace().next() {
        Some(first) if first.chars().all(|c| c.is_ascii_digit()) => format!("call {first}"),
        _ => trimmed
            .split(|c: char| c.is_ascii_digit())
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

struct Outputs {
    figures: BTreeMap<String, BTreeMap<String, String>>,
    lines: BTreeMap<String, BTreeMap<String, String>>,
}

fn outputs() -> Outputs {
    let db = tempfile::tempdir().unwrap();
    let runs: Vec<(String, bool, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = STACKS
            .iter()
            .flat_map(|stack| [(stack, false), (stack, true)])
            .map(|(stack, json)| {
                let db = db.path();
                s.spawn(move || (stack.to_string(), json, replay(stack, json, db)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut out = Outputs {
        figures: BTreeMap::new(),
        lines: BTreeMap::new(),
    };
    for (stack, json, text) in runs {
        if json {
            let report: Value = serde_json::from_str(&text).unwrap();
            out.figures.insert(stack, figures(&report));
        } else {
            let lines = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| (line_key(l), l.trim_end().to_owned()))
                .collect();
            out.lines.insert(stack, lines);
        }
    }
    out
}

/// Checks (or, updating, rewrites) one page; returns its new text and the problems.
fn check_page(text: &str, outputs: &Outputs, page: &str) -> (String, Vec<String>) {
    let mut problems = Vec::new();
    let mut fixed = String::new();
    // Inline figures.
    let mut rest = text;
    while let Some(at) = rest.find("<!-- fig ") {
        let (before, after) = rest.split_at(at);
        fixed.push_str(before);
        let line_no = text.len() - rest.len() + at;
        let line_no = text[..line_no].lines().count().max(1);
        let open_end = after.find("-->").unwrap() + 3;
        let name = after["<!-- fig ".len()..open_end - 3].trim();
        let close = after[open_end..]
            .find("<!-- /fig -->")
            .unwrap_or_else(|| panic!("{page}:{line_no}: `<!-- fig {name} -->` is not closed"));
        let quoted = &after[open_end..open_end + close];
        let (stack, key) = name
            .split_once('.')
            .unwrap_or_else(|| panic!("{page}:{line_no}: figure {name:?} is not STACK.NAME"));
        let value = outputs
            .figures
            .get(stack)
            .and_then(|f| f.get(key))
            .unwrap_or_else(|| panic!("{page}:{line_no}: unknown figure {name:?}"));
        if quoted != value {
            problems.push(format!(
                "{page}:{line_no}: {name} is {quoted:?} in the page, {value:?} from keel replay"
            ));
        }
        fixed.push_str(&after[..open_end]);
        fixed.push_str(value);
        fixed.push_str("<!-- /fig -->");
        rest = &after[open_end + close + "<!-- /fig -->".len()..];
    }
    fixed.push_str(rest);

    // Blocks of output lines.
    let mut out = String::new();
    let mut stack: Option<String> = None;
    let mut in_block = false;
    for (i, line) in fixed.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches('\n');
        if let Some(name) = bare
            .strip_prefix("<!-- fig-lines ")
            .and_then(|r| r.strip_suffix(" -->"))
        {
            stack = Some(name.trim().to_owned());
            out.push_str(line);
            continue;
        }
        if stack.is_some() && !in_block && bare.starts_with("```") {
            in_block = true;
            out.push_str(line);
            continue;
        }
        if in_block && bare.starts_with("```") {
            in_block = false;
            stack = None;
            out.push_str(line);
            continue;
        }
        if let (true, Some(stack)) = (in_block, &stack) {
            let lines = outputs
                .lines
                .get(stack.as_str())
                .unwrap_or_else(|| panic!("{page}:{}: unknown stack {stack:?}", i + 1));
            if bare.trim() == "..." || bare.trim().is_empty() {
                out.push_str(line);
                continue;
            }
            match lines.get(&line_key(bare)) {
                Some(fresh) => {
                    if fresh.split_whitespace().ne(bare.split_whitespace()) {
                        problems.push(format!(
                            "{page}:{}: `{}` is not what keel replay prints: `{}`",
                            i + 1,
                            bare.trim(),
                            fresh.trim()
                        ));
                    }
                    out.push_str(fresh);
                    out.push('\n');
                }
                None => {
                    problems.push(format!(
                        "{page}:{}: keel replay ({stack}) prints no line like `{}`",
                        i + 1,
                        bare.trim()
                    ));
                    out.push_str(line);
                }
            }
            continue;
        }
        out.push_str(line);
    }
    (out, problems)
}

#[test]
fn the_docs_quote_what_keel_replay_prints_for_the_bundled_session() {
    let outputs = outputs();
    let update = std::env::var_os("KEEL_UPDATE_DOC_FIGURES").is_some();
    let mut problems = Vec::new();
    let mut marked = 0;
    for path in pages() {
        let text = std::fs::read_to_string(&path).unwrap();
        marked += text.matches("<!-- fig ").count() + text.matches("<!-- fig-lines ").count();
        let page = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        let (fixed, found) = check_page(&text, &outputs, &page);
        if update && fixed != text {
            std::fs::write(&path, &fixed).unwrap();
            eprintln!("rewrote {page}");
        } else {
            problems.extend(found);
        }
    }
    assert!(
        marked >= 10,
        "only {marked} marked figures: were the markers removed?"
    );
    assert!(
        problems.is_empty(),
        "the docs no longer match keel replay (regenerate with \
         `KEEL_UPDATE_DOC_FIGURES=1 cargo test -p keel-cli --test doc_figures`, then review \
         the diff):\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_changed_figure_is_caught() {
    let mut figures = BTreeMap::new();
    figures.insert(
        "summarization".to_owned(),
        BTreeMap::from([("sent_tokens".to_owned(), "343,655".to_owned())]),
    );
    let mut lines = BTreeMap::new();
    lines.insert(
        "summarization".to_owned(),
        BTreeMap::from([(
            "tokens sent".to_owned(),
            "tokens sent                343655".to_owned(),
        )]),
    );
    let outputs = Outputs { figures, lines };
    let good = "sent <!-- fig summarization.sent_tokens -->343,655<!-- /fig --> tokens\n\
                <!-- fig-lines summarization -->\n```text\ntokens sent    343655\n...\n```\n";
    assert!(check_page(good, &outputs, "p").1.is_empty());
    let stale = good
        .replace("343,655", "338,633")
        .replace("343655", "338633");
    let (fixed, problems) = check_page(&stale, &outputs, "p");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(fixed.contains(">343,655<") && fixed.contains("tokens sent                343655"));
}
