//! The `keel` binary end to end: help, exit codes, clean error messages.

use std::io::Write;
use std::process::Command;

// cfg(test) marks the helper as test code, where the lints allow unwrap.
#[cfg(test)]
fn keel(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn help_lists_every_command_and_each_command_has_help() {
    let (code, out, _) = keel(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("check-transcript"));
    let (code, out, _) = keel(&["check-transcript", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("FILE"));
}

#[test]
fn a_valid_transcript_passes_and_an_invalid_one_fails_with_line_numbers() {
    let mut good = tempfile::NamedTempFile::new().unwrap();
    writeln!(good, r#"{{"role":"user","content":"hi","id":"u1"}}"#).unwrap();
    writeln!(
        good,
        r#"{{"role":"assistant","content":"hello","id":"a1"}}"#
    )
    .unwrap();
    let path = good.path().to_str().unwrap();
    let (code, out, _) = keel(&["check-transcript", path]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("2 messages (0 system, 1 user, 1 assistant, 0 tool): ok\n"));

    let mut bad = tempfile::NamedTempFile::new().unwrap();
    writeln!(bad, r#"{{"role":"user","content":"hi","id":"u1"}}"#).unwrap();
    writeln!(
        bad,
        r#"{{"role":"tool","content":"x","tool_call_id":"c9","id":"t1"}}"#
    )
    .unwrap();
    let path = bad.path().to_str().unwrap();
    let (code, out, _) = keel(&["check-transcript", path]);
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!("{path}:2: error: orphan tool result")),
        "{out}"
    );
}

#[test]
fn a_missing_file_is_a_one_line_error_without_backtrace() {
    let (code, out, err) = keel(&["check-transcript", "/nonexistent/x.jsonl"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        err.starts_with("keel: error: cannot read transcript /nonexistent/x.jsonl"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn usage_errors_exit_with_2() {
    let (code, _, err) = keel(&["no-such-command"]);
    assert_eq!(code, 2);
    assert!(err.contains("unrecognized subcommand"));
}
