//! [`SummarizationMiddleware`]: transient compaction in `wrap_model_call`.
//!
//! Every model call runs the stages (the crate's private `stages` module) as a straight
//! line, each one either deciding the call or handing on: **measure** the whole request
//! (system prompt and tool schemas included); **decide** (under every trigger the
//! request passes through untouched: no cache lookup, no summary); **reuse** the
//! thread's cached summary while the compressed request stays under every trigger;
//! otherwise **plan** a new cut (keep policy, rescue, stickiness headroom, pair
//! protection), **summarize** the newly evicted messages into the previous summary, and
//! **assemble** `[summary, *rescued, *recent]`. Whatever decided, one `finish` builds the
//! request sent and emits `context_compacted`. State and checkpoints are never touched:
//! only the request handed to the rest of the chain changes.
//!
//! ```
//! use std::sync::Arc;
//! use keel_core::message::Message;
//! use keel_core::middleware::{ModelRequest, Runtime};
//! use keel_core::model::ModelSettings;
//! use keel_core::state::AgentState;
//! use keel_summarization::config::{ContextSize, SummarizationConfig};
//! use keel_summarization::middleware::{Action, SummarizationMiddleware};
//! use keel_summarization::cache::SummaryCache;
//! use keel_testkit::ScriptedModel;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let config = SummarizationConfig::builder()
//!     .trigger(ContextSize::Messages(10))
//!     .keep(ContextSize::Messages(4))
//!     .build()
//!     .unwrap();
//! let mw = SummarizationMiddleware::builder(config)
//!     .extractive()
//!     .cache(Arc::new(SummaryCache::new(8)))
//!     .build()
//!     .unwrap();
//! let history: Vec<Message> = (0..12).map(|i| Message::human(format!("note {i}"))).collect();
//! let request = ModelRequest {
//!     messages: Arc::new(history),
//!     system: None,
//!     tools: Arc::new(vec![]),
//!     tool_choice: None,
//!     settings: ModelSettings::default(),
//!     model: Arc::new(ScriptedModel::new([])),
//!     state: Arc::new(AgentState::default()),
//!     runtime: Runtime::detached("thread-1"),
//! };
//! let prepared = mw.prepare(&request).await;
//! assert_eq!(prepared.report.action, Action::Compacted);
//! assert_eq!(prepared.request.messages[0].name(), Some("summary"));
//! assert_eq!(request.messages.len(), 12, "the original is untouched");
//! # });
//! ```

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use keel_core::hash::StableHasher;
use keel_core::message::Message;
use keel_core::middleware::{
    Middleware, ModelRequest, ModelResponse, Next, ToolCallRequest, ToolNext,
};
use keel_core::model::{ChatModel, ModelError, ModelErrorKind, ModelProfile};
use keel_core::store::StoreError;
use keel_core::tokens::TokenCounter;
use keel_core::tool::ToolError;
use keel_tokens::{ApproximateCounter, CachedCounter};
use serde::Serialize;
use tracing::Instrument;

use crate::cache::SummaryCache;
use crate::compact_tool;
use crate::config::{ConfigError, ContextSize, SummarizationConfig, TokenCounterKind};
use crate::events::{CompactionReason, SummarySource};
use crate::extractive::ExtractiveOptions;
use crate::overflow::OverflowGuard;
use crate::rules::{self, Limit, Planner, RescuePolicy, SkillRescue};
use crate::stages::memo::{PLAN_INDEX_LISTS, PlanIndexes, ThreadMemos};
use crate::stages::precompute::Precompute;
use crate::stages::{Call, Measured, Outcome, Step};
use crate::summary_call::{CircuitBreaker, SummaryCallOptions, SummaryCaller};
use crate::transcript::{DEFAULT_SUMMARY_PROMPT, TranscriptOptions};

/// Tokens assumed for a summary not written yet, when planning headroom for a first fold.
pub const SUMMARY_TOKENS_ESTIMATE: u64 = 500;

/// How many threads the "headroom unreachable" warning remembers.
const WARNED_THREADS: std::num::NonZeroUsize = match std::num::NonZeroUsize::new(4096) {
    Some(n) => n,
    None => std::num::NonZeroUsize::MIN,
};

pub use keel_core::model::ModelRegistry;

/// Who writes summaries: the configured summary model (or the run's model), falling
/// back to the run's model, or the extractive summarizer.
pub(crate) use keel_summary::writer::SummaryWriter;

/// What happened to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Disabled, or under every trigger: untouched.
    PassThrough,
    /// Over a trigger, but nothing could be summarized: untouched.
    NothingToSummarize,
    /// The cached summary was reused (no model call).
    CacheReused,
    /// A new summary was folded and substituted.
    Compacted,
    /// The summary failed and the uncompressed request fits the context window: untouched.
    UncompressedAfterFailure,
}

/// What the middleware did to one request: for `keel compact`, logs and tests.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompactionReport {
    /// What happened.
    pub action: Action,
    /// Why the request was considered for compaction: a trigger, or the provider's
    /// context-overflow error.
    pub reason: CompactionReason,
    /// Tokens of the whole request before.
    pub tokens_before: u64,
    /// Tokens of the whole request sent.
    pub tokens_after: u64,
    /// Messages before.
    pub messages_before: usize,
    /// Messages sent (the summary included).
    pub messages_after: usize,
    /// Where the summary came from (when one was sent).
    pub source: Option<SummarySource>,
    /// How many messages the summary represents.
    pub summarized: usize,
    /// How many older messages rescue kept verbatim.
    pub rescued: usize,
    /// How many recent messages were kept verbatim (all of them when untouched).
    pub kept: usize,
    /// Ids of the messages the summary represents (filled with `report_ids(true)`).
    pub summarized_ids: Vec<String>,
    /// Ids of older messages kept verbatim by rescue (filled with `report_ids(true)`).
    pub rescued_ids: Vec<String>,
    /// Ids of the recent messages kept verbatim (filled with `report_ids(true)`).
    pub kept_ids: Vec<String>,
    /// Summary model calls made (attempts).
    pub summary_calls: u32,
    /// Why the summary model was not used, when it failed.
    pub error: Option<String>,
    /// The summary text sent, if any.
    pub summary: Option<String>,
    /// Stickiness headroom wanted a smaller window than the floor allows: the fixed part
    /// of the request (system prompt, tool schemas, rescued skills, the summary) and the
    /// floor of the recent window are together over `headroom` x a trigger, so a later
    /// call may compact again. Logged once per thread with the figures.
    pub headroom_unreachable: bool,
    /// The summary sent was written in the background ahead of this call.
    pub precomputed: bool,
}

/// A request after the middleware's decision, and what it did.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The request to hand to the rest of the chain.
    pub request: ModelRequest,
    /// What happened.
    pub report: CompactionReport,
}

/// An error building the middleware.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `model_name` is set but cannot be resolved.
    #[error("summarization.model_name = {name:?}: {problem}")]
    Model {
        /// The configured name.
        name: String,
        /// What is wrong.
        problem: String,
    },
}

/// Why a [`SummarizationMiddleware`] built from a configuration would never compact.
///
/// [`SummarizationMiddleware::from_config`] returns it instead of a builder, and
/// [`SummarizationMiddlewareBuilder::build`] logs it through `tracing` (warning level)
/// when a middleware is built anyway.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Inactive {
    /// `summarization.enabled` is false: DeerFlow's schema default, so a
    /// `summarization.yaml` without `enabled: true` (or an empty one) ends here.
    #[error(
        "summarization.enabled is false (the default of DeerFlow's schema), so the \
         middleware never compacts and requests pass through unchanged: set \
         `enabled: true` and a trigger in the summarization.yaml"
    )]
    Disabled,
}

impl Inactive {
    /// Why a middleware with this configuration would never compact, or `None` when it
    /// can.
    pub fn of(config: &SummarizationConfig) -> Option<Inactive> {
        (!config.enabled).then_some(Inactive::Disabled)
    }
}

/// Builds a [`SummarizationMiddleware`].
pub struct SummarizationMiddlewareBuilder {
    config: SummarizationConfig,
    summarizer: Option<SummaryWriter>,
    registry: Option<Arc<dyn ModelRegistry>>,
    counter: Option<Arc<dyn TokenCounter>>,
    cache: Option<Arc<SummaryCache>>,
    breaker: Option<Arc<CircuitBreaker>>,
    profile: Option<ModelProfile>,
    report_ids: bool,
}

impl SummarizationMiddlewareBuilder {
    /// Lists message ids in every [`CompactionReport`] (`keel compact`, tests). Off by
    /// default: on a long thread, collecting ids costs more than the pass-through check.
    pub fn report_ids(mut self, on: bool) -> Self {
        self.report_ids = on;
        self
    }

    /// Summaries by this model (instead of resolving `model_name`), falling back to the
    /// run's model.
    pub fn summary_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.summarizer = Some(SummaryWriter::Model(Some(model)));
        self
    }

    /// Resolves `model_name` through this registry.
    pub fn model_registry(mut self, registry: impl ModelRegistry + 'static) -> Self {
        self.registry = Some(Arc::new(registry));
        self
    }

    /// Summaries by the deterministic extractive summarizer: no model call (offline).
    pub fn extractive(mut self) -> Self {
        self.summarizer = Some(SummaryWriter::Extractive);
        self
    }

    /// Counts tokens with this counter instead of the configured kind.
    pub fn token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = Some(counter);
        self
    }

    /// Uses this cache instead of the process-wide one (tests, isolation).
    pub fn cache(mut self, cache: Arc<SummaryCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Uses this circuit breaker instead of the process-wide one.
    pub fn circuit_breaker(mut self, breaker: Arc<CircuitBreaker>) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// The run's model profile, when known at construction: a fraction with no known
    /// context window is then an error here instead of a warning per call.
    pub fn model_profile(mut self, profile: ModelProfile) -> Self {
        self.profile = Some(profile);
        self
    }

    /// Validates and builds. A configuration that can never compact (see [`Inactive`])
    /// still builds, a middleware that passes every request through, and the reason is
    /// logged as a warning; [`SummarizationMiddleware::from_config`] returns it instead.
    pub fn build(self) -> Result<SummarizationMiddleware, BuildError> {
        let config = self.config;
        for w in config.validate()? {
            tracing::warn!("{w}");
        }
        if let Some(inactive) = Inactive::of(&config) {
            tracing::warn!(middleware = "SummarizationMiddleware", "{inactive}");
        }
        if let Some(profile) = &self.profile {
            config.check_context_window(profile.max_input_tokens)?;
        }
        let summarizer = match self.summarizer {
            Some(s) => s,
            None => resolve_summarizer(&config, self.registry.as_ref())?,
        };
        let breaker = self.breaker.unwrap_or_else(|| {
            global_breaker(
                config.circuit_breaker_failures,
                config.circuit_breaker_cooldown_seconds,
            )
        });
        let caller = SummaryCaller::with_breaker(
            SummaryCallOptions {
                max_attempts: config.summary_max_attempts,
                timeout: Duration::from_secs_f64(config.summary_timeout_seconds),
                max_output_chars: config.max_summary_chars,
                max_output_tokens: config.summary_max_tokens,
                deadline: Some(Duration::from_secs_f64(config.summary_deadline_seconds)),
                ..SummaryCallOptions::default()
            },
            breaker,
        );
        let counter = match self.counter {
            Some(c) => CounterChoice::Fixed(c),
            None => counter_for(config.token_counter)?,
        };
        let rescue = rescue_policy(&config);
        let prompt = config
            .summary_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_SUMMARY_PROMPT.to_owned());
        let recipe = summary_recipe(&config, &prompt, &summarizer);
        let precompute = Precompute::new(config.precompute_max_concurrent);
        Ok(SummarizationMiddleware {
            core: Arc::new(Compactor {
                recipe,
                precompute,
                cache: self
                    .cache
                    .unwrap_or_else(|| SummaryCache::global(config.cache_capacity)),
                prompt,
                config,
                summarizer,
                counter,
                caller,
                rescue,
                warned_fraction: AtomicBool::new(false),
                warned_headroom: parking_lot::Mutex::new(lru::LruCache::new(WARNED_THREADS)),
                threads: ThreadMemos::new(WARNED_THREADS),
                plan_indexes: PlanIndexes::new(PLAN_INDEX_LISTS),
                report_ids: self.report_ids,
                overflow: OverflowGuard::default(),
            }),
        })
    }
}

/// The summarizer a configuration names: the run's model, or `model_name` resolved
/// with the registry (an error when it has no such model, or there is no registry).
fn resolve_summarizer(
    config: &SummarizationConfig,
    registry: Option<&Arc<dyn ModelRegistry>>,
) -> Result<SummaryWriter, BuildError> {
    let refused = |name: &String, problem: &str| BuildError::Model {
        name: name.clone(),
        problem: problem.into(),
    };
    match (&config.model_name, registry) {
        (None, _) => Ok(SummaryWriter::Model(None)),
        (Some(name), Some(registry)) => registry
            .resolve(name)
            .map(|m| SummaryWriter::Model(Some(m)))
            .ok_or_else(|| refused(name, "the model registry has no model by that name")),
        (Some(name), None) => Err(refused(
            name,
            "a summary model is named but no model registry was given (use model_registry, summary_model, or set model_name: null to use the run's model)",
        )),
    }
}

/// What a compaction rescues from the summarized span, as the configuration says.
fn rescue_policy(config: &SummarizationConfig) -> RescuePolicy {
    RescuePolicy {
        latest_user_message: config.preserve_latest_user_message,
        dynamic_context: config.preserve_dynamic_context,
        skills: SkillRescue {
            max_count: config.preserve_recent_skill_count,
            max_tokens: config.preserve_recent_skill_tokens,
            max_tokens_per_skill: config.preserve_recent_skill_tokens_per_skill,
            tool_names: config.skill_file_read_tool_names.clone(),
            container_path: config.skills_container_path.clone(),
        },
    }
}

/// The process-wide circuit breaker for these settings: middleware rebuilt every run
/// (as DeerFlow does) share one, and a middleware configured differently gets its own
/// instead of silently inheriting the first configuration's threshold and cool-down.
fn global_breaker(threshold: u32, cooldown_secs: u64) -> Arc<CircuitBreaker> {
    type Breakers = parking_lot::Mutex<HashMap<(u32, u64), Arc<CircuitBreaker>>>;
    static GLOBAL: OnceLock<Breakers> = OnceLock::new();
    GLOBAL
        .get_or_init(Default::default)
        .lock()
        .entry((threshold, cooldown_secs))
        .or_insert_with(|| {
            Arc::new(CircuitBreaker::new(
                threshold,
                Duration::from_secs(cooldown_secs),
                10_000,
            ))
        })
        .clone()
}

#[derive(Clone)]
enum CounterChoice {
    Fixed(Arc<dyn TokenCounter>),
    /// LangChain's approximate counter: 3.3 characters per token for Anthropic models.
    Approximate {
        script: bool,
    },
}

fn counter_for(kind: TokenCounterKind) -> Result<CounterChoice, BuildError> {
    match kind {
        TokenCounterKind::Approximate => Ok(CounterChoice::Approximate { script: false }),
        TokenCounterKind::ApproximateScript => Ok(CounterChoice::Approximate { script: true }),
        #[cfg(feature = "tiktoken")]
        TokenCounterKind::O200kBase | TokenCounterKind::Cl100kBase => {
            let encoding = if kind == TokenCounterKind::O200kBase {
                keel_tokens::Encoding::O200kBase
            } else {
                keel_tokens::Encoding::Cl100kBase
            };
            let exact = keel_tokens::TiktokenCounter::new(encoding).map_err(|e| {
                BuildError::Config(crate::config::invalid(
                    "token_counter".into(),
                    encoding.name().into(),
                    format!("the tokenizer could not be loaded: {e}"),
                    "approximate, approximate_script, o200k_base, cl100k_base".into(),
                    None,
                ))
            })?;
            Ok(CounterChoice::Fixed(Arc::new(CachedCounter::new(exact))))
        }
        #[cfg(not(feature = "tiktoken"))]
        TokenCounterKind::O200kBase | TokenCounterKind::Cl100kBase => {
            Err(BuildError::Config(crate::config::invalid(
                "token_counter".into(),
                format!("{kind:?}"),
                "exact counting needs keel-summarization's `tiktoken` feature".into(),
                "approximate or approximate_script".into(),
                None,
            )))
        }
    }
}

/// Process-wide cached counters, so a middleware rebuilt every run (as DeerFlow does)
/// still counts each message once.
fn shared_approximate(anthropic: bool, script: bool) -> Arc<dyn TokenCounter> {
    static COUNTERS: OnceLock<[Arc<dyn TokenCounter>; 4]> = OnceLock::new();
    let all = COUNTERS.get_or_init(|| {
        let mk =
            |c: ApproximateCounter| -> Arc<dyn TokenCounter> { Arc::new(CachedCounter::new(c)) };
        [
            mk(ApproximateCounter::langchain()),
            mk(ApproximateCounter::anthropic()),
            mk(ApproximateCounter::langchain().script_aware()),
            mk(ApproximateCounter::anthropic().script_aware()),
        ]
    });
    all[usize::from(anthropic) + 2 * usize::from(script)].clone()
}

/// Transient, pair-safe summarization. See the [module docs](self).
///
/// A cheap handle: what it decides with is shared with the background tasks that write
/// speculative summaries (`precompute_at`).
pub struct SummarizationMiddleware {
    pub(crate) core: Arc<Compactor>,
}

/// Everything a compaction decides with, shared by the middleware and its background
/// summaries. The stages ([`crate::stages`]) are methods of this that read it through
/// the accessors below, never its fields.
pub(crate) struct Compactor {
    config: SummarizationConfig,
    prompt: String,
    summarizer: SummaryWriter,
    counter: CounterChoice,
    caller: SummaryCaller,
    cache: Arc<SummaryCache>,
    rescue: RescuePolicy,
    warned_fraction: AtomicBool,
    /// Threads already warned that headroom is unreachable (bounded: a warning per
    /// thread, not per call).
    warned_headroom: parking_lot::Mutex<lru::LruCache<String, ()>>,
    /// What earlier calls learned about each list (bounded, keyed by lineage), so a call
    /// on a long thread costs what is new: see [`crate::stages::memo`].
    threads: ThreadMemos,
    /// Planning indexes of recent lists, kept up to date from half a trigger on: see
    /// [`crate::stages::memo::PlanIndexes`].
    plan_indexes: PlanIndexes,
    report_ids: bool,
    /// Recovery from the provider's context-overflow errors: counters and the per-run
    /// bound ([`crate::overflow`]).
    overflow: OverflowGuard,
    /// Appended to the thread id in the summary cache (with the run's model and counter,
    /// per request): a stable hash of the settings that shape a summary's text, so a
    /// summary made under another prompt or summary model (say, read back from the
    /// database after a configuration change) is never reused.
    recipe: StableHash,
    /// Speculative summaries in flight (`precompute_at`).
    precompute: Precompute,
}

/// A 64-bit FNV-1a hash ([`keel_core::hash`]) over length-prefixed fields: the same on
/// every toolchain, platform and release (the summary cache key is written into the
/// database, so a hasher whose output may change between builds would silently drop
/// every stored summary, or worse, match the wrong one). Each field is its length as a
/// little-endian `u64`, then its bytes.
#[derive(Clone, Copy)]
struct StableHash(StableHasher);

impl StableHash {
    fn new() -> Self {
        StableHash(StableHasher::new())
    }
    fn bytes(mut self, bytes: &[u8]) -> Self {
        self.0.write(&(bytes.len() as u64).to_le_bytes());
        self.0.write(bytes);
        self
    }
    /// The hash of the fields so far.
    fn value(self) -> u64 {
        self.0.finish()
    }
    fn str(self, s: &str) -> Self {
        self.bytes(s.as_bytes())
    }
    fn num(self, n: Option<u64>) -> Self {
        match n {
            Some(n) => self.bytes(&[1]).bytes(&n.to_le_bytes()),
            None => self.bytes(&[0]),
        }
    }
}

/// The part of the cache key fixed at build: everything that shapes a summary's text
/// and does not depend on the request. The prompt, who writes summaries (extractive,
/// the configured summary model, or "the run's model", resolved per request by
/// [`SummarizationMiddleware::cache_key`]), the trim budget, the word budget, the
/// output limits and the transcript cap. The counter (which decides the cut) is added
/// per request, by name.
fn summary_recipe(
    config: &SummarizationConfig,
    prompt: &str,
    summarizer: &SummaryWriter,
) -> StableHash {
    let h = StableHash::new().str(prompt);
    let h = match summarizer {
        SummaryWriter::Extractive => h.str("extractive"),
        SummaryWriter::Model(Some(m)) => h
            .str("model")
            .str(&m.profile().provider)
            .str(&m.profile().name),
        SummaryWriter::Model(None) => h.str("run-model"),
    };
    h.num(config.trim_tokens_to_summarize)
        .num(Some(config.extractive_word_budget as u64))
        .num(Some(config.max_summary_chars as u64))
        .num(config.summary_max_tokens.map(u64::from))
        .num(Some(config.max_chars_per_message as u64))
}

impl SummarizationMiddleware {
    /// A builder for `config`, or why a middleware with it would never compact
    /// (`enabled: false`, DeerFlow's default): the way to build from a configuration a
    /// user wrote, so a file that turns compaction off is not silently a no-op.
    ///
    /// ```
    /// use keel_summarization::config::SummarizationConfig;
    /// use keel_summarization::middleware::{Inactive, SummarizationMiddleware};
    ///
    /// // A DeerFlow file without `enabled: true`.
    /// let off = SummarizationConfig::from_yaml_str("summarization:\n  keep: {type: messages, value: 4}\n")?;
    /// assert_eq!(SummarizationMiddleware::from_config(off.config).err(), Some(Inactive::Disabled));
    ///
    /// let on = SummarizationConfig::from_yaml_str(
    ///     "summarization:\n  enabled: true\n  trigger: {type: messages, value: 20}\n",
    /// )?;
    /// let middleware = SummarizationMiddleware::from_config(on.config)
    ///     .map_err(|inactive| inactive.to_string())?
    ///     .extractive()
    ///     .build()?;
    /// assert!(middleware.inactive().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_config(
        config: SummarizationConfig,
    ) -> Result<SummarizationMiddlewareBuilder, Inactive> {
        match Inactive::of(&config) {
            Some(inactive) => Err(inactive),
            None => Ok(Self::builder(config)),
        }
    }

    /// Why this middleware never compacts, or `None` when it can.
    pub fn inactive(&self) -> Option<Inactive> {
        Inactive::of(&self.core.config)
    }

    /// A builder for `config` (validated again at `build`). Builds whatever the
    /// configuration says, `enabled: false` included (with a warning);
    /// [`Self::from_config`] refuses that with the reason.
    pub fn builder(config: SummarizationConfig) -> SummarizationMiddlewareBuilder {
        SummarizationMiddlewareBuilder {
            config,
            summarizer: None,
            registry: None,
            counter: None,
            cache: None,
            breaker: None,
            profile: None,
            report_ids: false,
        }
    }

    /// The summary cache key of a thread for this request: the thread id and a stable
    /// hash of the recipe, the model that will write the summary (the run's model when
    /// no summary model is configured) and the counter in use.
    pub fn cache_key(
        &self,
        thread: &str,
        request: &ModelRequest,
        counter: &dyn TokenCounter,
    ) -> String {
        self.core.cache_key(thread, request, counter)
    }

    /// The configuration.
    pub fn config(&self) -> &SummarizationConfig {
        &self.core.config
    }

    /// The cache in use.
    pub fn cache(&self) -> &Arc<SummaryCache> {
        &self.core.cache
    }

    /// The counter for a request's model.
    pub fn counter_for(&self, profile: &ModelProfile) -> Arc<dyn TokenCounter> {
        self.core.counter_for(profile)
    }

    /// Decides what to send for `request` (the whole middleware except calling the
    /// model), emitting the stream events. `keel compact` calls this directly.
    ///
    /// With `precompute_at` set, a request past that share of a trigger also starts
    /// the background summary the crossing call will need (see [`Self::settle`]).
    pub async fn prepare(&self, request: &ModelRequest) -> Prepared {
        let prepared = self.core.prepare_inner(request, None).await;
        Compactor::maybe_precompute(&self.core, request, &prepared.report).await;
        prepared
    }

    /// Waits until no background summary of `thread` is being written (replays and
    /// tests that want the same requests whatever the timing; a server never waits).
    pub async fn settle(&self, thread: &str) {
        self.core.precompute.settle(thread).await;
    }

    /// Background summaries written so far by this middleware (each one a fold).
    pub fn precomputed_count(&self) -> u64 {
        self.core.precompute.written()
    }
}

impl Compactor {
    /// The summary cache key of a thread for this request: the thread id and a stable
    /// hash of the recipe, the model that will write the summary (the run's model when
    /// no summary model is configured) and the counter in use.
    pub(crate) fn cache_key(
        &self,
        thread: &str,
        request: &ModelRequest,
        counter: &dyn TokenCounter,
    ) -> String {
        let mut h = self.recipe.str(counter.name());
        if let SummaryWriter::Model(None) = self.summarizer {
            let profile = request.model.profile();
            h = h.str(&profile.provider).str(&profile.name);
        }
        format!("{thread}#{:016x}", h.value())
    }

    /// The counter for a request's model.
    pub(crate) fn counter_for(&self, profile: &ModelProfile) -> Arc<dyn TokenCounter> {
        match &self.counter {
            CounterChoice::Fixed(c) => c.clone(),
            CounterChoice::Approximate { script } => {
                shared_approximate(profile.provider.eq_ignore_ascii_case("anthropic"), *script)
            }
        }
    }

    /// Whether compaction is on (`enabled`).
    pub(crate) fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The configured triggers, unresolved.
    pub(crate) fn configured_triggers(&self) -> &[ContextSize] {
        &self.config.trigger
    }

    /// The configured keep policy, unresolved.
    pub(crate) fn keep_policy(&self) -> ContextSize {
        self.config.keep
    }

    /// `stickiness_headroom`.
    pub(crate) fn headroom(&self) -> Option<f64> {
        self.config.stickiness_headroom
    }

    /// `trim_tokens_to_summarize`: what the summary call reads of the evicted messages.
    pub(crate) fn trim_budget(&self) -> Option<u64> {
        self.config.trim_tokens_to_summarize
    }

    /// `precompute_at`: the share of a trigger from which summaries are written ahead.
    pub(crate) fn precompute_at(&self) -> Option<f64> {
        self.config.precompute_at
    }

    /// `summary_deadline_seconds`.
    pub(crate) fn summary_deadline_secs(&self) -> f64 {
        self.config.summary_deadline_seconds
    }

    /// The text of the `context_compacting` event.
    pub(crate) fn compacting_message(&self) -> &str {
        &self.config.compacting_message
    }

    /// The summary prompt.
    pub(crate) fn prompt(&self) -> &str {
        &self.prompt
    }

    /// Who writes summaries.
    pub(crate) fn summarizer(&self) -> &SummaryWriter {
        &self.summarizer
    }

    /// The summary model caller (deadline, retries, breaker).
    pub(crate) fn caller(&self) -> &SummaryCaller {
        &self.caller
    }

    /// The summary cache.
    pub(crate) fn cache(&self) -> &SummaryCache {
        &self.cache
    }

    /// What rescue keeps besides the recent window.
    pub(crate) fn rescue(&self) -> &RescuePolicy {
        &self.rescue
    }

    /// What earlier calls learned about each list.
    pub(crate) fn memos(&self) -> &ThreadMemos {
        &self.threads
    }

    /// The planning indexes of recent lists.
    pub(crate) fn plan_indexes(&self) -> &PlanIndexes {
        &self.plan_indexes
    }

    /// Whether reports list message ids.
    pub(crate) fn report_ids(&self) -> bool {
        self.report_ids
    }

    /// Speculative summaries in flight.
    pub(crate) fn precompute(&self) -> &Precompute {
        &self.precompute
    }

    /// Recovery from context-overflow errors.
    pub(crate) fn overflow(&self) -> &OverflowGuard {
        &self.overflow
    }

    pub(crate) fn warn_fraction(&self, key: &str) {
        if !self.warned_fraction.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "summarization.{key}: a fraction needs the model's context window (max_input_tokens), which is unknown; the fraction clause is ignored (a fraction keep falls back to the last {} messages)",
                rules::DEFAULT_MESSAGES_TO_KEEP
            );
        }
    }

    /// Once per thread: headroom wanted the window below `headroom` x a trigger, and the
    /// floor stopped it. Names the figures, so the fix (a larger trigger, a smaller
    /// system prompt or skill budget) is obvious.
    pub(crate) fn warn_headroom(
        &self,
        thread: &str,
        headroom: f64,
        m: &Measured,
        planner: &Planner<'_>,
        plan: &rules::Plan,
        summary_tokens: u64,
    ) {
        if self
            .warned_headroom
            .lock()
            .put(thread.to_owned(), ())
            .is_some()
        {
            return;
        }
        let (kept_tokens, kept_messages) = planner.kept_size(plan, summary_tokens);
        let targets: Vec<String> = m
            .triggers
            .iter()
            .map(|t| match *t {
                Limit::Tokens(n) => format!("{:.0} tokens", headroom * n as f64),
                Limit::Messages(n) => format!("{:.0} messages", headroom * n as f64),
            })
            .collect();
        tracing::warn!(
            thread_id = %thread,
            fixed_tokens = m.fixed,
            kept_tokens,
            kept_messages,
            "summarization: stickiness headroom ({headroom}) wants the request below {} but the system prompt and tool schemas ({} tokens) plus the floor of the recent window (summary, rescued and recent messages: {kept_tokens} tokens in {kept_messages} messages) do not fit; the window stays at its floor and later calls may compact again. Raise the trigger, or shrink the system prompt, tool schemas or skill budgets.",
            targets.join(" and "),
            m.fixed,
        );
    }

    /// The stages in order (see [`crate::stages`]); `forced` is a token limit to get
    /// under, after the provider said the request overflowed its context.
    pub(crate) async fn prepare_inner(
        &self,
        request: &ModelRequest,
        forced: Option<u64>,
    ) -> Prepared {
        self.prepare_with(request, forced, false).await
    }

    /// [`prepare_stages`](Self::prepare_stages) inside a `compaction` span; `manual`: a
    /// compaction asked for, which folds what left the kept window whatever the triggers
    /// say, even when the cached summary would still serve.
    pub(crate) async fn prepare_with(
        &self,
        request: &ModelRequest,
        forced: Option<u64>,
        manual: bool,
    ) -> Prepared {
        let span = crate::telemetry::compaction_span(forced);
        let prepared = self
            .prepare_stages(request, forced, manual)
            .instrument(span.clone())
            .await;
        self.record_compaction(&span, request, forced, &prepared.report);
        prepared
    }

    /// Measures the request, runs the stages, and finishes with their outcome: the
    /// one way out.
    async fn prepare_stages(
        &self,
        request: &ModelRequest,
        forced: Option<u64>,
        manual: bool,
    ) -> Prepared {
        let counter = self.counter_for(request.model.profile());
        // 1. measure
        let measured = self.measure(request, counter.as_ref());
        let mut call = Call::new(request, counter, measured);
        call.forced = forced;
        call.manual = manual;
        let (ControlFlow::Break(outcome) | ControlFlow::Continue(outcome)) =
            self.stages(&mut call).await;
        self.finish(&call, outcome)
    }

    /// The stages after `measure`, in order (see [`crate::stages`]): each one decides
    /// the call (`Break`, ending the line) or hands on.
    async fn stages(&self, call: &mut Call<'_>) -> Step<Outcome> {
        // 2. decide
        self.decide(call)?;
        // Boxed: a call that passes through (most calls) never carries the larger state
        // of the stages that may wait.
        Box::pin(self.compact(call)).await
    }

    /// The stages after `decide`, for a call that compacts.
    async fn compact(&self, call: &mut Call<'_>) -> Step<Outcome> {
        // 3. reuse: the cached summary, or the previous summary to fold into. Concurrent
        // calls on this thread wait for the single flight, then usually find the
        // leader's fresh summary.
        let seen = self.lookup(call, None).await?;
        call.flight = Some(self.cache.single_flight(&call.key).await);
        let cached = self.lookup(call, seen.as_ref()).await?;
        // 4. plan
        let planned = self.plan_cut(call, cached.as_deref());
        self.keep_previous(call, cached.as_deref(), &planned)?;
        // 5. summarize, one writer per thread across processes sharing the store
        let (entry, written) = self.write(call, cached.as_ref(), &planned).await?;
        // 6. assemble
        ControlFlow::Continue(self.assembled(call, &entry, written, planned.headroom_unreachable))
    }

    pub(crate) fn extractive_options(&self) -> ExtractiveOptions {
        ExtractiveOptions {
            word_budget: self.config.extractive_word_budget,
            ..ExtractiveOptions::default()
        }
    }

    pub(crate) fn transcript_options(&self) -> TranscriptOptions {
        TranscriptOptions {
            max_chars_per_message: self.config.max_chars_per_message,
        }
    }
}

#[keel_core::middleware]
impl Middleware for SummarizationMiddleware {
    fn name(&self) -> &str {
        "SummarizationMiddleware"
    }

    /// Answers the `compact_conversation` tool (`compact_tool: true`); the compaction
    /// runs on the next model call.
    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        if self.core.config.compact_tool && request.call.name == compact_tool::COMPACT_TOOL {
            return Ok(
                Message::tool(request.call.id.clone(), compact_tool::COMPACT_TOOL_ANSWER)
                    .with_name(compact_tool::COMPACT_TOOL),
            );
        }
        next.run(request).await
    }

    /// A compaction asked for: folds what left the kept window into the thread's
    /// summary now (through the thread's single flight, with the usual events) and
    /// reports it. The report's `compacted_through` (the thread's message count and last
    /// message id) is recorded in the thread's state by the agent, so later calls send
    /// the compacted request even under the triggers. `None` when disabled or when
    /// nothing would be summarized.
    async fn compact_thread(
        &self,
        request: &ModelRequest,
    ) -> Result<Option<serde_json::Value>, ModelError> {
        if !self.core.config.enabled || request.messages.is_empty() {
            return Ok(None);
        }
        let prepared = self.core.prepare_with(request, None, true).await;
        let report = &prepared.report;
        if report.source.is_none() {
            return Ok(None);
        }
        let mut value = serde_json::to_value(report).unwrap_or(serde_json::Value::Null);
        if let (Some(map), Some(mark)) =
            (value.as_object_mut(), compact_tool::mark(&request.messages))
        {
            map.insert(keel_core::state::COMPACTED_THROUGH.to_owned(), mark);
        }
        Ok(Some(value))
    }

    /// Cached summaries of the thread, in process and in the second level, after any
    /// background summary of the thread is stopped (it would write one back).
    async fn delete_thread_data(&self, thread_id: &str) -> Result<u64, StoreError> {
        self.core.precompute.cancel(thread_id).await;
        self.core.cache.purge_thread(thread_id).await
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let request = if self.core.config.compact_tool {
            compact_tool::with_spec(request)
        } else {
            request
        };
        if self.core.config.compact_tool
            && self.core.config.enabled
            && compact_tool::asked(&request.messages)
        {
            // The model called compact_conversation on its previous step.
            let prepared = self.core.prepare_with(&request, None, true).await;
            let mut response = next.run(prepared.request).await?;
            if let Some(mark) = compact_tool::mark(&request.messages) {
                response
                    .update
                    .values
                    .insert(keel_core::state::COMPACTED_THROUGH.to_owned(), mark);
            }
            return Ok(response);
        }
        let prepared = self.prepare(&request).await;
        let sent = prepared.report.tokens_after;
        match next.clone().run(prepared.request).await {
            Err(e) if e.kind == ModelErrorKind::ContextOverflow && self.core.config.enabled => {
                self.core.recover_overflow(&request, sent, e, next).await
            }
            other => {
                self.core
                    .overflow
                    .succeeded(&request.runtime.run_id, other.is_ok());
                other
            }
        }
    }
}

/// Built with the agent (keel-agent's `AgentBuilder::layer`): a builder given no
/// [`model_profile`](SummarizationMiddlewareBuilder::model_profile) checks its triggers
/// against the agent's model, so a fraction of an unknown context window fails when
/// the agent is built.
impl keel_core::layer::Layer for SummarizationMiddlewareBuilder {
    fn layer(
        self: Box<Self>,
        agent: &keel_core::layer::AgentFacts,
    ) -> Result<Arc<dyn keel_core::middleware::Middleware>, keel_core::layer::LayerError> {
        let mut builder = *self;
        if builder.profile.is_none() {
            builder.profile = Some(agent.model_profile.clone());
        }
        builder
            .build()
            .map(|m| Arc::new(m) as Arc<dyn keel_core::middleware::Middleware>)
            .map_err(|e| keel_core::layer::LayerError {
                middleware: "SummarizationMiddleware".into(),
                message: e.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pass-through calls keep a planning index only from half a trigger on, and only
    /// for a list that carries its lineage (an agent state's own list).
    #[tokio::test]
    async fn pass_through_keeps_an_index_from_half_a_trigger_on() {
        use crate::config::ContextSize;
        use keel_core::message::Message;
        use keel_core::middleware::{ModelRequest, Runtime};
        use keel_core::model::{ChatModel, ModelSettings};
        use keel_core::state::AgentState;
        let config = SummarizationConfig::builder()
            .trigger(ContextSize::Messages(10))
            .build()
            .unwrap();
        let mw = SummarizationMiddleware::builder(config)
            .extractive()
            .build()
            .unwrap();
        let model: Arc<dyn ChatModel> = Arc::new(keel_testkit::ScriptedModel::new([]));
        let request = |state: &AgentState| ModelRequest {
            messages: state.messages.clone(),
            system: None,
            tools: Arc::new(Vec::new()),
            tool_choice: None,
            settings: ModelSettings::default(),
            model: model.clone(),
            state: Arc::new(state.clone()),
            runtime: Runtime::detached("t"),
        };
        let mut state =
            AgentState::with_messages((0..4).map(|i| Message::human(format!("m{i}"))).collect());
        mw.prepare(&request(&state)).await;
        assert_eq!(
            mw.core.plan_indexes.len(),
            0,
            "4 of 10 messages: no index yet"
        );
        Arc::make_mut(&mut state.messages).push(Message::ai("a5"));
        mw.prepare(&request(&state)).await;
        assert_eq!(mw.core.plan_indexes.len(), 1, "5 of 10 messages: indexed");
        let mut detached = request(&state);
        detached.messages = Arc::new(state.messages.to_vec());
        let other = SummarizationMiddleware::builder(mw.config().clone())
            .extractive()
            .build()
            .unwrap();
        other.prepare(&detached).await;
        assert_eq!(other.core.plan_indexes.len(), 0, "a list without lineage");
    }

    #[test]
    fn breakers_are_shared_per_setting_not_per_process() {
        let a = global_breaker(3, 300);
        assert!(Arc::ptr_eq(&a, &global_breaker(3, 300)));
        assert!(!Arc::ptr_eq(&a, &global_breaker(1, 10)));
    }

    #[test]
    fn the_recipe_hash_is_stable_across_builds() {
        // Written into the database as part of the cache key: this value must never
        // change for the same settings (a golden value, not a recomputation).
        let config = SummarizationConfig::default();
        let h = summary_recipe(&config, "{messages}", &SummaryWriter::Extractive);
        assert_eq!(format!("{:016x}", h.value()), "72905f82ad3d5146");
        let other = summary_recipe(&config, "{messages} ", &SummaryWriter::Extractive);
        assert_ne!(h.value(), other.value());
        assert_ne!(
            h.value(),
            summary_recipe(&config, "{messages}", &SummaryWriter::Model(None)).value()
        );
        // The per-request parts of the key (counter, run's model), pinned too.
        let h = summary_recipe(&config, "{messages}", &SummaryWriter::Model(None))
            .str("approximate")
            .str("openai")
            .str("gpt-4o");
        assert_eq!(format!("{:016x}", h.value()), "b5831357e7801d9d");
    }
}
