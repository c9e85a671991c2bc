//! `keel run`: one turn of a YAML stack on a thread with a scripted model.

use std::io::Write;
use std::process::Command;

use serde_json::Value;

#[cfg(test)]
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

fn example(name: &str) -> String {
    format!("{}/../../examples/stack/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_example_stack_runs_and_prints_messages_requests_and_events() {
    let (code, out, err) = keel(&[
        "run",
        "--config",
        &example("support.yaml"),
        "--transcript",
        &example("thread.jsonl"),
        "--script",
        &example("answers.jsonl"),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let at = |key: &str| out.find(&format!("\n  \"{key}\": [")).unwrap();
    assert!(at("messages") < at("requests") && at("requests") < at("events"));
    let messages = doc["messages"].as_array().unwrap();
    let requests = doc["requests"].as_array().unwrap();
    let events = doc["events"].as_array().unwrap();
    // PII: the user's email is redacted and the card masked in state and in every request.
    assert_eq!(
        messages[4]["content"],
        "Yes. Reach me at [REDACTED_EMAIL], card **** **** **** 1111 for the paid plan."
    );
    assert!(!out.contains("ada@example.com"));
    // Four model calls: the failed one (retried), write_todos, three echoes, the answer.
    assert_eq!(requests.len(), 4);
    assert_eq!(
        requests[0]["messages"][0]["role"], "system",
        "the system message is sent first"
    );
    assert!(
        requests[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "write_todos")
    );
    // Tool-use clearing: the older echo result is a placeholder in the last request only.
    assert_eq!(requests[3]["messages"][3]["content"], "[cleared]");
    assert_ne!(messages[2]["content"], "[cleared]");
    // The tool call limit blocked the third echo of the run.
    assert!(
        messages
            .iter()
            .any(|m| m["content"] == "Tool call limit exceeded. Do not call 'echo' again.")
    );
    assert_eq!(
        messages.last().unwrap()["content"],
        "Ticket opened for i-123; I will email you at the address on file."
    );
    let counters: Vec<&str> = events
        .iter()
        .filter_map(|e| e["payload"]["counter"].as_str())
        .collect();
    for c in [
        "redactions",
        "retries",
        "todos",
        "model_calls",
        "cleared_tool_results",
        "blocked_tool_calls",
    ] {
        assert!(counters.contains(&c), "{c} missing from {counters:?}");
    }
}

#[test]
fn bad_inputs_are_named() {
    let mut stack = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        stack,
        "middleware:\n  - pii: {{pii_type: email, strategy: redakt}}"
    )
    .unwrap();
    let (code, _, err) = keel(&[
        "run",
        "--config",
        stack.path().to_str().unwrap(),
        "--transcript",
        &example("thread.jsonl"),
        "--script",
        &example("answers.jsonl"),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("middleware[0].pii.strategy = \"redakt\" (line 2)"),
        "{err}"
    );

    let mut script = tempfile::NamedTempFile::new().unwrap();
    writeln!(script, r#"{{"role":"user","content":"not an answer"}}"#).unwrap();
    let (code, _, err) = keel(&[
        "run",
        "--config",
        &example("support.yaml"),
        "--transcript",
        &example("thread.jsonl"),
        "--script",
        script.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains(":1: a script line is an assistant message"),
        "{err}"
    );

    // A script that runs out is a clear error, not a hang.
    let empty = tempfile::NamedTempFile::new().unwrap();
    let (code, _, err) = keel(&[
        "run",
        "--config",
        &example("support.yaml"),
        "--transcript",
        &example("thread.jsonl"),
        "--script",
        empty.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("no answer left for model call #1"), "{err}");
}
