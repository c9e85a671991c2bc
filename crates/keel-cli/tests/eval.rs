//! `keel eval` end to end: the binary on the bundled session and on generated sessions of
//! other styles, questions that never see each other, the `--model` path against an
//! OpenAI-compatible server, and bad probe files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn path(rel: &str) -> String {
    root().join(rel).display().to_string()
}

fn keel(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_keel"));
    cmd.current_dir(dir).arg("eval").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "keel eval failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn bundled_session_keeps_every_probe_and_costs_less_than_the_last_100() {
    let dir = tempfile::tempdir().unwrap();
    let session = path("examples/sessions/support-prj123.jsonl");
    let probes = path("examples/sessions/support-prj123.probes.jsonl");
    let config = path("examples/summarization.yaml");
    for extra in [
        vec!["--config", config.as_str()],
        vec!["--memory", "session", "--db", "sqlite::memory:"],
    ] {
        let mut args = vec![session.as_str(), "--probes", probes.as_str(), "--json"];
        args.extend(&extra);
        let report = json_of(&keel(dir.path(), &args, &[]));
        let totals = &report["totals"];
        assert_eq!(totals["probes"], 11, "{extra:?}");
        assert_eq!(totals["found"], 11, "{extra:?}: {report:#}");
        assert_eq!(totals["stale_as_current"], 0);
        let ratio = totals["sent_vs_last100"].as_f64().unwrap();
        // Each question carries its recalled excerpts (up to 1,200 tokens) besides the
        // compacted history: a little over half of the last-100 window here.
        assert!(ratio > 0.0 && ratio < 0.6, "{extra:?}: {ratio}");
        // Each question is the last message of its own request.
        for p in report["probes"].as_array().unwrap() {
            assert!(p["request_tokens"].as_u64().unwrap() < p["baseline_tokens"].as_u64().unwrap());
        }
    }
    // Without a stack the request is the whole history: everything is found, and it
    // costs more than the last 100 messages.
    let report = json_of(&keel(
        dir.path(),
        &[session.as_str(), "--probes", probes.as_str(), "--json"],
        &[],
    ));
    assert_eq!(report["totals"]["found"], 11);
    assert!(report["totals"]["sent_vs_last100"].as_f64().unwrap() > 1.0);
}

/// A corrected value presented as current is caught; one marked `(was ...)` or followed
/// by its correction is not. The transcript is written so that a plain window of the
/// last messages still holds only the old value.
#[test]
fn stale_values_are_reported_when_the_request_shows_only_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = vec![
        json!({"role": "system", "content": "You are a deployment assistant.", "id": "s"}),
        json!({"role": "user", "content": "Deploy to region eu-west-1.", "id": "u1"}),
        json!({"role": "assistant", "content": "Noted: eu-west-1.", "id": "a1"}),
        json!({"role": "user", "content": "Change of plan: eu-central-1 instead.", "id": "u2"}),
        json!({"role": "assistant", "content": "Switched to eu-central-1 (was eu-west-1).", "id": "a2"}),
        json!({"role": "user", "content": "Remind me: we said eu-west-1 first, right?", "id": "u3"}),
        json!({"role": "assistant", "content": "Yes, first eu-west-1.", "id": "a3"}),
    ];
    let transcript = dir.path().join("t.jsonl");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&transcript, text).unwrap();
    let probes = dir.path().join("p.jsonl");
    std::fs::write(
        &probes,
        r#"{"question": "Which region?", "needles": ["eu-central-1"], "stale": ["eu-west-1"]}"#,
    )
    .unwrap();
    let run = |transcript: &Path| {
        json_of(&keel(
            dir.path(),
            &[
                transcript.to_str().unwrap(),
                "--probes",
                probes.to_str().unwrap(),
                "--json",
            ],
            &[],
        ))
    };
    // The whole history: the last word on the region is the old value.
    let report = run(&transcript);
    assert_eq!(report["totals"]["stale_as_current"], 1, "{report:#}");
    assert_eq!(
        report["probes"][0]["stale_as_current"],
        json!(["eu-west-1"])
    );
    // Without the last exchange, the correction is the last word: not stale.
    lines.truncate(5);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&transcript, text).unwrap();
    let report = run(&transcript);
    assert_eq!(report["totals"]["stale_as_current"], 0, "{report:#}");
    assert_eq!(report["totals"]["with_stale"], 1);
}

#[tokio::test]
async fn model_answers_are_checked_for_the_needles() {
    use wiremock::matchers::{method, path as at};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(at("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": "small",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "We are on PRJ-123."}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        })))
        .expect(2)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let probes = dir.path().join("p.jsonl");
    std::fs::write(
        &probes,
        concat!(
            r#"{"question": "Which project?", "needles": ["PRJ-123"]}"#,
            "\n\n",
            r#"{"question": "Which cluster?", "needles": ["EU cluster"]}"#,
            "\n"
        ),
    )
    .unwrap();
    let base = format!("{}/v1", server.uri());
    let args = [
        path("examples/sessions/support-prj123.jsonl"),
        "--probes".into(),
        probes.display().to_string(),
        "--config".into(),
        path("examples/summarization.yaml"),
        "--model".into(),
        "small".into(),
        "--json".into(),
    ];
    let dir_path = dir.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        keel(
            &dir_path,
            &args,
            &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk-test")],
        )
    })
    .await
    .unwrap();
    let report = json_of(&out);
    assert_eq!(report["probes"][0]["answer"]["found"], true, "{report:#}");
    assert_eq!(report["probes"][1]["answer"]["found"], false);
    assert_eq!(
        report["probes"][1]["answer"]["missing"],
        json!(["EU cluster"])
    );
    assert_eq!(report["totals"]["answered"], 1);
    assert_eq!(report["totals"]["answer_errors"], 0);
    // Each request ends with its own question, and carries no other question.
    let requests = server.received_requests().await.unwrap();
    for (request, (mine, other)) in requests.iter().zip([
        ("Which project?", "Which cluster?"),
        ("Which cluster?", "Which project?"),
    ]) {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.last().unwrap()["content"], mine);
        assert!(
            !body.to_string().contains(other),
            "{other} leaked into {mine}"
        );
        // Compacted: far fewer messages than the 218 of the transcript.
        assert!(messages.len() < 100, "{}", messages.len());
    }
}

#[test]
fn bad_probe_files_name_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let session = path("examples/sessions/support-prj123.jsonl");
    let probes = dir.path().join("p.jsonl");
    for (text, expect) in [
        (
            "{\"question\": \"q\", \"needles\": [\"a\"]}\n{\"question\": \"q\", \"needles\": []}\n",
            "p.jsonl:2: `needles` is empty",
        ),
        (
            "{\"question\": \"q\", \"needle\": [\"a\"]}\n",
            "p.jsonl:1: not a probe",
        ),
        ("not json\n", "p.jsonl:1: not a probe"),
        ("\n\n", "no probes"),
    ] {
        std::fs::write(&probes, text).unwrap();
        let out = keel(
            dir.path(),
            &[&session, "--probes", probes.to_str().unwrap()],
            &[],
        );
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = keel(
        dir.path(),
        &[&session, "--probes", "/nonexistent.jsonl"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file"));
}
