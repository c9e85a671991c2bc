//! `keel replay` end to end: the binary on the bundled session, its JSON report and
//! request dumps, and how it refuses bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn keel(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keel"))
        .current_dir(dir)
        .arg("replay")
        .args(args)
        .output()
        .unwrap()
}

fn session() -> String {
    root()
        .join("examples/sessions/support-prj123.jsonl")
        .display()
        .to_string()
}

#[test]
fn json_report_and_request_dumps_on_the_bundled_session() {
    let dir = tempfile::tempdir().unwrap();
    let config = root()
        .join("examples/summarization.yaml")
        .display()
        .to_string();
    let out = keel(
        dir.path(),
        &[
            &session(),
            "--config",
            &config,
            "--json",
            "--dump-requests",
            "requests",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let calls = report["calls"].as_array().unwrap();
    for key in [
        "index",
        "history_messages",
        "history_tokens",
        "request_messages",
        "request_tokens",
        "summary_call",
        "cache_hit",
        "events",
    ] {
        assert!(calls[0].get(key).is_some(), "calls[].{key}");
    }
    let totals = &report["totals"];
    for key in [
        "sent_tokens",
        "baseline_last100_tokens",
        "full_history_tokens",
        "summary_calls",
        "cache_hits",
    ] {
        assert!(totals[key].as_u64().is_some(), "totals.{key}");
    }
    assert!(totals["sent_tokens"].as_u64() < totals["full_history_tokens"].as_u64());

    // One file per call, each the request exactly as sent (system message first).
    let last = format!("{:04}.json", calls.len());
    let dumped = std::fs::read_dir(dir.path().join("requests"))
        .unwrap()
        .count();
    assert_eq!(dumped, calls.len());
    let body: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("requests").join(last)).unwrap())
            .unwrap();
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(messages.iter().all(|m| m["id"].is_string()));
    assert_eq!(
        messages.len() as u64 - 1,
        calls.last().unwrap()["request_messages"].as_u64().unwrap()
    );
    // No database without session memory.
    assert!(!dir.path().join("keel.db").exists());
}

#[test]
fn the_table_shows_totals_and_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let config = root()
        .join("examples/summarization.yaml")
        .display()
        .to_string();
    let out = keel(dir.path(), &[&session(), "--config", &config]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("last-100 baseline"), "{text}");
    assert!(text.contains("summary at the end:"), "{text}");
    assert!(text.contains("PRJ-123"), "{text}");
}

#[test]
fn session_memory_stores_the_session_in_keel_db_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let out = keel(
        dir.path(),
        &[&session(), "--memory", "session", "--n-messages", "10"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("keel.db").exists());
}

#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"1\"}\n{oops\n",
    )
    .unwrap();
    let orphan = dir.path().join("orphan.jsonl");
    std::fs::write(
        &orphan,
        "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"1\"}\n\
         {\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":\"c7\",\"id\":\"2\"}\n\
         {\"role\":\"assistant\",\"content\":\"ok\",\"id\":\"3\"}\n",
    )
    .unwrap();
    for (file, expected) in [
        ("missing.jsonl", "missing.jsonl"),
        ("bad.jsonl", "bad.jsonl:2:"),
        (
            "orphan.jsonl",
            "orphan.jsonl:2: orphan tool result: no assistant message issued tool call \"c7\"",
        ),
    ] {
        let out = keel(dir.path(), &[file, "--memory", "session"]);
        assert_eq!(out.status.code(), Some(1), "{file}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("keel: error: "), "{err}");
        assert!(err.contains(expected), "{file}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            !dir.path().join("keel.db").exists(),
            "{file} created a database"
        );
    }
}

#[test]
fn two_processes_replay_into_one_session_and_progress_can_be_lines() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("shared.db").display());
    // A second transcript with other ids (ids are unique per session).
    let copy = dir.path().join("copy.jsonl");
    let text = std::fs::read_to_string(session()).unwrap();
    std::fs::write(&copy, text.replace("\"prj123-", "\"copy-prj123-")).unwrap();
    let copy = copy.display().to_string();
    let spawn = |transcript: &str| {
        Command::new(env!("CARGO_BIN_EXE_keel"))
            .current_dir(dir.path())
            .args([
                "replay",
                transcript,
                "--memory",
                "session",
                "--db",
                &db,
                "--session",
                "shared",
                "--progress",
                "lines",
                "--json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(&session()), spawn(&copy));
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("keel: call 1 (line 3): "), "{err}");
        assert_eq!(err.matches("keel: call ").count(), 102, "{err}");
    }
}

/// The text report opens with what was replayed through which stack, then the key to
/// the table's columns; `--json` has neither (its shape is unchanged).
#[test]
fn the_text_report_opens_with_a_title_and_a_legend() {
    let dir = tempfile::tempdir().unwrap();
    let config = root()
        .join("examples/summarization.yaml")
        .display()
        .to_string();
    let out = keel(
        dir.path(),
        &[&session(), "--config", &config, "--progress", "none"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let title = lines.next().unwrap();
    assert!(title.starts_with("keel replay "), "{title}");
    assert!(
        title.contains("support-prj123.jsonl: 102 model calls through summarization from "),
        "{title}"
    );
    assert!(
        title.contains("examples/summarization.yaml (extractive summaries)"),
        "{title}"
    );
    assert!(title.contains("tokens counted with approximate"), "{title}");
    let legend = lines.next().unwrap();
    assert!(legend.starts_with("columns: call = model call"), "{legend}");
    for column in ["hist.tok", "sent.tok", "summary", "events"] {
        assert!(
            legend.contains(column),
            "{column} is not explained: {legend}"
        );
    }
    assert_eq!(lines.next(), Some(""));
    assert!(lines.next().unwrap().trim_start().starts_with("call  line"));

    let json = keel(dir.path(), &[&session(), "--config", &config, "--json"]);
    assert!(
        json.stdout.starts_with(b"{"),
        "--json output is one JSON object, no title"
    );
}
