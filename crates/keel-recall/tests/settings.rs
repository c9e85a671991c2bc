//! Bad settings are typed errors naming the field, the value and the allowed range, at
//! `build` and when read from a document; never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use keel_recall::{RecallMiddleware, RecallSettings, RecallSettingsError};

fn with(f: impl FnOnce(&mut RecallSettings)) -> RecallSettings {
    let mut s = RecallSettings::default();
    f(&mut s);
    s
}

#[test]
fn every_out_of_range_value_names_its_field_value_and_range() {
    let whole = |lo: usize, hi: usize| format!("a whole number in [{lo}, {hi}]");
    let cases: Vec<(RecallSettings, &str, &str, String)> = vec![
        (
            with(|s| s.max_excerpts = 0),
            "max_excerpts",
            "0",
            whole(1, 50),
        ),
        (
            with(|s| s.max_excerpts = 51),
            "max_excerpts",
            "51",
            whole(1, 50),
        ),
        (
            with(|s| s.max_tokens = 19),
            "max_tokens",
            "19",
            whole(20, 20_000),
        ),
        (
            with(|s| s.max_tokens = 20_001),
            "max_tokens",
            "20001",
            whole(20, 20_000),
        ),
        (
            with(|s| s.max_excerpt_chars = 39),
            "max_excerpt_chars",
            "39",
            whole(40, 20_000),
        ),
        (
            with(|s| s.max_excerpt_chars = 20_001),
            "max_excerpt_chars",
            "20001",
            whole(40, 20_000),
        ),
        (
            with(|s| s.min_score = -0.1),
            "min_score",
            "-0.1",
            "a number in [0, 1]".into(),
        ),
        (
            with(|s| s.min_score = 1.5),
            "min_score",
            "1.5",
            "a number in [0, 1]".into(),
        ),
        (
            with(|s| s.min_score = f64::NAN),
            "min_score",
            "NaN",
            "a number in [0, 1]".into(),
        ),
        (
            with(|s| s.min_score = f64::INFINITY),
            "min_score",
            "inf",
            "a number in [0, 1]".into(),
        ),
    ];
    for (settings, field, value, range) in cases {
        let expected = RecallSettingsError {
            field,
            value: value.to_owned(),
            range: range.clone(),
        };
        assert_eq!(
            settings.validate(),
            Err(expected.clone()),
            "{field} = {value}"
        );
        let built = RecallMiddleware::builder(settings).build();
        assert_eq!(
            built.err(),
            Some(expected.clone()),
            "build refuses {field} = {value}"
        );
        let message = expected.to_string();
        assert!(
            message.contains(&format!("`{field}`"))
                && message.contains(value)
                && message.contains(&range),
            "{message}"
        );
    }
}

#[test]
fn the_range_ends_themselves_are_accepted() {
    for s in [
        with(|s| s.max_excerpts = 1),
        with(|s| s.max_excerpts = 50),
        with(|s| s.max_tokens = 20),
        with(|s| s.max_tokens = 20_000),
        with(|s| s.max_excerpt_chars = 40),
        with(|s| s.max_excerpt_chars = 20_000),
        with(|s| s.min_score = 0.0),
        with(|s| s.min_score = 1.0),
    ] {
        assert_eq!(s.validate(), Ok(()), "{s:?}");
        RecallMiddleware::builder(s).build().unwrap();
    }
}

#[test]
fn documents_with_unknown_keys_or_wrong_types_are_errors_and_missing_keys_default() {
    let err = serde_json::from_str::<RecallSettings>(r#"{"max_excerpt": 3}"#).unwrap_err();
    assert!(err.to_string().contains("max_excerpt"), "{err}");
    let err = serde_json::from_str::<RecallSettings>(r#"{"max_tokens": "lots"}"#).unwrap_err();
    assert!(err.to_string().contains("invalid type"), "{err}");
    let err = serde_json::from_str::<RecallSettings>(r#"{"max_tokens": -5}"#).unwrap_err();
    assert!(err.to_string().contains("-5"), "{err}");
    let s: RecallSettings = serde_json::from_str(r#"{"max_excerpts": 2}"#).unwrap();
    assert_eq!(
        s,
        RecallSettings {
            max_excerpts: 2,
            ..RecallSettings::default()
        }
    );
}
