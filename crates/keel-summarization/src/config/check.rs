//! Checking a configuration: the range of every field (for one built in Rust; the YAML
//! reader checks them as it reads), then what no single key can say on its own.

use std::collections::HashMap;

use super::error::invalid;
use super::fields::{Count, Fields, Real, SIZE_COUNT, SIZE_FRACTION, Whole, visit};
use super::{ConfigError, ConfigWarning, ContextSize, SummarizationConfig, TokenCounterKind};
use crate::transcript::MESSAGES_SLOT;

/// Refuses a field outside its range; the error has no line (it came from Rust).
struct Ranges;

fn out_of(key: &str, value: String, problem: &str, allowed: String) -> ConfigError {
    invalid(key.to_owned(), value, problem.to_owned(), allowed, None)
}

fn whole(key: &str, range: &Whole, value: u64) -> Result<(), ConfigError> {
    match range.problem(value) {
        Some(problem) => Err(out_of(key, value.to_string(), problem, range.allowed())),
        None => Ok(()),
    }
}

fn real(key: &str, range: &Real, value: f64) -> Result<(), ConfigError> {
    match range.contains(value) {
        true => Ok(()),
        false => Err(out_of(
            key,
            value.to_string(),
            "is out of range",
            range.allowed(),
        )),
    }
}

fn size(key: &str, size: &ContextSize) -> Result<(), ConfigError> {
    let key = format!("{key}.value");
    match *size {
        ContextSize::Tokens(n) | ContextSize::Messages(n) => whole(&key, &SIZE_COUNT, n),
        ContextSize::Fraction(f) => real(&key, &SIZE_FRACTION, f),
    }
}

impl Fields for Ranges {
    fn flag(&mut self, _: &'static str, _: &mut bool) -> Result<(), ConfigError> {
        Ok(())
    }

    fn whole<T: Count>(
        &mut self,
        key: &'static str,
        range: &Whole,
        field: &mut T,
    ) -> Result<(), ConfigError> {
        whole(key, range, field.count())
    }

    fn opt_whole<T: Count>(
        &mut self,
        key: &'static str,
        range: &Whole,
        field: &mut Option<T>,
    ) -> Result<(), ConfigError> {
        field.map_or(Ok(()), |v| whole(key, range, v.count()))
    }

    fn real(
        &mut self,
        key: &'static str,
        range: &Real,
        field: &mut f64,
    ) -> Result<(), ConfigError> {
        real(key, range, *field)
    }

    fn opt_real(
        &mut self,
        key: &'static str,
        range: &Real,
        field: &mut Option<f64>,
    ) -> Result<(), ConfigError> {
        field.map_or(Ok(()), |v| real(key, range, v))
    }

    fn text(&mut self, _: &'static str, _: &mut String) -> Result<(), ConfigError> {
        Ok(())
    }

    fn opt_text(&mut self, _: &'static str, _: &mut Option<String>) -> Result<(), ConfigError> {
        Ok(())
    }

    fn names(&mut self, _: &'static str, _: &mut Vec<String>) -> Result<(), ConfigError> {
        Ok(())
    }

    fn size(&mut self, key: &'static str, field: &mut ContextSize) -> Result<(), ConfigError> {
        size(key, field)
    }

    fn sizes(
        &mut self,
        key: &'static str,
        field: &mut Vec<ContextSize>,
    ) -> Result<(), ConfigError> {
        // One size is named as a mapping would be written (`trigger`), several by index.
        match field.as_slice() {
            [one] => size(key, one),
            many => many
                .iter()
                .enumerate()
                .try_for_each(|(i, s)| size(&format!("{key}[{i}]"), s)),
        }
    }

    fn counter(&mut self, _: &'static str, _: &mut TokenCounterKind) -> Result<(), ConfigError> {
        Ok(())
    }
}

/// The range of every field of a configuration built in Rust.
pub(crate) fn ranges(config: &SummarizationConfig) -> Result<(), ConfigError> {
    visit(&mut config.clone(), &mut Ranges)
}

/// What no single key can say on its own, and the warnings of a configuration that
/// loads but deserves attention. `lines` holds the line of each key a document set.
pub(crate) fn consistency(
    c: &SummarizationConfig,
    lines: &HashMap<String, u64>,
) -> Result<Vec<ConfigWarning>, ConfigError> {
    let bad = |key: &str, value: String, problem: &str, allowed: &str| {
        let line = lines.get(key).copied();
        invalid(
            key.to_owned(),
            value,
            problem.to_owned(),
            allowed.to_owned(),
            line,
        )
    };
    if c.enabled && c.trigger.is_empty() {
        return Err(bad(
            "trigger",
            "[]".into(),
            "summarization is enabled but has no trigger",
            "one or more of {type: tokens|messages|fraction, value: ...}",
        ));
    }
    if let Some(p) = &c.summary_prompt
        && !p.contains(MESSAGES_SLOT)
    {
        let shown: String = p.chars().take(60).collect();
        return Err(bad(
            "summary_prompt",
            format!("{shown:?}"),
            "the prompt has no {messages} placeholder",
            "a string containing {messages} (other braces are literal text)",
        ));
    }
    if !c.skills_container_path.starts_with('/') {
        return Err(bad(
            if lines.contains_key("skills.container_path") {
                "skills.container_path"
            } else {
                "skills_container_path"
            },
            format!("{:?}", c.skills_container_path),
            "must be an absolute path",
            "an absolute path such as /mnt/skills",
        ));
    }
    if c.compacting_message.trim().is_empty() {
        return Err(bad(
            "compacting_message",
            "\"\"".into(),
            "must not be blank",
            "a non-empty string",
        ));
    }
    if c.token_counter.needs_tiktoken() && !cfg!(feature = "tiktoken") {
        return Err(bad(
            "token_counter",
            format!("{:?}", c.token_counter.name()),
            "exact counting needs keel-summarization's `tiktoken` feature",
            "approximate or approximate_script (or build with --features tiktoken)",
        ));
    }
    Ok(keep_warnings(c, lines.get("keep.value").copied()))
}

/// A `keep` of the same kind as a trigger and not smaller: compaction still runs when
/// the trigger is reached, but the window `keep` asks for is already at the trigger on
/// its own.
fn keep_warnings(c: &SummarizationConfig, line: Option<u64>) -> Vec<ConfigWarning> {
    let what_happens = match c.stickiness_headroom {
        Some(h) => format!(
            "when the trigger is reached, stickiness headroom shrinks the kept window toward {h} x the trigger, but never below its floor (half of keep, the newest message with its tool calls, the message before it and the latest user message), so the window stays near the trigger and most later calls compact again"
        ),
        None => "when the trigger is reached, compaction keeps that window, which alone reaches the trigger again, so every later call compacts again".to_owned(),
    };
    c.trigger
        .iter()
        .enumerate()
        .filter(|(_, t)| match (c.keep, **t) {
            (ContextSize::Messages(k), ContextSize::Messages(t)) => k >= t,
            (ContextSize::Tokens(k), ContextSize::Tokens(t)) => k >= t,
            (ContextSize::Fraction(k), ContextSize::Fraction(t)) => k >= t,
            _ => false,
        })
        .map(|(i, t)| ConfigWarning {
            key: "keep".into(),
            message: format!(
                "keep ({} {}) is not smaller than trigger #{i} ({} {}): {what_happens}; set keep to about half of the trigger",
                c.keep.kind(),
                show_size(&c.keep),
                t.kind(),
                show_size(t)
            ),
            line,
        })
        .collect()
}

fn show_size(s: &ContextSize) -> String {
    match s {
        ContextSize::Tokens(n) | ContextSize::Messages(n) => n.to_string(),
        ContextSize::Fraction(f) => f.to_string(),
    }
}
