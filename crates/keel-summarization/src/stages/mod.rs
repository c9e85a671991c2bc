//! The stages of one model call, in the order [`SummarizationMiddleware::prepare`]
//! runs them. Each stage has its own module and its own output type, and each of the
//! middleware's guarantees lives in exactly one of them:
//!
//! | stage | module | output | guarantee |
//! |---|---|---|---|
//! | measure | [`measure`] | [`Measured`] | the whole request is counted (system prompt and tool schemas included) |
//! | decide | [`decide`] | [`Decision`] | under every trigger nothing else runs; an interrupted run's calls are answered first |
//! | reuse | [`reuse`] | [`Lookup`] | a cached summary is used only for an unchanged prefix, and only if the result fits |
//! | plan | [`plan`] | [`Planned`] | cuts never split a tool call from its results; headroom never goes below the floor |
//! | summarize | [`summarize`] | [`Written`] | one summary call per thread at a time, with deadline, breaker and fallbacks |
//! | precompute | [`precompute`] | a cached entry | after a call near a trigger: the crossing call's summary, written ahead in the background |
//! | assemble | [`assemble`] | [`Prepared`](crate::middleware::Prepared) | the request sent is pair-safe and never larger than the original; events are emitted |
//!
//! [`SummarizationMiddleware::prepare`]: crate::middleware::SummarizationMiddleware::prepare

use std::sync::Arc;

use keel_core::middleware::ModelRequest;
use keel_core::tokens::TokenCounter;

pub(crate) mod assemble;
pub(crate) mod decide;
pub(crate) mod measure;
pub(crate) mod memo;
pub(crate) mod plan;
pub(crate) mod precompute;
pub(crate) mod reuse;
pub(crate) mod summarize;

pub(crate) use decide::Decision;
pub(crate) use measure::Measured;
pub(crate) use plan::Planned;
pub(crate) use reuse::Lookup;
pub(crate) use summarize::Written;

/// One model call as the stages after `decide` see it.
pub(crate) struct Call<'r> {
    /// The request as it reached the middleware (dangling calls already answered).
    pub request: &'r ModelRequest,
    /// The counter for the request's model.
    pub counter: Arc<dyn TokenCounter>,
    /// What `measure` found.
    pub measured: Measured,
    /// The thread's summary cache key.
    pub key: String,
    /// A speculative summary written in the background (`precompute_at`): no stream
    /// events, and no fallback when the summary model fails (the crossing call has its
    /// own).
    pub background: bool,
    /// The keep policy for this call instead of the configured one (a speculative
    /// summary keeps less, by what the thread will grow before it crosses).
    pub keep: Option<crate::plan::Limit>,
    /// A compaction asked for (`Agent::compact`): the cached summary is folded into,
    /// never served as it is.
    pub manual: bool,
}
