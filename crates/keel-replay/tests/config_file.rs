//! `keel replay --config FILE` reads the file once and reads both of its sections,
//! `summarization:` and `recall:`, from the one parse: recall errors name their line,
//! the section is a top-level key (wherever and however it is written), and the file's
//! read errors are the summarization loader's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::{Path, PathBuf};

use keel_replay::{ReplayOptions, load_recall, prepare};
use keel_summarization::config::SummarizationConfig;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn session() -> PathBuf {
    root().join("examples/sessions/support-prj123.jsonl")
}

/// The bundled configuration's `summarization:` section alone (the file also holds a
/// `recall:` section, which the tests below write in their own forms).
fn bundled() -> String {
    let text = std::fs::read_to_string(root().join("examples/summarization.yaml")).unwrap();
    let mut out = String::new();
    let mut in_recall = false;
    for line in text.lines() {
        if !line.starts_with([' ', '#']) && !line.is_empty() {
            in_recall = line.starts_with("recall:");
        }
        if !in_recall {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(out.contains("summarization:") && !out.contains("\nrecall:"));
    out
}

/// Writes `text` to `dir/name` and returns the path.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn options(config: &Path) -> ReplayOptions {
    ReplayOptions {
        config: Some(config.to_owned()),
        ..ReplayOptions::default()
    }
}

/// `prepare`'s error, as the user reads it.
async fn refused(options: &ReplayOptions) -> String {
    match prepare(session(), options).await {
        Ok(_) => panic!("expected the replay to refuse to start"),
        Err(e) => e.to_string(),
    }
}

/// The 1-based line of the first line of `text` that is `line`.
fn line_of(text: &str, line: &str) -> usize {
    1 + text.lines().position(|l| l == line).unwrap()
}

#[tokio::test]
async fn recall_errors_name_the_key_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\nrecall:\n  max_excerpts: 2\n  max_tokens: 10\n",
        bundled()
    );
    let path = write(dir.path(), "range.yaml", &text);
    let n = line_of(&text, "  max_tokens: 10");
    assert_eq!(
        refused(&options(&path)).await,
        format!(
            "{}: recall.max_tokens = 10 (line {n}): is out of range; allowed: a whole number \
             in [20, 20000]",
            path.display()
        )
    );

    let text = format!("{}\nrecall:\n  max_token: 100\n", bundled());
    let path = write(dir.path(), "typo.yaml", &text);
    let n = line_of(&text, "  max_token: 100");
    assert_eq!(
        refused(&options(&path)).await,
        format!(
            "{}: unknown key recall.max_token (line {n}) (did you mean `max_tokens`?)",
            path.display()
        )
    );

    let text = format!("{}\nrecall:\n  min_score: high\n", bundled());
    let path = write(dir.path(), "type.yaml", &text);
    let n = line_of(&text, "  min_score: high");
    let err = refused(&options(&path)).await;
    assert!(
        err.starts_with(&format!(
            "{}: recall (line {n}): invalid type",
            path.display()
        )),
        "{err}"
    );
}

#[tokio::test]
async fn the_recall_section_is_the_top_level_key_however_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    // A quoted key, a space before the colon, a flow mapping: all the top-level `recall`.
    for (name, section) in [
        ("quoted.yaml", "\"recall\": {max_tokens: 10}\n"),
        ("spaced.yaml", "recall :\n  max_tokens: 10\n"),
    ] {
        let path = write(dir.path(), name, &format!("{}\n{section}", bundled()));
        let err = refused(&options(&path)).await;
        assert!(
            err.contains("recall.max_tokens = 10 (line "),
            "{name}: {err}"
        );
    }
    let path = write(
        dir.path(),
        "flow.yaml",
        "{summarization: {enabled: false}, recall: {max_tokens: 10}}\n",
    );
    let err = refused(&options(&path)).await;
    assert!(
        err.ends_with("recall.max_tokens = 10 (line 1): is out of range; allowed: a whole number in [20, 20000]"),
        "{err}"
    );
}

#[tokio::test]
async fn recall_text_that_is_not_the_section_turns_nothing_on() {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra) in [
        // Inside a block scalar.
        ("block.yaml", "notes: |\n  recall:\n    max_tokens: 10\n"),
        // Indented under another top-level key.
        ("nested.yaml", "skills:\n  recall:\n    max_tokens: 10\n"),
        // A multi-line quoted string whose second line starts with `recall:`.
        (
            "quoted.yaml",
            "notes: \"first line\nrecall: {max_tokens: 10}\"\n",
        ),
        // An empty section: recall stays off, as before.
        ("empty.yaml", "recall:\n"),
    ] {
        let path = write(dir.path(), name, &format!("{}\n{extra}", bundled()));
        assert_eq!(load_recall(&path, None).unwrap(), None, "{name}");
        assert!(prepare(session(), &options(&path)).await.is_ok(), "{name}");
    }
    let path = write(
        dir.path(),
        "on.yaml",
        &format!("{}\nrecall: {{}}\n", bundled()),
    );
    assert_eq!(
        load_recall(&path, None).unwrap(),
        Some(keel_recall::RecallSettings::default())
    );
}

#[tokio::test]
async fn a_recall_section_without_a_summarization_section_turns_recall_on_alone() {
    // A file holding only `recall:` is a recall-only configuration, not an unknown key
    // of the summarization section.
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "recall.yaml", "recall: {}\n");
    assert_eq!(
        load_recall(&path, None).unwrap(),
        Some(keel_recall::RecallSettings::default())
    );
    assert!(prepare(session(), &options(&path)).await.is_ok());
}

#[tokio::test]
async fn read_errors_are_the_summarization_loaders() {
    let dir = tempfile::tempdir().unwrap();
    let bundled_path = root().join("examples/summarization.yaml");
    let not_utf8 = dir.path().join("latin1.yaml");
    std::fs::write(&not_utf8, b"summarization:\n  enabled: true\n# caf\xe9\n").unwrap();
    let cases = [
        (bundled_path.clone(), Some(10)),
        (bundled_path, None),
        (dir.path().join("missing.yaml"), None),
        (dir.path().to_owned(), None),
        (not_utf8, None),
        (write(dir.path(), "bad.yaml", "summarization: [\n"), None),
    ];
    for (path, cap) in cases {
        let expected = match SummarizationConfig::from_yaml_file_with_cap(
            &path,
            cap.unwrap_or(keel_summarization::config::MAX_CONFIG_BYTES),
        ) {
            Ok(_) => {
                assert!(prepare(session(), &options(&path)).await.is_ok());
                continue;
            }
            Err(e) => e.to_string(),
        };
        let mut options = options(&path);
        options.max_config_bytes = cap;
        let err = refused(&options).await;
        assert!(
            err.ends_with(&expected),
            "{}: {err} / {expected}",
            path.display()
        );
        if cap.is_some() {
            // Too large: the same message, and it stops there.
            assert_eq!(err, expected);
            assert!(err.contains("is larger than 10 bytes"), "{err}");
        }
    }
}
