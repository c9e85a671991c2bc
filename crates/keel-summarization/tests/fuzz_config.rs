//! A property-driven fuzz target for the configuration loader: arbitrary
//! text, and documents built from the real keys with extreme values (huge and negative
//! numbers, non-finite floats, wrong types, deep nesting). Loading never panics, errors
//! never show the YAML library's API hints, and a configuration that loads also builds
//! a middleware (where `summary_timeout_seconds: 1e20` used to panic). Runs a fixed
//! number of cases in the normal test suite (`PROPTEST_CASES` raises it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use keel_summarization::config::SummarizationConfig;
use keel_summarization::middleware::SummarizationMiddleware;
use proptest::prelude::*;

const LEAKS: &[&str] = &[
    "DuplicateKeyPolicy",
    "from_str_multiple",
    "weak recursion",
    "budget breached",
    "Options",
    "-->",
];

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        Just("1e20".to_owned()),
        Just("99999999999999999999999".to_owned()),
        Just(".nan".to_owned()),
        Just("-.inf".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("\"{messages}\"".to_owned()),
        Just("/mnt/skills".to_owned()),
        "[a-z_ ]{0,12}",
        (1u64..5000).prop_map(|n| n.to_string()),
    ]
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => scalar(),
        2 => (prop_oneof![Just("tokens"), Just("messages"), Just("fraction"), Just("x")], scalar())
            .prop_map(|(t, v)| format!("{{type: {t}, value: {v}}}")),
        1 => proptest::collection::vec(scalar(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
        1 => (1usize..40).prop_map(|d| format!("{}1{}", "[".repeat(d), "]".repeat(d))),
    ]
}

fn document() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        (
            proptest::sample::select(keel_summarization::config::KEYS),
            value(),
        ),
        0..10,
    )
    .prop_map(|entries| {
        entries
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect::<String>()
    })
}

fn load(text: &str) {
    match SummarizationConfig::from_yaml_str(text) {
        Ok(loaded) => {
            let built = SummarizationMiddleware::builder(loaded.config)
                .extractive()
                .build();
            if let Err(e) = built {
                assert!(!e.to_string().is_empty());
            }
        }
        Err(e) => {
            let s = e.to_string();
            for leak in LEAKS {
                assert!(!s.contains(leak), "{s:?} leaks {leak:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,300}") {
        load(&text);
    }

    #[test]
    fn real_keys_with_extreme_values_never_panic(doc in document(), nested in any::<bool>()) {
        let text = if nested {
            format!(
                "summarization:\n{}",
                doc.lines().map(|l| format!("  {l}\n")).collect::<String>()
            )
        } else {
            doc
        };
        load(&text);
    }
}
