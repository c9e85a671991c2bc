//! Session-memory settings: typed, with documented defaults, validated before use.
//!
//! Every setting has a documented range; [`SessionMemorySettings::validate`] rejects a
//! value outside it with an error naming the field, the value and the allowed range, so
//! a bad configuration fails at construction, never halfway through a turn.

use std::collections::HashSet;
use std::ops::RangeInclusive;

use keel_core::store::SessionScope;
use serde::{Deserialize, Serialize};

/// Default `n_messages` in session-memory mode: the recent window sent verbatim.
pub const DEFAULT_N_MESSAGES: usize = 10;
/// Default `fold_batch`: older messages that must build up before a fold.
pub const DEFAULT_FOLD_BATCH: usize = 20;
/// Default `max_batch_messages`: messages folded by one model call at most.
pub const DEFAULT_MAX_BATCH_MESSAGES: usize = 60;
/// Default `max_message_chars`: each message is cut to this many characters in a fold.
pub const DEFAULT_MAX_MESSAGE_CHARS: usize = 4000;
/// Default `summary_word_budget`: the summary is clipped to this many words.
pub const DEFAULT_SUMMARY_WORD_BUDGET: usize = 300;
/// Default `max_folds_per_turn`: folds one turn may run while catching up.
pub const DEFAULT_MAX_FOLDS_PER_TURN: usize = 3;

/// Allowed range of `n_messages` (0 turns memory off).
pub const N_MESSAGES_RANGE: RangeInclusive<usize> = 0..=1000;
/// Allowed range of `fold_batch` (and it may not exceed `max_batch_messages`).
pub const FOLD_BATCH_RANGE: RangeInclusive<usize> = 1..=500;
/// Allowed range of `max_batch_messages` (and it may not be below `fold_batch`).
pub const MAX_BATCH_MESSAGES_RANGE: RangeInclusive<usize> = 1..=500;
/// Allowed range of `max_message_chars`.
pub const MAX_MESSAGE_CHARS_RANGE: RangeInclusive<usize> = 100..=100_000;
/// Allowed range of `summary_word_budget`.
pub const SUMMARY_WORD_BUDGET_RANGE: RangeInclusive<usize> = 10..=5000;
/// Allowed range of `max_folds_per_turn`.
pub const MAX_FOLDS_PER_TURN_RANGE: RangeInclusive<usize> = 1..=100;
/// How many pinned keys may be configured.
pub const MAX_PINNED_KEYS: usize = 32;
/// The longest pinned key name, in characters.
pub const MAX_PINNED_KEY_CHARS: usize = 64;

/// A setting that is out of range or malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A number outside its allowed range.
    #[error("session memory setting `{field}` = {value} is out of range; allowed: {range}")]
    OutOfRange {
        /// The setting.
        field: &'static str,
        /// The value given.
        value: usize,
        /// The allowed range, as text (`a whole number in [1, 500]`).
        range: String,
    },
    /// A pinned key that cannot be used.
    #[error(
        "session memory setting `pinned_keys` has an invalid key {key:?}: {reason}; allowed: \
         1 to 64 characters from A-Z a-z 0-9 _ - ., each key once, at most 32 keys"
    )]
    InvalidPinnedKey {
        /// The key given.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Too many pinned keys.
    #[error("session memory setting `pinned_keys` has {count} keys; allowed: at most {max}")]
    TooManyPinnedKeys {
        /// How many were given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A scope field that must not be empty.
    #[error(
        "session memory setting `scope.{field}` is empty; it must name the {what} (scope is a \
         security boundary)"
    )]
    EmptyScope {
        /// The scope field.
        field: &'static str,
        /// What it names.
        what: &'static str,
    },
}

/// Settings of the session-memory mode. Construct with [`Default`] and change fields, or
/// deserialize (unknown fields are rejected); then [`validate`](Self::validate).
///
/// The summary model is not a setting here: it is an `Arc<dyn ChatModel>` given to the
/// middleware builder; without one, folds use the run's model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionMemorySettings {
    /// Recent messages sent verbatim (excluding the current input). 0 turns memory off:
    /// the model then sees the current turn only, and nothing is folded.
    pub n_messages: usize,
    /// Keys the summarizer keeps for the whole session (`project_id`, `customer`). It may
    /// update or clear them; it never drops them otherwise. Keys it invents are ignored.
    pub pinned_keys: Vec<String>,
    /// Fold once at least this many unfolded messages are older than the recent window.
    pub fold_batch: usize,
    /// At most this many messages go into one fold (one model call).
    pub max_batch_messages: usize,
    /// Each message is cut to this many characters in the fold transcript.
    pub max_message_chars: usize,
    /// The summary is clipped to this many words.
    pub summary_word_budget: usize,
    /// At most this many folds run in one turn while a long session catches up; the rest
    /// waits for the next turns. Bounds the latency a single turn can pay.
    pub max_folds_per_turn: usize,
    /// Whose memory this is. An empty `session_id` means "the run's thread id", so one
    /// middleware can serve many sessions of one flow and user.
    pub scope: SessionScope,
}

impl Default for SessionMemorySettings {
    fn default() -> Self {
        SessionMemorySettings {
            n_messages: DEFAULT_N_MESSAGES,
            pinned_keys: Vec::new(),
            fold_batch: DEFAULT_FOLD_BATCH,
            max_batch_messages: DEFAULT_MAX_BATCH_MESSAGES,
            max_message_chars: DEFAULT_MAX_MESSAGE_CHARS,
            summary_word_budget: DEFAULT_SUMMARY_WORD_BUDGET,
            max_folds_per_turn: DEFAULT_MAX_FOLDS_PER_TURN,
            scope: SessionScope::new("default", "", "", ""),
        }
    }
}

fn in_range(
    field: &'static str,
    value: usize,
    range: &RangeInclusive<usize>,
) -> Result<(), SettingsError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(SettingsError::OutOfRange {
            field,
            value,
            range: format!("a whole number in [{}, {}]", range.start(), range.end()),
        })
    }
}

fn check_key(key: &str) -> Result<(), SettingsError> {
    let bad = |reason| {
        Err(SettingsError::InvalidPinnedKey {
            key: key.to_owned(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("it is empty");
    }
    if key.chars().count() > MAX_PINNED_KEY_CHARS {
        return bad("it is longer than 64 characters");
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return bad("it has a character outside A-Z a-z 0-9 _ - .");
    }
    Ok(())
}

impl SessionMemorySettings {
    /// Settings for a scope, with every other value at its default.
    pub fn for_scope(scope: SessionScope) -> Self {
        SessionMemorySettings {
            scope,
            ..Self::default()
        }
    }

    /// Returns the settings with these pinned keys.
    pub fn with_pinned_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.pinned_keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Returns the settings with another recent-window size.
    pub fn with_n_messages(mut self, n: usize) -> Self {
        self.n_messages = n;
        self
    }

    /// Checks every field; the error names the first bad one, its value and its range.
    pub fn validate(&self) -> Result<(), SettingsError> {
        in_range("n_messages", self.n_messages, &N_MESSAGES_RANGE)?;
        in_range("fold_batch", self.fold_batch, &FOLD_BATCH_RANGE)?;
        in_range(
            "max_batch_messages",
            self.max_batch_messages,
            &MAX_BATCH_MESSAGES_RANGE,
        )?;
        if self.max_batch_messages < self.fold_batch {
            return Err(SettingsError::OutOfRange {
                field: "max_batch_messages",
                value: self.max_batch_messages,
                range: format!(
                    "a whole number in [{}, {}] (at least fold_batch)",
                    self.fold_batch,
                    MAX_BATCH_MESSAGES_RANGE.end(),
                ),
            });
        }
        in_range(
            "max_message_chars",
            self.max_message_chars,
            &MAX_MESSAGE_CHARS_RANGE,
        )?;
        in_range(
            "summary_word_budget",
            self.summary_word_budget,
            &SUMMARY_WORD_BUDGET_RANGE,
        )?;
        in_range(
            "max_folds_per_turn",
            self.max_folds_per_turn,
            &MAX_FOLDS_PER_TURN_RANGE,
        )?;
        if self.pinned_keys.len() > MAX_PINNED_KEYS {
            return Err(SettingsError::TooManyPinnedKeys {
                count: self.pinned_keys.len(),
                max: MAX_PINNED_KEYS,
            });
        }
        let mut seen = HashSet::new();
        for key in &self.pinned_keys {
            check_key(key)?;
            if !seen.insert(key.as_str()) {
                return Err(SettingsError::InvalidPinnedKey {
                    key: key.clone(),
                    reason: "it is listed twice",
                });
            }
        }
        if self.scope.flow_id.trim().is_empty() {
            return Err(SettingsError::EmptyScope {
                field: "flow_id",
                what: "agent or flow",
            });
        }
        Ok(())
    }

    /// The scope of a run: the configured scope, with the run's thread id as the session
    /// id when none is configured.
    pub fn scope_for_thread(&self, thread_id: &str) -> SessionScope {
        let mut scope = self.scope.clone();
        if scope.session_id.is_empty() {
            scope.session_id = thread_id.to_owned();
        }
        scope
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_values_and_valid() {
        let s = SessionMemorySettings::default();
        assert_eq!(
            (
                s.n_messages,
                s.fold_batch,
                s.max_batch_messages,
                s.max_message_chars,
                s.summary_word_budget
            ),
            (10, 20, 60, 4000, 300)
        );
        s.validate().unwrap();
    }

    #[test]
    fn errors_name_field_value_and_range() {
        let s = SessionMemorySettings {
            summary_word_budget: 3,
            ..Default::default()
        };
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.contains("summary_word_budget") && e.contains('3') && e.contains("[10, 5000]"),
            "{e}"
        );

        let s = SessionMemorySettings {
            fold_batch: 50,
            max_batch_messages: 40,
            ..Default::default()
        };
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.contains("max_batch_messages") && e.contains("40") && e.contains("fold_batch"),
            "{e}"
        );

        let s = SessionMemorySettings::default().with_pinned_keys(["project", "project"]);
        assert!(s.validate().unwrap_err().to_string().contains("twice"));
        let s = SessionMemorySettings::default().with_pinned_keys(["has space"]);
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("\"has space\"")
        );
        let s = SessionMemorySettings::for_scope(SessionScope::new("", "u", "s", ""));
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("scope.flow_id")
        );
    }

    #[test]
    fn unknown_fields_are_rejected_when_deserializing() {
        let e = serde_json::from_str::<SessionMemorySettings>(r#"{"n_mesages": 5}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("n_mesages"), "{e}");
    }

    #[test]
    fn empty_session_id_takes_the_thread_id() {
        let s = SessionMemorySettings::for_scope(SessionScope::new("f", "u", "", "c"));
        assert_eq!(s.scope_for_thread("t1").session_id, "t1");
        let s = SessionMemorySettings::for_scope(SessionScope::new("f", "u", "s", "c"));
        assert_eq!(s.scope_for_thread("t1").session_id, "s");
    }
}
