//! `keel tokens` end to end: counts, JSON shape, and the three user errors.

// Helpers sit outside #[test] functions; a broken setup should fail loudly.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::process::Command;

fn keel(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn transcript(lines: &[&str]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
    f
}

const HELLO: &str = r#"{"role":"user","content":"hello world","id":"h1"}"#;
const HI: &str = r#"{"role":"assistant","content":"hi there!","id":"a1"}"#;

#[test]
fn json_output_has_per_message_counts_and_total() {
    let f = transcript(&[HELLO, "", HI]);
    let (code, out, err) = keel(&[
        "tokens",
        f.path().to_str().unwrap(),
        "--counter",
        "approximate",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"total": 15, "messages": [{"id": "h1", "tokens": 7}, {"id": "a1", "tokens": 8}]})
    );
}

#[test]
fn exact_counter_is_the_default_and_plain_output_ends_with_total() {
    let f = transcript(&[HELLO]);
    let (code, out, err) = keel(&["tokens", f.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // 3 framing + "user" (1) + "hello world" (2) under o200k_base.
    assert_eq!(out, "h1\tuser\t6\ntotal\t6\t(1 messages, o200k_base)\n");
}

#[test]
fn text_mode_counts_the_file_as_text() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    write!(f, "hello world").unwrap();
    let path = f.path().to_str().unwrap();
    let (code, out, _) = keel(&[
        "tokens",
        path,
        "--text",
        "--counter",
        "cl100k_base",
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(out.trim(), r#"{"total":2,"messages":[]}"#);
}

#[test]
fn missing_file_bad_line_and_unknown_counter_are_clear_errors() {
    let (code, _, err) = keel(&["tokens", "/nonexistent/chat.jsonl"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("/nonexistent/chat.jsonl") && err.contains("cannot read"),
        "{err}"
    );

    let f = transcript(&[HELLO, "{not json", HI]);
    let path = f.path().to_str().unwrap();
    let (code, _, err) = keel(&["tokens", path]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("{path}:2: not a valid message")),
        "{err}"
    );

    let (code, _, err) = keel(&["tokens", path, "--counter", "gpt2"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("unknown counter \"gpt2\"")
            && err.contains("o200k_base, cl100k_base, approximate"),
        "{err}"
    );
}

#[test]
fn model_prints_window_output_limit_usable_input_and_source() {
    let (code, out, err) = keel(&["tokens", "--model", "gpt-4o-2024-08-06"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "model\tgpt-4o-2024-08-06\nfamily\tgpt-4o (openai)\nwindow\t128000\noutput limit\t16384\nusable input\t111616\t(the window less the output limit)\nsource\thttps://platform.openai.com/docs/models/gpt-4o\n"
    );
    let (code, out, err) = keel(&[
        "tokens",
        "--model",
        "anthropic/claude-3.5-sonnet",
        "--max-tokens",
        "1000",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["context_window"], 200_000);
    assert_eq!(v["max_output_tokens"], 8_192);
    assert_eq!(v["usable_input_tokens"], 199_000);
    assert_eq!(v["family"], "claude-3-5-sonnet");
}

#[test]
fn an_unknown_model_says_so_and_a_window_can_be_given() {
    let (code, out, err) = keel(&["tokens", "--model", "smollm2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("window\tunknown\n"), "{out}");
    assert!(out.contains("--context-window"), "{out}");
    let (code, out, err) = keel(&["tokens", "--model", "smollm2", "--context-window", "2048"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("window\t2048\n") && out.contains("usable input\t2048\t"),
        "{out}"
    );
    let (code, _, err) = keel(&["tokens", "--model", "smollm2", "--context-window", "0"]);
    assert_eq!(code, 2, "a zero window is a usage error: {err}");
}

#[test]
fn model_and_file_together_print_both() {
    let f = transcript(&[HELLO]);
    let (code, out, err) = keel(&[
        "tokens",
        f.path().to_str().unwrap(),
        "--counter",
        "approximate",
        "--model",
        "gpt-4o",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["total"], 7);
    assert_eq!(v["model"]["usable_input_tokens"], 111_616);
    let (code, _, err) = keel(&["tokens"]);
    assert_eq!(code, 2, "neither FILE nor --model: {err}");
    // KEEL_CONTEXT_WINDOW, set for `keel run`, does not get in the way of counting.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_keel"))
        .args([
            "tokens",
            f.path().to_str().unwrap(),
            "--counter",
            "approximate",
        ])
        .env("KEEL_CONTEXT_WINDOW", "2048")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
