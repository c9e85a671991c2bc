//! A property-driven fuzz target for the transcript reader: arbitrary bytes,
//! and near-valid transcripts with one thing broken, go through the line reader, the
//! message parser and the shared check. Nothing may panic, every line number is a real
//! line, and no message leaks the parser's type names. Runs a fixed number of cases in
//! the normal test suite (`PROPTEST_CASES` raises it for a longer session).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::ops::ControlFlow;

use keel_replay::check::Checker;
use keel_replay::input::{Limits, LineError, LineReader, parse_message};
use proptest::prelude::*;

const LEAKS: &[&str] = &[
    "untagged",
    "internally tagged",
    "enum ",
    "MessageBody",
    "Content",
];

/// Runs the reader and the check over `bytes`; returns every message it produced.
fn read_all(bytes: &[u8], max_line_bytes: usize) -> Vec<String> {
    let lines = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
    let mut reader = LineReader::new(bytes, Limits { max_line_bytes });
    let mut checker = Checker::new();
    let mut said = Vec::new();
    while let Some(next) = reader.next_line() {
        match next {
            Ok((line, text)) => {
                assert!(line >= 1 && line <= lines, "line {line} of {lines}");
                assert!(text.len() <= max_line_bytes);
                if text.trim().is_empty() {
                    continue;
                }
                match parse_message(text) {
                    Ok(m) => checker.message(line, &m),
                    Err(p) => {
                        said.push(p.to_string());
                        checker.bad_line(line, p);
                    }
                }
            }
            Err((line, LineError::Problem(p))) => {
                assert!(line >= 1 && line <= lines, "line {line} of {lines}");
                said.push(p.to_string());
                checker.bad_line(line, p);
            }
            Err((_, LineError::Io(e))) => panic!("reading a slice cannot fail: {e}"),
        }
    }
    let report = checker.finish();
    for f in &report.findings {
        assert!(f.line <= lines);
        said.push(f.problem.to_string());
    }
    for s in &said {
        assert!(!s.is_empty());
        for leak in LEAKS {
            assert!(!s.contains(leak), "{s:?} leaks {leak:?}");
        }
    }
    said
}

/// One JSON line, valid or almost.
fn line() -> impl Strategy<Value = String> {
    let id = "[a-z0-9]{0,4}";
    prop_oneof![
        (id, ".{0,20}").prop_map(|(i, c)| {
            serde_json::json!({"role": "user", "content": c, "id": i}).to_string()
        }),
        (id, "[a-z]{1,3}").prop_map(|(i, c)| {
            serde_json::json!({"role": "assistant", "content": null, "id": i,
                "tool_calls": [{"id": c, "type": "function",
                    "function": {"name": "ls", "arguments": "{}"}}]})
            .to_string()
        }),
        (id, "[a-z]{1,3}").prop_map(|(i, c)| {
            serde_json::json!({"role": "tool", "content": "ok", "tool_call_id": c, "id": i})
                .to_string()
        }),
        (".{0,10}", any::<i64>(), any::<bool>()).prop_map(|(r, n, b)| {
            serde_json::json!({"role": r, "content": n, "id": b}).to_string()
        }),
        "[\\[\\]{}\":,a-z0-9 ]{0,40}",
        proptest::collection::vec(any::<u8>(), 0..30)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..2000),
        cap in 1usize..300,
    ) {
        read_all(&bytes, cap);
    }

    #[test]
    fn near_valid_transcripts_never_panic(
        lines in proptest::collection::vec(line(), 0..30),
        bom in any::<bool>(),
        crlf in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let sep = if crlf { "\r\n" } else { "\n" };
        let mut text = lines.join(sep);
        if bom {
            text.insert(0, '\u{feff}');
        }
        let mut bytes = text.into_bytes();
        // Sometimes cut a byte sequence in half: a truncated file.
        if !bytes.is_empty() && cut.index(4) == 0 {
            let at = cut.index(bytes.len());
            bytes.truncate(at);
        }
        read_all(&bytes, 1 << 20);
    }
}

/// The file-level readers agree with the line reader on a few fixed cases.
#[test]
fn scan_and_read_messages_agree() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(
        &path,
        "{\"role\":\"user\",\"content\":\"hi\",\"id\":\"1\"}\n\n{oops\n{\"role\":\"robot\"}\n",
    )
    .unwrap();
    let mut seen = Vec::new();
    let count = keel_replay::input::scan(&path, Limits::default(), |line, m| {
        seen.push((line, m.is_ok()));
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(count, 3);
    assert_eq!(seen, [(1, true), (3, false), (4, false)]);
    let err = keel_replay::input::read_messages(&path, Limits::default()).unwrap_err();
    assert!(
        err.to_string().contains("t.jsonl:3: not a valid message"),
        "{err}"
    );
}
