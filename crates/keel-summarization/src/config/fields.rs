//! Every key of a `summarization:` section, written once with its range.
//!
//! [`visit`] lists the keys in [`KEYS`](super::KEYS) order, each with the field it fills
//! and the range it allows. Two walkers use it: the YAML reader (`read.rs`), which fills
//! the field a document sets and refuses a value outside its range at its line, and the
//! check of a configuration built in Rust (`check.rs`), which refuses a field outside
//! the same range. The "allowed" text of every error is written from the range, so the
//! reader, the check and the documentation cannot disagree.

use super::{
    ConfigError, ContextSize, MAX_CACHE_CAPACITY, MAX_COOLDOWN_SECONDS, MAX_COUNT,
    MAX_PRECOMPUTE_CONCURRENT, MAX_TIMEOUT_SECONDS, SummarizationConfig, TokenCounterKind,
};

/// The range of a whole-number setting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Whole {
    /// The smallest value allowed.
    pub min: u64,
    /// The largest value allowed.
    pub max: u64,
    /// What `null` means (`for no trimming`), when `null` is allowed.
    pub null: Option<&'static str>,
    /// What a special value means (`0: no cap`).
    pub note: Option<&'static str>,
}

impl Whole {
    /// The whole numbers in `[min, max]`.
    pub const fn new(min: u64, max: u64) -> Self {
        Whole {
            min,
            max,
            null: None,
            note: None,
        }
    }

    /// The same range, with `null` allowed and meaning `meaning`.
    pub const fn or_null(self, meaning: &'static str) -> Self {
        Whole {
            null: Some(meaning),
            ..self
        }
    }

    /// The same range, with a note on a special value.
    pub const fn note(self, note: &'static str) -> Self {
        Whole {
            note: Some(note),
            ..self
        }
    }

    /// What an error says is allowed: `a whole number in [1, 10]`.
    pub fn allowed(&self) -> String {
        let mut text = format!("a whole number in [{}, {}]", self.min, self.max);
        if let Some(note) = self.note {
            text.push_str(&format!(" ({note})"));
        }
        if let Some(meaning) = self.null {
            text.push_str(&format!(", or null {meaning}"));
        }
        text
    }

    /// What is wrong with `value`, when it is outside the range.
    pub fn problem(&self, value: u64) -> Option<&'static str> {
        if value > self.max {
            Some("is too large")
        } else if value < self.min {
            Some(if value == 0 {
                "must be positive"
            } else {
                "is out of range"
            })
        } else {
            None
        }
    }
}

/// The range of a setting that is a number above 0, up to `max`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Real {
    /// The largest value (allowed unless `below`).
    pub max: f64,
    /// Whether `max` itself is excluded.
    pub below: bool,
    /// What the number is (`a number`, `a number of seconds`).
    pub unit: &'static str,
    /// What `null` means (`to disable`), when `null` is allowed.
    pub null: Option<&'static str>,
}

impl Real {
    /// The numbers in `(0, max]`.
    pub const fn up_to(max: f64) -> Self {
        Real {
            max,
            below: false,
            unit: "a number",
            null: None,
        }
    }

    /// The numbers in `(0, max)`.
    pub const fn below(max: f64) -> Self {
        Real {
            below: true,
            ..Real::up_to(max)
        }
    }

    /// The same range, counted in seconds.
    pub const fn seconds(self) -> Self {
        Real {
            unit: "a number of seconds",
            ..self
        }
    }

    /// The same range, with `null` allowed and meaning `meaning`.
    pub const fn or_null(self, meaning: &'static str) -> Self {
        Real {
            null: Some(meaning),
            ..self
        }
    }

    /// What an error says is allowed: `a number in (0, 1], or null to disable`.
    pub fn allowed(&self) -> String {
        let close = if self.below { ')' } else { ']' };
        let mut text = format!("{} in (0, {}{close}", self.unit, self.max);
        if let Some(meaning) = self.null {
            text.push_str(&format!(", or null {meaning}"));
        }
        text
    }

    /// Whether `value` is in the range (never when it is not finite).
    pub fn contains(&self, value: f64) -> bool {
        value.is_finite()
            && value > 0.0
            && if self.below {
                value < self.max
            } else {
                value <= self.max
            }
    }
}

/// A `tokens` or `messages` size.
pub(crate) const SIZE_COUNT: Whole = Whole::new(1, MAX_COUNT);
/// A `fraction` size.
pub(crate) const SIZE_FRACTION: Real = Real::up_to(1.0);

const COUNT_0: Whole = Whole::new(0, MAX_COUNT);
const COUNT_1: Whole = Whole::new(1, MAX_COUNT);
const SECONDS: Real = Real::up_to(MAX_TIMEOUT_SECONDS).seconds();

/// A whole-number field type (`u64`, `u32`, `usize`); the range keeps every value in
/// the type.
pub(crate) trait Count: Copy {
    /// The field's value for `value`, which the range has checked fits.
    fn from_count(value: u64) -> Self;
    /// The field's value as a count.
    fn count(self) -> u64;
}

impl Count for u64 {
    fn from_count(value: u64) -> Self {
        value
    }
    fn count(self) -> u64 {
        self
    }
}

impl Count for u32 {
    fn from_count(value: u64) -> Self {
        u32::try_from(value).unwrap_or(u32::MAX)
    }
    fn count(self) -> u64 {
        u64::from(self)
    }
}

impl Count for usize {
    fn from_count(value: u64) -> Self {
        usize::try_from(value).unwrap_or(usize::MAX)
    }
    fn count(self) -> u64 {
        u64::try_from(self).unwrap_or(u64::MAX)
    }
}

/// What walks the keys: one method per kind of setting, given the key, its range and
/// the field.
pub(crate) trait Fields {
    /// `true` or `false`.
    fn flag(&mut self, key: &'static str, field: &mut bool) -> Result<(), ConfigError>;
    /// A whole number in `range`.
    fn whole<T: Count>(
        &mut self,
        key: &'static str,
        range: &Whole,
        field: &mut T,
    ) -> Result<(), ConfigError>;
    /// A whole number in `range`, or null.
    fn opt_whole<T: Count>(
        &mut self,
        key: &'static str,
        range: &Whole,
        field: &mut Option<T>,
    ) -> Result<(), ConfigError>;
    /// A number in `range`.
    fn real(&mut self, key: &'static str, range: &Real, field: &mut f64)
    -> Result<(), ConfigError>;
    /// A number in `range`, or null.
    fn opt_real(
        &mut self,
        key: &'static str,
        range: &Real,
        field: &mut Option<f64>,
    ) -> Result<(), ConfigError>;
    /// A string.
    fn text(&mut self, key: &'static str, field: &mut String) -> Result<(), ConfigError>;
    /// A string, or null.
    fn opt_text(
        &mut self,
        key: &'static str,
        field: &mut Option<String>,
    ) -> Result<(), ConfigError>;
    /// A list of strings.
    fn names(&mut self, key: &'static str, field: &mut Vec<String>) -> Result<(), ConfigError>;
    /// One context size.
    fn size(&mut self, key: &'static str, field: &mut ContextSize) -> Result<(), ConfigError>;
    /// A list of context sizes (one size counts as a list of one).
    fn sizes(&mut self, key: &'static str, field: &mut Vec<ContextSize>)
    -> Result<(), ConfigError>;
    /// A token counter's name.
    fn counter(
        &mut self,
        key: &'static str,
        field: &mut TokenCounterKind,
    ) -> Result<(), ConfigError>;
}

/// Every key, its field and its range, in [`KEYS`](super::KEYS) order.
pub(crate) fn visit(c: &mut SummarizationConfig, f: &mut impl Fields) -> Result<(), ConfigError> {
    when_and_how(c, f)?;
    what_is_kept(c, f)?;
    summary_calls(c, f)
}

/// Whether and when compaction runs, and what summarizes.
fn when_and_how(c: &mut SummarizationConfig, f: &mut impl Fields) -> Result<(), ConfigError> {
    f.flag("enabled", &mut c.enabled)?;
    f.opt_text("model_name", &mut c.model_name)?;
    f.sizes("trigger", &mut c.trigger)?;
    f.size("keep", &mut c.keep)?;
    f.opt_whole(
        "trim_tokens_to_summarize",
        &COUNT_1.or_null("for no trimming"),
        &mut c.trim_tokens_to_summarize,
    )?;
    f.opt_text("summary_prompt", &mut c.summary_prompt)
}

/// What a compacted request keeps besides the summary, and how it is counted and
/// announced.
fn what_is_kept(c: &mut SummarizationConfig, f: &mut impl Fields) -> Result<(), ConfigError> {
    f.whole(
        "preserve_recent_skill_count",
        &COUNT_0,
        &mut c.preserve_recent_skill_count,
    )?;
    f.whole(
        "preserve_recent_skill_tokens",
        &COUNT_0,
        &mut c.preserve_recent_skill_tokens,
    )?;
    f.whole(
        "preserve_recent_skill_tokens_per_skill",
        &COUNT_0,
        &mut c.preserve_recent_skill_tokens_per_skill,
    )?;
    f.names(
        "skill_file_read_tool_names",
        &mut c.skill_file_read_tool_names,
    )?;
    f.text("skills_container_path", &mut c.skills_container_path)?;
    f.flag(
        "preserve_latest_user_message",
        &mut c.preserve_latest_user_message,
    )?;
    f.flag("preserve_dynamic_context", &mut c.preserve_dynamic_context)?;
    f.opt_real(
        "stickiness_headroom",
        &Real::up_to(1.0).or_null("to disable"),
        &mut c.stickiness_headroom,
    )?;
    f.whole(
        "cache_capacity",
        &Whole::new(1, MAX_CACHE_CAPACITY),
        &mut c.cache_capacity,
    )?;
    f.counter("token_counter", &mut c.token_counter)?;
    f.text("compacting_message", &mut c.compacting_message)
}

/// How one summary call is bounded, and when summaries are written.
fn summary_calls(c: &mut SummarizationConfig, f: &mut impl Fields) -> Result<(), ConfigError> {
    f.whole(
        "summary_max_attempts",
        &Whole::new(1, 10),
        &mut c.summary_max_attempts,
    )?;
    f.real(
        "summary_timeout_seconds",
        &SECONDS,
        &mut c.summary_timeout_seconds,
    )?;
    f.real(
        "summary_deadline_seconds",
        &SECONDS,
        &mut c.summary_deadline_seconds,
    )?;
    f.whole("max_summary_chars", &COUNT_1, &mut c.max_summary_chars)?;
    f.opt_whole(
        "summary_max_tokens",
        &Whole::new(1, u32::MAX as u64).or_null("for the model's own limit"),
        &mut c.summary_max_tokens,
    )?;
    f.whole(
        "max_chars_per_message",
        &COUNT_0.note("0: no cap"),
        &mut c.max_chars_per_message,
    )?;
    f.whole(
        "circuit_breaker_failures",
        &Whole::new(1, 1_000_000),
        &mut c.circuit_breaker_failures,
    )?;
    f.whole(
        "circuit_breaker_cooldown_seconds",
        &Whole::new(0, MAX_COOLDOWN_SECONDS),
        &mut c.circuit_breaker_cooldown_seconds,
    )?;
    f.whole(
        "extractive_word_budget",
        &COUNT_1,
        &mut c.extractive_word_budget,
    )?;
    f.opt_real(
        "precompute_at",
        &Real::below(1.0).or_null("to disable"),
        &mut c.precompute_at,
    )?;
    f.whole(
        "precompute_max_concurrent",
        &Whole::new(1, MAX_PRECOMPUTE_CONCURRENT),
        &mut c.precompute_max_concurrent,
    )?;
    f.flag("compact_tool", &mut c.compact_tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects the keys [`visit`] walks.
    #[derive(Default)]
    struct Names(Vec<&'static str>);

    impl Fields for Names {
        fn flag(&mut self, key: &'static str, _: &mut bool) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn whole<T: Count>(
            &mut self,
            key: &'static str,
            _: &Whole,
            _: &mut T,
        ) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn opt_whole<T: Count>(
            &mut self,
            key: &'static str,
            _: &Whole,
            _: &mut Option<T>,
        ) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn real(&mut self, key: &'static str, _: &Real, _: &mut f64) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn opt_real(
            &mut self,
            key: &'static str,
            _: &Real,
            _: &mut Option<f64>,
        ) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn text(&mut self, key: &'static str, _: &mut String) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn opt_text(
            &mut self,
            key: &'static str,
            _: &mut Option<String>,
        ) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn names(&mut self, key: &'static str, _: &mut Vec<String>) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn size(&mut self, key: &'static str, _: &mut ContextSize) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn sizes(
            &mut self,
            key: &'static str,
            _: &mut Vec<ContextSize>,
        ) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
        fn counter(
            &mut self,
            key: &'static str,
            _: &mut TokenCounterKind,
        ) -> Result<(), ConfigError> {
            self.0.push(key);
            Ok(())
        }
    }

    #[test]
    fn the_walk_covers_every_key_once_in_keys_order() {
        let mut names = Names::default();
        visit(&mut SummarizationConfig::default(), &mut names).unwrap();
        assert_eq!(names.0, super::super::KEYS);
    }

    #[test]
    fn allowed_text_is_written_from_the_range() {
        assert_eq!(
            COUNT_1.or_null("for no trimming").allowed(),
            "a whole number in [1, 1000000000], or null for no trimming"
        );
        assert_eq!(
            COUNT_0.note("0: no cap").allowed(),
            "a whole number in [0, 1000000000] (0: no cap)"
        );
        assert_eq!(SECONDS.allowed(), "a number of seconds in (0, 86400]");
        assert_eq!(
            Real::below(1.0).or_null("to disable").allowed(),
            "a number in (0, 1), or null to disable"
        );
        assert!(!Real::below(1.0).contains(1.0) && Real::up_to(1.0).contains(1.0));
        assert!(!SIZE_FRACTION.contains(f64::NAN) && !SIZE_FRACTION.contains(0.0));
        assert_eq!(Whole::new(1, 10).problem(0), Some("must be positive"));
        assert_eq!(Whole::new(2, 10).problem(1), Some("is out of range"));
        assert_eq!(Whole::new(1, 10).problem(11), Some("is too large"));
        assert_eq!(Whole::new(1, 10).problem(10), None);
    }
}
