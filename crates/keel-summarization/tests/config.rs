//! `summarization.yaml`: DeerFlow files load as is; every invalid value is reported with
//! its key, value, allowed range and line.

// Helpers outside #[test] functions may unwrap too: a broken fixture should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_summarization::config::{ConfigError, ContextSize, SummarizationConfig, TokenCounterKind};

fn load(yaml: &str) -> SummarizationConfig {
    SummarizationConfig::from_yaml_str(yaml)
        .unwrap_or_else(|e| panic!("{e}"))
        .config
}

fn err(yaml: &str) -> ConfigError {
    SummarizationConfig::from_yaml_str(yaml).expect_err("must be rejected")
}

/// DeerFlow's documented example configurations, verbatim.
const DEERFLOW_FULL: &str = r#"
summarization:
  enabled: true
  model_name: null  # Use default model or specify a lightweight model

  # Trigger conditions (OR logic - any condition triggers summarization)
  trigger:
    - type: tokens
      value: 4000
    # Additional triggers (optional)
    # - type: messages
    #   value: 50

  # Context retention policy
  keep:
    type: messages
    value: 20

  # Token trimming for summarization call
  trim_tokens_to_summarize: 4000

  # Custom summary prompt (optional)
  summary_prompt: null

  # Tool names treated as skill file reads for skill rescue
  skill_file_read_tool_names:
    - read_file
    - read
    - view
    - cat
"#;

#[test]
fn deerflow_examples_load_as_is() {
    let c = load(DEERFLOW_FULL);
    assert!(c.enabled);
    assert_eq!(c.model_name, None);
    assert_eq!(c.trigger, vec![ContextSize::Tokens(4000)]);
    assert_eq!(c.keep, ContextSize::Messages(20));
    assert_eq!(c.trim_tokens_to_summarize, Some(4000));
    assert_eq!(
        c.skill_file_read_tool_names,
        ["read_file", "read", "view", "cat"]
    );

    let prod = load(
        "summarization:\n  enabled: true\n  model_name: gpt-4o-mini\n  trigger:\n    - type: tokens\n      value: 6000\n    - type: messages\n      value: 75\n  keep:\n    type: messages\n    value: 25\n  trim_tokens_to_summarize: 5000\n",
    );
    assert_eq!(prod.model_name.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(
        prod.trigger,
        vec![ContextSize::Tokens(6000), ContextSize::Messages(75)]
    );

    let multi = load(
        "summarization:\n  enabled: true\n  model_name: gpt-4o-mini\n  trigger:\n    type: fraction\n    value: 0.7\n  keep:\n    type: fraction\n    value: 0.3\n  trim_tokens_to_summarize: 4000\n",
    );
    assert_eq!(multi.trigger, vec![ContextSize::Fraction(0.7)]);
    assert_eq!(multi.keep, ContextSize::Fraction(0.3));

    let conservative = load(
        "summarization:\n  enabled: true\n  model_name: gpt-4\n  trigger:\n    type: tokens\n    value: 8000\n  keep:\n    type: messages\n    value: 40\n  trim_tokens_to_summarize: null\n",
    );
    assert_eq!(conservative.trim_tokens_to_summarize, None);
}

#[test]
fn bare_mapping_and_defaults() {
    let c = load("enabled: true\ntrigger: {type: messages, value: 50}\n");
    assert_eq!(c.keep, ContextSize::Messages(20));
    assert_eq!(c.preserve_recent_skill_count, 5);
    assert_eq!(c.preserve_recent_skill_tokens, 25_000);
    assert_eq!(c.preserve_recent_skill_tokens_per_skill, 5_000);
    assert_eq!(c.skills_container_path, "/mnt/skills");
    assert_eq!(c.stickiness_headroom, Some(0.75));
    assert_eq!(c.cache_capacity, 1024);
    assert_eq!(c.token_counter, TokenCounterKind::Approximate);
    // Empty file: DeerFlow's default is disabled.
    assert!(!load("").enabled);
    assert!(!load("summarization:\n").enabled);
}

#[test]
fn deerflow_full_config_reads_skills_container_path() {
    let c = load(
        "models: [a, b]\nskills:\n  container_path: /opt/skills\nsummarization:\n  enabled: true\n  trigger: {type: tokens, value: 100}\n",
    );
    assert_eq!(c.skills_container_path, "/opt/skills");
}

#[test]
fn our_keys_load() {
    let c = load(
        "enabled: true\ntrigger: {type: tokens, value: 100}\nstickiness_headroom: null\ncache_capacity: 7\ntoken_counter: approximate-script\ncompacting_message: 正在压缩上下文…\nskills_container_path: /skills\n",
    );
    assert_eq!(c.stickiness_headroom, None);
    assert_eq!(c.cache_capacity, 7);
    assert_eq!(c.token_counter, TokenCounterKind::ApproximateScript);
    assert_eq!(c.compacting_message, "正在压缩上下文…");
}

fn assert_err(e: &ConfigError, parts: &[&str]) {
    let s = e.to_string();
    for p in parts {
        assert!(s.contains(p), "{s:?} lacks {p:?}");
    }
}

#[test]
fn fraction_out_of_range() {
    for v in ["0", "1.5", "-0.2"] {
        let e = err(&format!(
            "summarization:\n  trigger:\n    type: fraction\n    value: {v}\n"
        ));
        assert_err(&e, &["trigger.value", v, "(0, 1]", "line 4"]);
    }
    assert!(
        SummarizationConfig::from_yaml_str("trigger: {type: fraction, value: 1}\n").is_ok(),
        "1 is allowed"
    );
}

#[test]
fn zero_negative_float_boolean_nan_counts() {
    let e = err("trigger:\n  - type: tokens\n    value: 4000\n  - type: messages\n    value: 0\n");
    assert_err(
        &e,
        &["trigger[1].value", "= 0", "line 5", "[1, 1000000000]"],
    );
    assert_err(
        &err("keep: {type: tokens, value: -5}\n"),
        &["keep.value", "-5", "positive"],
    );
    assert_err(
        &err("keep: {type: messages, value: 2.5}\n"),
        &["keep.value", "2.5", "whole number"],
    );
    assert_err(
        &err("keep: {type: messages, value: true}\n"),
        &["keep.value", "true", "boolean"],
    );
    // Non-finite floats reach the key's own check: key, value, line and range.
    assert_err(
        &err("trigger: {type: fraction, value: .nan}\n"),
        &[
            "trigger.value = .nan",
            "line 1",
            "not a finite number",
            "(0, 1]",
        ],
    );
    assert_err(
        &err("trigger: {type: fraction, value: .inf}\n"),
        &["line 1", "not a finite number"],
    );
    assert_err(
        &err("trigger: {type: tokens, value: \"4000\"}\n"),
        &["string"],
    );
    assert_err(&err("enabled: yes please\n"), &["enabled", "boolean"]);
    assert_err(
        &err("preserve_recent_skill_count: -1\n"),
        &[
            "preserve_recent_skill_count",
            "-1",
            "[0, 1000000000]",
            "line 1",
        ],
    );
}

#[test]
fn unknown_kind_and_unknown_keys_suggest_the_nearest() {
    assert_err(
        &err("trigger:\n  type: token\n  value: 5\n"),
        &[
            "trigger.type",
            "\"token\"",
            "tokens, messages or fraction",
            "line 2",
        ],
    );
    assert_err(
        &err("enabled: true\ntriger: {type: tokens, value: 5}\n"),
        &[
            "unknown key summarization.triger",
            "line 2",
            "did you mean `trigger`",
        ],
    );
    assert_err(
        &err("summarization:\n  trim_token_to_summarize: 10\n"),
        &["did you mean `trim_tokens_to_summarize`"],
    );
    assert_err(
        &err("keep: {type: tokens, vlaue: 5}\n"),
        &["keep.vlaue", "did you mean `value`"],
    );
    let e = err("zzz: 1\n");
    assert!(!e.to_string().contains("did you mean"), "{e}");
}

#[test]
fn prompt_without_slot_and_literal_braces() {
    assert_err(
        &err("summary_prompt: \"Summarize {history}\"\n"),
        &["summary_prompt", "{messages}", "literal"],
    );
    let c = load("summary_prompt: 'JSON {\"a\": 1} {0} then {messages}'\n");
    assert!(c.summary_prompt.unwrap().contains("{\"a\": 1}"));
}

#[test]
fn enabled_without_trigger_is_an_error() {
    assert_err(&err("enabled: true\n"), &["trigger", "no trigger"]);
}

#[test]
fn keep_at_or_above_trigger_loads_with_a_warning() {
    let loaded = SummarizationConfig::from_yaml_str("enabled: true\ntrigger: {type: messages, value: 20}\nkeep:\n  type: messages\n  value: 20\n").unwrap();
    assert_eq!(loaded.warnings.len(), 1);
    let w = loaded.warnings[0].to_string();
    // It describes what happens: compaction runs, headroom stops at the floor, and
    // later calls compact again (it used to claim summarization never runs).
    assert!(
        w.contains("compact again") && w.contains("floor") && w.contains("line 5"),
        "{w}"
    );
    assert!(!w.contains("never run"), "{w}");
}

#[test]
fn yaml_syntax_errors_have_a_line() {
    let e = err("enabled: true\ntrigger: [\n  {type: tokens\n");
    assert!(
        matches!(e, ConfigError::Syntax { line: Some(_), .. }),
        "{e:?}"
    );
}

#[test]
fn summary_max_tokens_is_a_positive_cap_or_null() {
    assert_eq!(
        load("trigger: {type: messages, value: 50}\n").summary_max_tokens,
        Some(1024),
        "capped by default: an uncapped small local model writes past every timeout"
    );
    let c = load("trigger: {type: messages, value: 50}\nsummary_max_tokens: 800\n");
    assert_eq!(c.summary_max_tokens, Some(800));
    let c = load("trigger: {type: messages, value: 50}\nsummary_max_tokens: null\n");
    assert_eq!(c.summary_max_tokens, None);
    assert_err(
        &err("trigger: {type: messages, value: 50}\nsummary_max_tokens: 0\n"),
        &["summary_max_tokens", "0", "null"],
    );
    assert_err(
        &err("trigger: {type: messages, value: 50}\nsummary_max_tokens: 5000000000\n"),
        &["summary_max_tokens", "4294967295"],
    );
}

#[test]
fn headroom_and_fraction_window_checks() {
    assert_err(
        &err("stickiness_headroom: 1.5\n"),
        &["stickiness_headroom", "(0, 1]"],
    );
    let c = load("trigger: {type: fraction, value: 0.8}\n");
    assert!(c.check_context_window(Some(128_000)).is_ok());
    assert_err(
        &c.check_context_window(None).unwrap_err(),
        &["trigger[0].value", "max_input_tokens"],
    );
}

#[test]
fn builder_validates_like_yaml() {
    let e = SummarizationConfig::builder()
        .trigger(ContextSize::Fraction(2.0))
        .build()
        .unwrap_err();
    assert_err(&e, &["trigger", "(0, 1]"]);
    let e = SummarizationConfig::builder()
        .trigger(ContextSize::Tokens(0))
        .build()
        .unwrap_err();
    assert_err(&e, &["positive"]);
    assert!(
        SummarizationConfig::builder()
            .trigger(ContextSize::Tokens(10))
            .keep(ContextSize::Tokens(5))
            .build()
            .is_ok()
    );
}

#[test]
fn bundled_example_loads() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/summarization.yaml"
    );
    let loaded = SummarizationConfig::from_yaml_file(path).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.config.enabled);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn every_number_has_an_upper_bound_and_the_message_says_so() {
    let err = |yaml: &str| {
        SummarizationConfig::from_yaml_str(yaml)
            .unwrap_err()
            .to_string()
    };
    let base = "enabled: true\ntrigger: {type: messages, value: 4}\n";
    assert_eq!(
        err(&format!("{base}summary_timeout_seconds: 1e20\n")),
        "summarization.summary_timeout_seconds = 100000000000000000000 (line 3): is out of \
         range; allowed: a number of seconds in (0, 86400]"
    );
    assert_eq!(
        err("enabled: true\ntrigger: {type: messages, value: 99999999999999999999999}\n"),
        "summarization.trigger.value = 100000000000000000000000 (line 2): is too large; \
         allowed: a whole number in [1, 1000000000]"
    );
    assert!(
        err(&format!(
            "{base}circuit_breaker_cooldown_seconds: 18446744073709551615\n"
        ))
        .contains("is too large; allowed: a whole number in [0, 2592000]")
    );
    assert!(err(&format!("{base}cache_capacity: 100000000\n")).contains("[1, 10000000]"));
}

#[test]
fn keys_are_named_as_written() {
    let e = SummarizationConfig::from_yaml_str(
        "summarization:\n  enabled: true\n  trigger: {type: messages, value: 4}\nskills:\n  container_path: rel\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("skills.container_path = \"rel\" (line 5)"),
        "{e}"
    );
    let e = SummarizationConfig::builder()
        .trigger(ContextSize::Messages(4))
        .token_counter(TokenCounterKind::O200kBase)
        .build();
    if let Err(e) = e {
        assert!(e.to_string().contains("\"o200k_base\""), "{e}");
    }
}

#[test]
fn a_file_over_the_cap_is_refused_without_reading_it_whole() {
    let err = SummarizationConfig::from_yaml_file_with_cap("/dev/zero", 1024)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "/dev/zero is larger than 1024 bytes, the cap on a configuration file; is it the \
         right file? If so, raise the cap (keel: --max-config-bytes BYTES or \
         KEEL_MAX_CONFIG_BYTES)"
    );
}
