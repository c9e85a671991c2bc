//! Recall settings: typed, with documented defaults, validated before use (the same
//! shape as session memory's).

use std::ops::RangeInclusive;

use keel_core::store::SessionScope;
use serde::{Deserialize, Serialize};

/// Default `max_excerpts`: messages quoted at most per model call. Recall is the
/// backbone of what a compacted request remembers, so it quotes many short excerpts
/// rather than a few long ones.
pub const DEFAULT_MAX_EXCERPTS: usize = 16;
/// Default `max_tokens`: the excerpt message's budget (approximate tokens).
pub const DEFAULT_MAX_TOKENS: usize = 1200;
/// Default `min_score`: the share of the question's weight a message must match.
pub const DEFAULT_MIN_SCORE: f64 = 0.2;
/// Default `max_excerpt_chars`: one excerpt is cut to its best sentences within this.
pub const DEFAULT_MAX_EXCERPT_CHARS: usize = 300;

/// Allowed range of `max_excerpts`.
pub const MAX_EXCERPTS_RANGE: RangeInclusive<usize> = 1..=50;
/// Allowed range of `max_tokens`.
pub const MAX_TOKENS_RANGE: RangeInclusive<usize> = 20..=20_000;
/// Allowed range of `min_score`.
pub const MIN_SCORE_RANGE: RangeInclusive<f64> = 0.0..=1.0;
/// Allowed range of `max_excerpt_chars`.
pub const MAX_EXCERPT_CHARS_RANGE: RangeInclusive<usize> = 40..=20_000;

/// A setting that is out of range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("recall setting `{field}` = {value} is out of range; allowed: {range}")]
pub struct RecallSettingsError {
    /// The setting.
    pub field: &'static str,
    /// The value given, as text.
    pub value: String,
    /// The allowed range, as text.
    pub range: String,
}

/// What recall quotes and for whom.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecallSettings {
    /// Messages quoted at most per model call (default 16, in [1, 50]).
    pub max_excerpts: usize,
    /// Budget of the excerpt message in approximate tokens (default 1200, in [20,
    /// 20000]): four characters of Latin text or one CJK character a token.
    pub max_tokens: usize,
    /// The share (0 to 1) of the question's weight (inverse document frequency of its
    /// terms) a message must match to be quoted (default 0.2).
    pub min_score: f64,
    /// One excerpt is cut to its sentences that best match the question within this
    /// many characters (default 300, in [40, 20000]).
    pub max_excerpt_chars: usize,
    /// The flow (agent) the index is scoped to (default `keel`).
    pub flow_id: String,
    /// The owner the index is scoped to (default empty).
    pub user_id: String,
}

impl Default for RecallSettings {
    fn default() -> Self {
        RecallSettings {
            max_excerpts: DEFAULT_MAX_EXCERPTS,
            max_tokens: DEFAULT_MAX_TOKENS,
            min_score: DEFAULT_MIN_SCORE,
            max_excerpt_chars: DEFAULT_MAX_EXCERPT_CHARS,
            flow_id: "keel".to_owned(),
            user_id: String::new(),
        }
    }
}

fn check(
    field: &'static str,
    value: usize,
    range: &RangeInclusive<usize>,
) -> Result<(), RecallSettingsError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(RecallSettingsError {
            field,
            value: value.to_string(),
            range: format!("a whole number in [{}, {}]", range.start(), range.end()),
        })
    }
}

impl RecallSettings {
    /// The settings' names, as a stack file or keel.yaml writes them.
    pub const KEYS: [&'static str; 6] = [
        "max_excerpts",
        "max_tokens",
        "min_score",
        "max_excerpt_chars",
        "flow_id",
        "user_id",
    ];

    /// Checks every setting against its range.
    pub fn validate(&self) -> Result<(), RecallSettingsError> {
        check("max_excerpts", self.max_excerpts, &MAX_EXCERPTS_RANGE)?;
        check("max_tokens", self.max_tokens, &MAX_TOKENS_RANGE)?;
        check(
            "max_excerpt_chars",
            self.max_excerpt_chars,
            &MAX_EXCERPT_CHARS_RANGE,
        )?;
        if !MIN_SCORE_RANGE.contains(&self.min_score) {
            return Err(RecallSettingsError {
                field: "min_score",
                value: self.min_score.to_string(),
                range: "a number in [0, 1]".to_owned(),
            });
        }
        Ok(())
    }

    /// The index scope of a thread: `(flow_id, user_id, thread_id, "")`.
    pub fn scope_for_thread(&self, thread_id: &str) -> SessionScope {
        SessionScope::new(&self.flow_id, &self.user_id, thread_id, "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_errors_name_field_value_and_range() {
        assert_eq!(RecallSettings::default().validate(), Ok(()));
        let s = RecallSettings {
            max_excerpts: 0,
            ..RecallSettings::default()
        };
        assert_eq!(
            s.validate().map_err(|e| e.to_string()),
            Err("recall setting `max_excerpts` = 0 is out of range; allowed: a whole number in [1, 50]".to_owned())
        );
        let s = RecallSettings {
            min_score: 1.5,
            ..RecallSettings::default()
        };
        assert_eq!(
            s.validate().map_err(|e| e.to_string()),
            Err(
                "recall setting `min_score` = 1.5 is out of range; allowed: a number in [0, 1]"
                    .to_owned()
            )
        );
        let s = RecallSettings {
            min_score: f64::NAN,
            ..RecallSettings::default()
        };
        assert!(s.validate().is_err());
    }
}
