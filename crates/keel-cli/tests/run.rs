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

/// Without `--script`, the stack's `model: {provider: anthropic, ...}` answers: a tool
/// call, its result, then the answer, through the Messages API (an in-process endpoint
/// answering in Anthropic's documented shapes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_script_the_stack_s_provider_answers() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    let answer = |content: Value, stop: &str| {
        ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": 40, "cache_read_input_tokens": 1100,
                      "cache_creation_input_tokens": 0, "output_tokens": 9}
        }))
    };
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(answer(
            serde_json::json!([{"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"q": "status"}}]),
            "tool_use",
        ))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(answer(
            serde_json::json!([{"type": "text", "text": "All green."}]),
            "end_turn",
        ))
        .with_priority(2)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let stack = dir.path().join("stack.yaml");
    std::fs::write(
        &stack,
        format!(
            "model: {{provider: anthropic, model: claude-haiku-4-5, base_url: '{}'}}\nsystem_prompt: You check status.\n",
            server.uri()
        ),
    )
    .unwrap();
    let thread = dir.path().join("thread.jsonl");
    std::fs::write(&thread, "{\"role\": \"user\", \"content\": \"Status?\"}\n").unwrap();
    let (stack, thread) = (stack.display().to_string(), thread.display().to_string());
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        keel(&["run", "--config", &stack, "--transcript", &thread, "--json"])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let messages = doc["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["content"], "All green.");
    assert_eq!(
        messages.last().unwrap()["usage"]["cached_input_tokens"],
        1100
    );
    assert_eq!(messages.len(), 4, "{out}");
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(doc["requests"].as_array().unwrap().len(), 2);
    let sent = server.received_requests().await.unwrap();
    let second: Value = serde_json::from_slice(&sent[1].body).unwrap();
    assert_eq!(
        sent[0]
            .headers
            .get("anthropic-version")
            .map(|v| v.to_str().unwrap()),
        Some("2023-06-01"),
        "{:?}",
        sent[0].headers
    );
    assert_eq!(second["messages"][2]["content"][0]["type"], "tool_result");

    // A stack naming its model by name alone cannot answer without a script.
    let plain = dir.path().join("plain.yaml");
    std::fs::write(&plain, "model: claude-haiku-4-5\n").unwrap();
    let (plain, thread) = (
        plain.display().to_string(),
        dir.path().join("thread.jsonl").display().to_string(),
    );
    let (code, _, err) = tokio::task::spawn_blocking(move || {
        keel(&["run", "--config", &plain, "--transcript", &thread])
    })
    .await
    .unwrap();
    assert_ne!(code, 0);
    assert!(err.contains("provider"), "{err}");
}
