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

/// A small invented conversation in LoCoMo's shape (names, dates and texts made up for
/// the test): two sessions, session 10 after session 2, two probes (one answer a number).
fn locomo_file(dir: &Path, name: &str) -> PathBuf {
    let value = json!({
        "speaker_a": "Orla",
        "speaker_b": "Teodor",
        "session_10_date_time": "week 9",
        "session_10": [
            {"speaker": "Orla", "dia_id": "D10:1", "text": "The ferry to Skerrin leaves at dawn now."},
            {"speaker": "Teodor", "dia_id": "D10:2", "text": "Then I will book the early cabin."}
        ],
        "session_2_date_time": "week 1",
        "session_2": [
            {"speaker": "Teodor", "dia_id": "D2:1", "text": "My boat is called the Gullwing, built in 1979."},
            {"speaker": "Orla", "dia_id": "D2:2", "text": "Lovely name!"},
            {"speaker": "Teodor", "dia_id": "D2:3", "text": "Thanks."}
        ],
        "qa": [
            {"question": "When was Teodor's boat built?", "answer": 1979, "evidence": ["D2:1"], "category": 2},
            {"question": "What is Teodor's boat called?", "answer": "the Gullwing", "evidence": ["D2:1; D10:1"], "category": 4},
            {"question": "Where does the ferry go?", "answer": "an island", "evidence": ["D10:1"], "category": 3}
        ]
    });
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    path
}

#[test]
fn locomo_files_are_converted_and_measured_per_file_and_summed() {
    let dir = tempfile::tempdir().unwrap();
    let one = locomo_file(dir.path(), "one.json");
    std::fs::create_dir(dir.path().join("b")).unwrap();
    let two = locomo_file(&dir.path().join("b"), "two.json");
    let (one, two) = (one.to_str().unwrap(), two.to_str().unwrap());
    let report = json_of(&keel(
        dir.path(),
        &["--format", "locomo", one, two, "--json"],
        &[],
    ));
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    let first = &files[0];
    assert_eq!(first["speaker_a"], "Orla");
    assert_eq!(first["transcript_messages"], 5);
    assert_eq!(first["questions"], 3);
    // No stack: the request is the whole history, so both probes are found and the
    // tokens sent are the full history's.
    let f = &first["figures"];
    assert_eq!(f["found"]["probes"], 2);
    assert_eq!(f["found"]["found"], 2);
    assert_eq!(f["sent_tokens"], f["full_history_tokens"]);
    let temporal = &f["categories"][1];
    assert_eq!(temporal["name"], "temporal");
    assert_eq!(temporal["probes"], 1);
    assert_eq!(f["long_answers"]["probes"], 1);
    let probes = first["probes"].as_array().unwrap();
    assert_eq!(probes[0]["answer"], "1979");
    assert_eq!(probes[1]["evidence"], json!(["D2:1", "D10:1"]));
    assert_eq!(report["total"]["found"]["probes"], 4);
    assert_eq!(
        report["total"]["sent_tokens"].as_u64().unwrap(),
        2 * f["sent_tokens"].as_u64().unwrap()
    );

    // The table names both files and their sum; a stack with session memory runs too.
    let out = keel(
        dir.path(),
        &[
            "--format",
            "locomo",
            one,
            two,
            "--config",
            &path("examples/summarization.yaml"),
            "--memory",
            "session",
            "--n-messages",
            "2",
            "--db",
            "sqlite::memory:",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "one.json",
        "two.json",
        "all",
        "single-hop",
        "last 100 found",
    ] {
        assert!(table.contains(expected), "{expected}: {table}");
    }
}

#[test]
fn locomo_files_can_be_written_out_for_the_jsonl_form() {
    let dir = tempfile::tempdir().unwrap();
    let file = locomo_file(dir.path(), "chat.json");
    let file = file.to_str().unwrap();
    let out_dir = dir.path().join("converted");
    let out_dir_s = out_dir.to_str().unwrap();
    let direct = json_of(&keel(
        dir.path(),
        &[
            "--format",
            "locomo",
            file,
            "--write-transcript",
            out_dir_s,
            "--json",
        ],
        &[],
    ));
    let transcript = out_dir.join("chat.jsonl");
    let probes = out_dir.join("chat.probes.jsonl");
    let lines = std::fs::read_to_string(&transcript).unwrap();
    let first: Value = serde_json::from_str(lines.lines().nth(1).unwrap()).unwrap();
    assert_eq!(first["role"], "assistant");
    assert_eq!(first["id"], "D2:1");
    assert_eq!(first["name"], "Teodor");
    assert_eq!(first["metadata"]["timestamp"], "week 1");
    assert_eq!(
        first["content"],
        "[week 1] Teodor: My boat is called the Gullwing, built in 1979."
    );
    // The written files give the same figures through the jsonl form.
    let jsonl = json_of(&keel(
        dir.path(),
        &[
            transcript.to_str().unwrap(),
            "--probes",
            probes.to_str().unwrap(),
            "--json",
        ],
        &[],
    ));
    let f = &direct["files"][0]["figures"];
    assert_eq!(jsonl["totals"]["found"], f["found"]["found"]);
    assert_eq!(jsonl["totals"]["sent_tokens"], f["sent_tokens"]);
    assert_eq!(
        jsonl["totals"]["full_history_tokens"],
        f["full_history_tokens"]
    );
    // Written files are not replaced without --force.
    let again = keel(
        dir.path(),
        &["--format", "locomo", file, "--write-transcript", out_dir_s],
        &[],
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let forced = keel(
        dir.path(),
        &[
            "--format",
            "locomo",
            file,
            "--write-transcript",
            out_dir_s,
            "--force",
        ],
        &[],
    );
    assert!(forced.status.success());
}

#[test]
fn bad_locomo_input_names_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = locomo_file(dir.path(), "good.json");
    let good = good.to_str().unwrap();
    let bad = dir.path().join("bad.json");
    let session = path("examples/sessions/support-prj123.jsonl");
    let probes = path("examples/sessions/support-prj123.probes.jsonl");
    let mut no_speaker: Value =
        serde_json::from_str(&std::fs::read_to_string(good).unwrap()).unwrap();
    no_speaker.as_object_mut().unwrap().remove("speaker_b");
    let mut no_probe = no_speaker.clone();
    no_probe["speaker_b"] = "Teodor".into();
    no_probe["qa"] =
        json!([{"question": "q?", "answer": "nowhere", "evidence": ["D2:1"], "category": 4}]);
    for (content, expect) in [
        (no_speaker.to_string(), "bad.json: `speaker_b` is missing"),
        (no_probe.to_string(), "bad.json: no probe"),
        ("[]".to_owned(), "bad.json: not a LoCoMo conversation"),
        ("{oops".to_owned(), "bad.json: not JSON"),
    ] {
        std::fs::write(&bad, content).unwrap();
        // The bad file fails before the good one runs, whatever the order.
        let out = keel(
            dir.path(),
            &["--format", "locomo", good, bad.to_str().unwrap()],
            &[],
        );
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{expect}: {err}");
        assert!(out.stdout.is_empty());
    }
    // A transcript file is not a LoCoMo file.
    let out = keel(dir.path(), &["--format", "locomo", &session], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("support-prj123.jsonl: not JSON"));
    // Flags that belong to the other format.
    for (args, expect) in [
        (
            vec!["--format", "locomo", good, "--probes", probes.as_str()],
            "--probes is not taken with --format locomo",
        ),
        (vec![session.as_str()], "--probes FILE is needed"),
        (
            vec![
                session.as_str(),
                session.as_str(),
                "--probes",
                probes.as_str(),
            ],
            "2 transcripts given",
        ),
        (
            vec![
                session.as_str(),
                "--probes",
                probes.as_str(),
                "--write-transcript",
                "x",
            ],
            "needs --format locomo",
        ),
    ] {
        let out = keel(dir.path(), &args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{expect}: {err}");
    }
}
