//! Exponential backoff with jitter, shared by [`ModelRetry`](crate::ModelRetry) and
//! [`ToolRetry`](crate::ToolRetry), with LangChain's parameters and formula
//! (`langchain.agents.middleware._retry`): the delay before retry `n` (0-based) is
//! `initial_delay * backoff_factor^n`, capped at `max_delay`, then moved by up to ±25 %
//! when `jitter` is on; a `backoff_factor` of 0 keeps the delay constant.

use std::time::Duration;

use crate::error::ConfigError;
use crate::stack::StackError;
use crate::stack::value::Settings;

/// How many times to retry and how long to wait in between.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// Retries after the first attempt (0: no retry). LangChain's default: 2.
    pub max_retries: u32,
    /// Growth of the delay per retry (0: constant). Default 2.0.
    pub backoff_factor: f64,
    /// Delay before the first retry, in seconds. Default 1.0.
    pub initial_delay: f64,
    /// Cap on any delay, in seconds. Default 60.0.
    pub max_delay: f64,
    /// Randomize each delay by ±25 %. Default true.
    pub jitter: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            max_retries: 2,
            backoff_factor: 2.0,
            initial_delay: 1.0,
            max_delay: 60.0,
            jitter: true,
        }
    }
}

/// The largest `max_retries` accepted.
pub const MAX_RETRIES: u32 = 1000;
/// The longest delay accepted, in seconds (one day).
pub const MAX_DELAY_SECONDS: f64 = 86_400.0;

impl Backoff {
    /// Checks every field, naming `middleware` in the error.
    pub fn validate(&self, middleware: &'static str) -> Result<(), ConfigError> {
        if self.max_retries > MAX_RETRIES {
            return Err(ConfigError::new(
                middleware,
                "max_retries",
                self.max_retries,
                "is too large",
                format!("a whole number in [0, {MAX_RETRIES}]"),
            ));
        }
        for (field, value, max) in [
            ("initial_delay", self.initial_delay, MAX_DELAY_SECONDS),
            ("max_delay", self.max_delay, MAX_DELAY_SECONDS),
            ("backoff_factor", self.backoff_factor, 100.0),
        ] {
            if !(value.is_finite() && (0.0..=max).contains(&value)) {
                return Err(ConfigError::new(
                    middleware,
                    field,
                    value,
                    "is out of range",
                    format!("a number in [0, {max}]"),
                ));
            }
        }
        Ok(())
    }

    /// The delay before retry `retry` (0-based), without jitter.
    pub fn base_delay(&self, retry: u32) -> f64 {
        let delay = if self.backoff_factor == 0.0 {
            self.initial_delay
        } else {
            self.initial_delay * self.backoff_factor.powi(retry.min(i32::MAX as u32) as i32)
        };
        delay.min(self.max_delay)
    }

    /// The delay before retry `retry` (0-based), jitter included.
    pub fn delay(&self, retry: u32) -> Duration {
        let mut delay = self.base_delay(retry);
        if self.jitter && delay > 0.0 {
            let amount = delay * 0.25;
            delay += (fastrand::f64() * 2.0 - 1.0) * amount;
            delay = delay.max(0.0);
        }
        Duration::try_from_secs_f64(delay).unwrap_or(Duration::ZERO)
    }
}

/// Waits before a retry (no timer at all for a zero delay).
pub(crate) async fn wait(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// Reads the backoff settings of a retry entry (`max_retries`, `backoff_factor`,
/// `initial_delay`, `max_delay`, `jitter`), LangChain's defaults for those not given.
/// Their ranges are checked by [`Backoff::validate`] when the middleware is built.
pub(crate) fn read(args: &Settings<'_>) -> Result<Backoff, StackError> {
    let mut b = Backoff::default();
    if let Some(v) = args.get("max_retries") {
        b.max_retries = v.count(u64::from(MAX_RETRIES))? as u32;
    }
    if let Some(v) = args.get("backoff_factor") {
        b.backoff_factor = v.number()?;
    }
    if let Some(v) = args.get("initial_delay") {
        b.initial_delay = v.number()?;
    }
    if let Some(v) = args.get("max_delay") {
        b.max_delay = v.number()?;
    }
    if let Some(v) = args.get("jitter") {
        b.jitter = v.bool()?;
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_cap_and_jitter_within_a_quarter() {
        let b = Backoff {
            jitter: false,
            ..Backoff::default()
        };
        assert_eq!(
            (0..4).map(|n| b.base_delay(n)).collect::<Vec<_>>(),
            [1.0, 2.0, 4.0, 8.0]
        );
        let capped = Backoff {
            max_delay: 3.0,
            ..b
        };
        assert_eq!(capped.base_delay(5), 3.0);
        let constant = Backoff {
            backoff_factor: 0.0,
            ..b
        };
        assert_eq!(constant.base_delay(7), 1.0);
        let jittered = Backoff::default();
        for _ in 0..200 {
            let d = jittered.delay(1).as_secs_f64();
            assert!((1.5..=2.5).contains(&d), "{d}");
        }
    }

    #[test]
    fn out_of_range_settings_name_the_field() {
        let err = Backoff {
            initial_delay: -1.0,
            ..Backoff::default()
        }
        .validate("model_retry")
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "model_retry.initial_delay = -1: is out of range; allowed: a number in [0, 86400]"
        );
        assert!(
            Backoff {
                max_retries: 5000,
                ..Backoff::default()
            }
            .validate("tool_retry")
            .is_err()
        );
    }
}
