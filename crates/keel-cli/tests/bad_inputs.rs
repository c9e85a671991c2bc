//! Every subcommand on a corpus of bad inputs: transcripts, configurations,
//! database URLs and flags a new user might try. For each input and each subcommand that
//! takes it: the exit code, no panic, the exact message, and the same verdict and words
//! from every subcommand. Each run is under a memory limit (`ulimit -v`) and a generous
//! timeout, so a regression to reading a whole file or looping forever fails here
//! instead of hanging CI; no timing is asserted.
//!
//! The corpus is `tests/fixtures/bad-inputs/`; `expected.tsv` holds one line per case:
//! `kind <TAB> name <TAB> verdict <TAB> message`. After a deliberate change of wording,
//! `KEEL_BLESS=1 cargo test -p keel-cli --test bad_inputs` rewrites it from the actual
//! output; review the diff before committing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Far more than any case needs; only a hang reaches it.
const TIMEOUT: Duration = Duration::from_secs(120);
/// Virtual memory per run, in KiB (2 GiB): reading a 16 GB stream whole cannot fit.
const MEMORY_KIB: u64 = 2 * 1024 * 1024;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad-inputs")
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `keel args...` in the fixtures folder, bounded in memory and time.
fn keel(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {MEMORY_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .current_dir(fixtures())
        .env_remove("KEEL_MAX_LINE_BYTES")
        .env_remove("KEEL_MAX_CONFIG_BYTES")
        .env_remove("KEEL_MAX_TEXT_BYTES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    // Output is small in every case; read it after the exit.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("keel {args:?} did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_ne!(run.code, 101, "keel {args:?} panicked: {}", run.stderr);
    assert_ne!(run.code, -1, "keel {args:?} was killed: {}", run.stderr);
    for text in [&run.stdout, &run.stderr] {
        assert!(
            !text.contains("internal error") && !text.contains("panicked"),
            "keel {args:?}: {text}"
        );
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}'),
            "keel {args:?} printed a terminal control: {text:?}"
        );
    }
    run
}

#[derive(Clone, Debug)]
struct Case {
    kind: String,
    name: String,
    verdict: String,
    message: String,
}

fn manifest() -> Vec<Case> {
    std::fs::read_to_string(fixtures().join("expected.tsv"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut f = l.splitn(4, '\t');
            let mut next = || f.next().unwrap_or_default().to_owned();
            Case {
                kind: next(),
                name: next(),
                verdict: next(),
                message: next(),
            }
        })
        .collect()
}

/// `PATH:LINE: text` as check-transcript prints it: `PATH:LINE: error: text`.
fn as_finding(path: &str, message: &str, severity: &str) -> String {
    let rest = message.strip_prefix(path).unwrap_or(message);
    let text = match rest.split_once(": ") {
        Some((line, text)) => format!("{path}{line}: {severity}: {text}"),
        None => rest.to_owned(),
    };
    match text.find(" more error(s); `keel check-transcript` lists them all)") {
        Some(at) => text[..text[..at].rfind(" (").unwrap_or(at)].to_owned(),
        None => text,
    }
}

fn one_error(run: &Run, what: &str) -> String {
    assert_eq!(run.code, 1, "{what}: {}{}", run.stdout, run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{what}: {}", run.stderr);
    run.stderr
        .trim_end()
        .strip_prefix("keel: error: ")
        .unwrap_or_else(|| panic!("{what}: {}", run.stderr))
        .to_owned()
}

fn substitute(text: &str, dir: &Path, port: u16) -> String {
    text.replace("{dir}", &dir.display().to_string())
        .replace("{port}", &port.to_string())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs one case; returns the message observed (for blessing).
fn run_case(case: &Case, dir: &Path, port: u16, bless: bool) -> (String, String) {
    match case.kind.as_str() {
        "transcript" => {
            let path = format!("transcripts/{}.jsonl", case.name);
            let check = keel(&["check-transcript", &path], &[]);
            let tokens = keel(&["tokens", &path, "--counter", "approximate"], &[]);
            let compact = keel(&["compact", &path, "--config", "configs/valid.yaml"], &[]);
            let replay = keel(&["replay", &path], &[]);
            if replay.code == 1 {
                let message = one_error(&replay, &path);
                if !bless {
                    for (run, cmd) in [(&tokens, "tokens"), (&compact, "compact")] {
                        assert_eq!(one_error(run, cmd), message, "{cmd} {path}");
                    }
                    assert_eq!(check.code, 1, "check-transcript {path}: {}", check.stdout);
                    // The same finding, word for word (check-transcript may list an
                    // interrupted call before it, which the others patch).
                    let finding = as_finding(&path, &message, "error");
                    assert!(
                        check.stdout.lines().any(|l| l == finding),
                        "check-transcript {path}: {}",
                        check.stdout
                    );
                }
                ("error".to_owned(), message)
            } else {
                assert_eq!(replay.code, 0, "replay {path}: {}", replay.stderr);
                let warning = replay
                    .stderr
                    .lines()
                    .find_map(|l| l.strip_prefix("keel: warning: "))
                    .unwrap_or_default()
                    .to_owned();
                if !bless {
                    for (run, cmd) in [(&tokens, "tokens"), (&compact, "compact")] {
                        assert_eq!(run.code, 0, "{cmd} {path}: {}{}", run.stdout, run.stderr);
                    }
                    // An interrupted call is patched (with a warning) by the commands
                    // that run middleware; check-transcript keeps reporting it as the
                    // error a provider would answer.
                    if warning.contains("answered with a synthetic result") {
                        assert_eq!(check.code, 1, "check {path}: {}", check.stdout);
                        assert!(
                            check
                                .stdout
                                .contains("has no result before the next message"),
                            "{}",
                            check.stdout
                        );
                    } else {
                        assert_eq!(
                            check.code, 0,
                            "check {path}: {}{}",
                            check.stdout, check.stderr
                        );
                    }
                    if !warning.is_empty() {
                        for (run, cmd) in [(&tokens, "tokens"), (&compact, "compact")] {
                            assert!(
                                run.stderr.contains(&format!("keel: warning: {warning}")),
                                "{cmd} {path}: {}",
                                run.stderr
                            );
                        }
                        if !warning.contains("answered with a synthetic result") {
                            let finding = as_finding(&path, &warning, "warning");
                            assert!(check.stdout.contains(&finding), "{}", check.stdout);
                        }
                    }
                }
                let verdict = if warning.is_empty() { "ok" } else { "warning" };
                (verdict.to_owned(), warning)
            }
        }
        "config" => {
            let path = format!("configs/{}.yaml", case.name);
            let compact = keel(&["compact", "valid.jsonl", "--config", &path], &[]);
            let replay = keel(&["replay", "valid.jsonl", "--config", &path], &[]);
            if replay.code == 1 {
                let message = one_error(&replay, &path);
                if !bless {
                    assert_eq!(one_error(&compact, &path), message, "compact {path}");
                }
                ("error".to_owned(), message)
            } else {
                assert_eq!(replay.code, 0, "{path}: {}", replay.stderr);
                assert_eq!(compact.code, 0, "{path}: {}", compact.stderr);
                let warning = replay
                    .stderr
                    .lines()
                    .find_map(|l| l.strip_prefix("keel: warning: "))
                    .unwrap_or_default()
                    .to_owned();
                if !bless {
                    assert!(compact.stderr.contains(&warning), "{}", compact.stderr);
                }
                let verdict = if warning.is_empty() { "ok" } else { "warning" };
                (verdict.to_owned(), warning)
            }
        }
        "db" => {
            let url = substitute(&case.name, dir, port);
            let replay = keel(
                &["replay", "valid.jsonl", "--memory", "session", "--db", &url],
                &[],
            );
            let message = one_error(&replay, &url);
            let message = message
                .replace(&dir.display().to_string(), "{dir}")
                .replace(&port.to_string(), "{port}");
            ("error".to_owned(), message)
        }
        "flag" => {
            let args: Vec<&str> = case.name.split(' ').collect();
            let run = keel(&args, &[]);
            let first = run.stderr.lines().next().unwrap_or_default().to_owned();
            (run.code.to_string(), first)
        }
        other => panic!("unknown kind {other}"),
    }
}

#[test]
fn every_subcommand_on_every_bad_input() {
    let bless = std::env::var_os("KEEL_BLESS").is_some();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a-folder")).unwrap();
    let port = free_port();
    let cases = manifest();
    assert!(cases.len() >= 60, "the corpus has {} cases", cases.len());
    let mut blessed = vec!["# kind\tname\tverdict\tmessage (see tests/bad_inputs.rs)".to_owned()];
    let mut failures = Vec::new();
    for case in &cases {
        let (verdict, message) = run_case(case, dir.path(), port, bless);
        blessed.push(format!(
            "{}\t{}\t{verdict}\t{message}",
            case.kind, case.name
        ));
        if !bless && (verdict != case.verdict || message != case.message) {
            failures.push(format!(
                "{} {}:\n  expected {} {:?}\n  got      {verdict} {message:?}",
                case.kind, case.name, case.verdict, case.message
            ));
        }
    }
    if bless {
        std::fs::write(fixtures().join("expected.tsv"), blessed.join("\n") + "\n").unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Inputs that are not files in the corpus: endless streams, folders, missing files,
/// and the caps with their flags and environment variables.
#[test]
fn streams_folders_and_caps() {
    for args in [
        vec!["check-transcript", "/dev/zero"],
        vec!["tokens", "/dev/zero"],
        vec!["compact", "/dev/zero", "--config", "configs/valid.yaml"],
        vec!["replay", "/dev/zero"],
    ] {
        let run = keel(&args, &[("KEEL_MAX_LINE_BYTES", "1048576")]);
        assert_eq!(run.code, 1, "{args:?}");
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(
            said.contains(
                "/dev/zero:1: error: the line is longer than 1048576 bytes, the cap on one \
                 message; if the file really holds messages this long, raise the cap (keel: \
                 --max-line-bytes BYTES or KEEL_MAX_LINE_BYTES)"
            ) || said.contains(
                "keel: error: /dev/zero:1: the line is longer than 1048576 bytes, the cap on \
                 one message"
            ),
            "{args:?}: {said}"
        );
    }
    let run = keel(
        &["tokens", "--text", "/dev/zero", "--max-text-bytes", "4096"],
        &[],
    );
    assert_eq!(
        run.stderr,
        "keel: error: /dev/zero is larger than 4096 bytes, the cap on a text file; raise it \
         with --max-text-bytes BYTES or KEEL_MAX_TEXT_BYTES\n"
    );
    let run = keel(&["compact", "valid.jsonl", "--config", "/dev/zero"], &[]);
    assert_eq!(
        run.stderr,
        "keel: error: /dev/zero is larger than 1048576 bytes, the cap on a configuration \
         file; is it the right file? If so, raise the cap (keel: --max-config-bytes BYTES or \
         KEEL_MAX_CONFIG_BYTES)\n"
    );
    // The default cap holds a normal line; a small one names the flag.
    let run = keel(
        &["check-transcript", "valid.jsonl", "--max-line-bytes", "10"],
        &[],
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .starts_with("valid.jsonl:1: error: the line is longer than 10 bytes")
    );
    for cmd in ["check-transcript", "tokens", "replay"] {
        let run = keel(&[cmd, "transcripts"], &[]);
        assert_eq!(
            run.stderr,
            "keel: error: cannot read transcript transcripts: it is a directory; name a .jsonl \
             file\n",
            "{cmd}"
        );
        let run = keel(&[cmd, "missing.jsonl"], &[]);
        assert_eq!(
            run.stderr, "keel: error: cannot read transcript missing.jsonl: no such file\n",
            "{cmd}"
        );
    }
}

/// Printed ids and text are escaped: a transcript cannot clear or restyle the terminal.
#[test]
fn terminal_controls_in_a_transcript_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(
        &path,
        "{\"role\":\"user\",\"content\":\"clear \\u001b[2J now \\u009b31m \\u202eevil\",\"id\":\"u\\u001b]0;title\\u0007\"}\n\
         {\"role\":\"assistant\",\"content\":\"line one\\nline two\",\"id\":\"a\\u202e1\"}\n",
    )
    .unwrap();
    let path = path.display().to_string();
    let config = fixtures().join("configs/valid.yaml").display().to_string();
    for args in [
        vec!["tokens", path.as_str(), "--counter", "approximate"],
        vec![
            "tokens",
            path.as_str(),
            "--counter",
            "approximate",
            "--json",
        ],
        vec!["compact", path.as_str(), "--config", config.as_str()],
        vec![
            "compact",
            path.as_str(),
            "--config",
            config.as_str(),
            "--json",
        ],
        vec!["replay", path.as_str()],
        vec!["replay", path.as_str(), "--json"],
        vec!["check-transcript", path.as_str()],
    ] {
        let run = keel(&args, &[]);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert!(
            !run.stdout.contains('\u{9b}') && !run.stdout.contains('\u{7}'),
            "{args:?}"
        );
    }
    let run = keel(&["tokens", &path, "--counter", "approximate"], &[]);
    assert!(
        run.stdout.contains("u\\u{1b}]0;title\\u{7}\tuser"),
        "{}",
        run.stdout
    );
}

#[test]
fn dump_folders_are_not_silently_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps").display().to_string();
    let first = keel(&["replay", "valid.jsonl", "--dump-requests", &dumps], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let again = keel(&["replay", "valid.jsonl", "--dump-requests", &dumps], &[]);
    assert_eq!(
        again.stderr,
        format!(
            "keel: error: --dump-requests: {dumps} already holds 1 request dump(s) (0001.json, \
             ...) from an earlier replay; choose an empty folder, or pass --force to overwrite \
             them\n"
        )
    );
    let forced = keel(
        &[
            "replay",
            "valid.jsonl",
            "--dump-requests",
            &dumps,
            "--force",
        ],
        &[],
    );
    assert_eq!(forced.code, 0, "{}", forced.stderr);
}
