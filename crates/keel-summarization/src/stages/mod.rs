//! The stages of one model call, in the order
//! [`SummarizationMiddleware::prepare`] runs them: a straight line of functions over one
//! [`Call`] (the request, what was measured, what was decided). Each stage returns a
//! [`Step`]: `Break(outcome)` when the request is decided (passed through, a cached or
//! precomputed summary reused, a new summary written, or a fallback), `Continue` to hand
//! on. No stage builds the request sent: [`finish`](crate::middleware::Compactor::finish),
//! the pipeline's one exit, turns the [`Outcome`] into it and emits `context_compacted`.
//! Each of the middleware's guarantees lives in exactly one stage:
//!
//! | stage | module | hands on | guarantee |
//! |---|---|---|---|
//! | measure | [`measure`] | [`Measured`] | the whole request is counted (system prompt and tool schemas included) |
//! | decide | [`decide`] | the thread's cache key | under every trigger nothing else runs; an interrupted run's calls are answered first |
//! | reuse | [`reuse`] | the previous summary | a cached summary is used only for an unchanged prefix, and only if the result fits |
//! | plan | [`plan`] | [`Planned`] | cuts never split a tool call from its results; headroom never goes below the floor |
//! | summarize | [`summarize`] | [`Summary`] (then cached) | one summary call per thread at a time, with deadline, breaker and fallbacks |
//! | assemble | [`assemble`] | [`Outcome`] | the request sent is pair-safe and never larger than the original |
//! | precompute | [`precompute`] | a cached entry | after a call near a trigger: the crossing call's summary, written ahead in the background |
//!
//! The rules the stages apply (triggers, keep, rescue, headroom, trim) are pure
//! functions in [`crate::rules`].
//!
//! [`SummarizationMiddleware::prepare`]: crate::middleware::SummarizationMiddleware::prepare

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::sync::Arc;

use keel_core::middleware::ModelRequest;
use keel_core::tokens::TokenCounter;

use crate::cache::FlightGuard;
use crate::middleware::{Action, CompactionReport};

pub(crate) mod assemble;
pub(crate) mod decide;
pub(crate) mod measure;
pub(crate) mod memo;
pub(crate) mod plan;
pub(crate) mod precompute;
pub(crate) mod reuse;
pub(crate) mod summarize;

pub(crate) use measure::Measured;
pub(crate) use plan::Planned;
pub(crate) use summarize::Summary;

/// One model call, as every stage sees it.
pub(crate) struct Call<'r> {
    /// The request as it reached the middleware, or that request with its dangling
    /// calls answered (`decide`).
    pub request: Cow<'r, ModelRequest>,
    /// The counter for the request's model.
    pub counter: Arc<dyn TokenCounter>,
    /// What `measure` found (and `decide` added: a forced limit, the reason).
    pub measured: Measured,
    /// A token limit to get under, after the provider said the request overflowed its
    /// context window.
    pub forced: Option<u64>,
    /// The thread's summary cache key (set once `decide` lets the call go on).
    pub key: String,
    /// A speculative summary written in the background (`precompute_at`): no stream
    /// events, and no fallback when the summary model fails (the crossing call has its
    /// own).
    pub background: bool,
    /// The keep policy for this call instead of the configured one (a speculative
    /// summary keeps less, by what the thread will grow before it crosses).
    pub keep: Option<crate::rules::Limit>,
    /// A compaction asked for (`Agent::compact`): the cached summary is folded into,
    /// never served as it is.
    pub manual: bool,
    /// The thread's single flight, once taken: held until the call is finished.
    pub flight: Option<FlightGuard>,
}

impl<'r> Call<'r> {
    /// A call on `request`, measured as `measured`.
    pub fn new(
        request: &'r ModelRequest,
        counter: Arc<dyn TokenCounter>,
        measured: Measured,
    ) -> Self {
        Call {
            request: Cow::Borrowed(request),
            counter,
            measured,
            forced: None,
            key: String::new(),
            background: false,
            keep: None,
            manual: false,
            flight: None,
        }
    }
}

/// How a call ends: what [`finish`](crate::middleware::Compactor::finish) sends.
pub(crate) enum Outcome {
    /// The request goes as it came (after `decide`'s answers to dangling calls).
    Untouched {
        /// What happened.
        action: Action,
        /// Why nothing was compacted, when something failed.
        error: Option<String>,
        /// Summary model calls made before giving up.
        summary_calls: u32,
    },
    /// The request goes as `[summary, *uncovered]`, laid out and checked by
    /// [`assemble`](crate::middleware::Compactor::assemble).
    Summarized(Assembled),
}

impl Outcome {
    /// Untouched, with no summary call made.
    pub fn untouched(action: Action, error: Option<String>) -> Self {
        Outcome::Untouched {
            action,
            error,
            summary_calls: 0,
        }
    }
}

/// The messages to send in place of the request's, and the report on them.
pub(crate) struct Assembled {
    /// `[summary, *rescued, *recent]`.
    pub messages: Vec<keel_core::message::Message>,
    /// What the compaction did.
    pub report: CompactionReport,
}

/// What a stage returns: `Break` when the call is decided, else what it hands on.
pub(crate) type Step<T = ()> = ControlFlow<Outcome, T>;
