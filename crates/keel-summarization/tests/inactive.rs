//! A summarization middleware that can never compact says so: `from_config` returns the
//! reason instead of a builder, and `build()` logs it as a warning through `tracing`
//! (the library, not only the CLI), so a `summarization.yaml` without `enabled: true`
//! is not silently a pass-through.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use keel_summarization::config::SummarizationConfig;
use keel_summarization::middleware::{Inactive, SummarizationMiddleware};

/// What the subscriber wrote.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged(f: impl FnOnce()) -> String {
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(sink.0.lock().unwrap().clone()).unwrap()
}

/// DeerFlow's schema: `enabled` defaults to false, and stays so for DeerFlow files.
const WITHOUT_ENABLED: &str = "summarization:\n  trigger:\n    - type: messages\n      value: 6\n  keep:\n    type: messages\n    value: 2\n";

#[test]
fn a_file_without_enabled_is_refused_by_from_config_with_the_reason() {
    let loaded = SummarizationConfig::from_yaml_str(WITHOUT_ENABLED).unwrap();
    assert!(!loaded.config.enabled, "DeerFlow's default stays false");
    let err = SummarizationMiddleware::from_config(loaded.config)
        .err()
        .expect("a disabled configuration gives the reason, not a builder");
    assert_eq!(err, Inactive::Disabled);
    let text = err.to_string();
    assert!(text.contains("summarization.enabled is false"), "{text}");
    assert!(text.contains("enabled: true"), "says what to do: {text}");
}

#[test]
fn building_a_disabled_middleware_warns_through_tracing() {
    let log = logged(|| {
        let loaded = SummarizationConfig::from_yaml_str(WITHOUT_ENABLED).unwrap();
        let middleware = SummarizationMiddleware::builder(loaded.config)
            .extractive()
            .build()
            .unwrap();
        assert_eq!(middleware.inactive(), Some(Inactive::Disabled));
    });
    assert!(log.contains("WARN"), "{log}");
    assert_eq!(
        log.matches("summarization.enabled is false").count(),
        1,
        "{log}"
    );
}

#[test]
fn an_enabled_middleware_builds_without_a_warning() {
    let text = WITHOUT_ENABLED.replace("summarization:\n", "summarization:\n  enabled: true\n");
    let log = logged(|| {
        let loaded = SummarizationConfig::from_yaml_str(&text).unwrap();
        let middleware = SummarizationMiddleware::from_config(loaded.config)
            .unwrap()
            .extractive()
            .build()
            .unwrap();
        assert_eq!(middleware.inactive(), None);
    });
    assert!(!log.contains("enabled is false"), "{log}");
}
