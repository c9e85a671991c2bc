//! Recovery from the provider's context-overflow errors.
//!
//! Keel's count of a request is an estimate, and a provider may reject a request that
//! the count put under every trigger. Whatever shape the rejection came in (a 400 with
//! `context_length_exceeded`, a 413, the 429 of a request over a deployment's
//! per-minute token limit, a gateway relaying Anthropic's `prompt is too long`, an
//! error event inside a 200 stream), the model adapter classifies it as
//! [`ModelErrorKind::ContextOverflow`], and this middleware:
//!
//! 1. compacts the request below three quarters of what was sent (lower still when the
//!    provider's message says by how much it overflowed: Keel's count scaled by the
//!    provider's `window / sent`), emitting `context_compacted` with
//!    `reason: "overflow"`;
//! 2. sends it once more, if it is smaller than what was sent;
//! 3. otherwise, or when the second request overflows too, returns a
//!    [`ModelErrorKind::ContextOverflow`] error whose message and
//!    [`ModelError::overflow`] say how many tokens were sent and what the model's
//!    window is (the provider's figures when its message has them, else Keel's count
//!    and the model profile's window).
//!
//! A run whose overflows compaction could not fix [`MAX_FAILED_RECOVERIES_PER_RUN`]
//! times in a row gets later overflows back at once, with no further compaction or
//! retry: nothing outside the middleware (a fallback, a retry policy, the agent loop)
//! can turn the recovery into a loop. A successful model call ends the streak.
//!
//! [`SummarizationMiddleware::overflow_stats`] counts what happened, for metrics.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use keel_core::middleware::{ModelRequest, ModelResponse, Next};
use keel_core::model::{ModelError, ModelErrorKind, OverflowFigures};
use serde::Serialize;

use crate::middleware::{Compactor, SummarizationMiddleware};

/// Overflows in a row, in one run, that compaction could not fix before the run's later
/// overflows are returned without another attempt.
pub const MAX_FAILED_RECOVERIES_PER_RUN: u32 = 2;

/// How many runs the streak counter remembers.
const RUNS: NonZeroUsize = match NonZeroUsize::new(4096) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// What the middleware did with context-overflow errors since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OverflowStats {
    /// Context-overflow errors the model returned for a request as first sent.
    pub overflows: u64,
    /// Of those, requests compacted, sent once more and answered.
    pub recovered: u64,
    /// Of those, the ones that ended in the typed error: no smaller request could be
    /// built, or the compacted request overflowed too.
    pub unrecovered: u64,
    /// Of those, the ones returned at once because their run had reached
    /// [`MAX_FAILED_RECOVERIES_PER_RUN`].
    pub bounded: u64,
}

/// The counters and the per-run streaks.
pub(crate) struct OverflowGuard {
    overflows: AtomicU64,
    recovered: AtomicU64,
    unrecovered: AtomicU64,
    bounded: AtomicU64,
    /// Set once a streak was recorded: until then a successful call takes no lock.
    tracking: AtomicBool,
    /// Failed recoveries in a row, per run id.
    streaks: parking_lot::Mutex<lru::LruCache<String, u32>>,
}

impl Default for OverflowGuard {
    fn default() -> Self {
        OverflowGuard {
            overflows: AtomicU64::new(0),
            recovered: AtomicU64::new(0),
            unrecovered: AtomicU64::new(0),
            bounded: AtomicU64::new(0),
            tracking: AtomicBool::new(false),
            streaks: parking_lot::Mutex::new(lru::LruCache::new(RUNS)),
        }
    }
}

impl OverflowGuard {
    /// A model call of `run` ended without an overflow: a success ends its streak.
    pub(crate) fn succeeded(&self, run: &str, ok: bool) {
        if ok && self.tracking.load(Ordering::Relaxed) {
            self.streaks.lock().pop(run);
        }
    }

    fn streak(&self, run: &str) -> u32 {
        if !self.tracking.load(Ordering::Relaxed) {
            return 0;
        }
        self.streaks.lock().get(run).copied().unwrap_or(0)
    }

    fn failed(&self, run: &str) -> u32 {
        self.unrecovered.fetch_add(1, Ordering::Relaxed);
        self.tracking.store(true, Ordering::Relaxed);
        let mut streaks = self.streaks.lock();
        let n = streaks.get(run).copied().unwrap_or(0) + 1;
        streaks.put(run.to_owned(), n);
        n
    }

    fn snapshot(&self) -> OverflowStats {
        OverflowStats {
            overflows: self.overflows.load(Ordering::Relaxed),
            recovered: self.recovered.load(Ordering::Relaxed),
            unrecovered: self.unrecovered.load(Ordering::Relaxed),
            bounded: self.bounded.load(Ordering::Relaxed),
        }
    }
}

/// The token limit to compact under after `sent` (Keel's count) overflowed: three
/// quarters of it, or less when the provider's figures show a larger overshoot (Keel's
/// count scaled by the provider's window over the provider's count).
pub fn overflow_target(sent: u64, provider: OverflowFigures) -> u64 {
    let quarter_off = sent.saturating_mul(3) / 4;
    let scaled = match (provider.sent_tokens, provider.window_tokens) {
        (Some(s), Some(w)) if s > w && s > 0 => {
            u64::try_from(u128::from(sent) * u128::from(w) / u128::from(s)).unwrap_or(u64::MAX)
        }
        _ => u64::MAX,
    };
    quarter_off.min(scaled).max(1)
}

/// The typed error for an overflow compaction could not fix.
fn unrecovered(last: ModelError, figures: OverflowFigures, what: &str) -> ModelError {
    let mut err = ModelError::new(
        ModelErrorKind::ContextOverflow,
        format!(
            "the request does not fit the model's context window ({figures}); {what}. The provider said: {}",
            last.message
        ),
    )
    .with_overflow(figures);
    err.raw = last.raw;
    err
}

impl SummarizationMiddleware {
    /// What the middleware did with context-overflow errors since it was built.
    pub fn overflow_stats(&self) -> OverflowStats {
        self.core.overflow().snapshot()
    }
}

impl Compactor {
    /// The model rejected `request`, sent as `sent` tokens (Keel's count), with `error`
    /// (a context overflow): compact and send once more, or return the typed error.
    pub(crate) async fn recover_overflow(
        &self,
        request: &ModelRequest,
        sent: u64,
        error: ModelError,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let guard = self.overflow();
        guard.overflows.fetch_add(1, Ordering::Relaxed);
        let run = &*request.runtime.run_id;
        let provider = error.overflow.unwrap_or_default();
        let ours = OverflowFigures {
            sent_tokens: Some(sent),
            window_tokens: request.model.profile().max_input_tokens,
        };
        let streak = guard.streak(run);
        if streak >= MAX_FAILED_RECOVERIES_PER_RUN {
            guard.bounded.fetch_add(1, Ordering::Relaxed);
            guard.unrecovered.fetch_add(1, Ordering::Relaxed);
            return Err(unrecovered(
                error,
                provider.or(ours),
                &format!(
                    "not compacted again: this run already had {streak} overflows in a row that compaction could not fix"
                ),
            ));
        }
        let target = overflow_target(sent, provider);
        tracing::warn!(
            thread_id = %request.runtime.thread_id,
            sent_tokens = sent,
            target_tokens = target,
            provider_sent = ?provider.sent_tokens,
            provider_window = ?provider.window_tokens,
            error = %error.message,
            "summarization: the model rejected the request as over its context window; compacting and sending it once more"
        );
        let forced = self.prepare_inner(request, Some(target)).await;
        let after = forced.report.tokens_after;
        if after >= sent {
            let n = guard.failed(run);
            tracing::warn!(thread_id = %request.runtime.thread_id, streak = n, "summarization: no smaller request after a context overflow");
            return Err(unrecovered(
                error,
                provider.or(ours),
                "compaction could not make it any smaller (the system prompt, tool schemas and the recent messages that must stay are all that is left)",
            ));
        }
        match next.run(forced.request).await {
            Ok(response) => {
                guard.recovered.fetch_add(1, Ordering::Relaxed);
                guard.succeeded(run, true);
                Ok(response)
            }
            Err(again) if again.kind == ModelErrorKind::ContextOverflow => {
                let n = guard.failed(run);
                tracing::warn!(thread_id = %request.runtime.thread_id, streak = n, "summarization: the compacted request overflowed too");
                let figures = again.overflow.unwrap_or_default().or(OverflowFigures {
                    sent_tokens: Some(after),
                    window_tokens: provider.window_tokens.or(ours.window_tokens),
                });
                Err(unrecovered(
                    again,
                    figures,
                    &format!(
                        "compacted from {sent} to {after} tokens (Keel's count) and sent once more, it overflowed again"
                    ),
                ))
            }
            Err(other) => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_three_quarters_or_the_provider_s_ratio() {
        assert_eq!(overflow_target(1000, OverflowFigures::default()), 750);
        // The provider counted 300k against a 200k window: two thirds of Keel's count.
        let big = OverflowFigures {
            sent_tokens: Some(300_000),
            window_tokens: Some(200_000),
        };
        assert_eq!(overflow_target(240_000, big), 160_000);
        // A small overshoot: three quarters is the lower.
        let small = OverflowFigures {
            sent_tokens: Some(201_000),
            window_tokens: Some(200_000),
        };
        assert_eq!(overflow_target(1000, small), 750);
        assert_eq!(overflow_target(0, OverflowFigures::default()), 1);
    }
}
