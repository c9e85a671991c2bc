//! Configuration: DeerFlow's `summarization.yaml` schema plus Keel's own keys, and a
//! typed builder. Every key is written once, with its range, in one table (`fields.rs`):
//! the YAML reader (`read.rs`) fills the keys a document sets and refuses a value at its
//! line, the builder's check (`check.rs`) refuses a field outside the same range, and
//! both then run the checks that span keys, so a value rejected in YAML is rejected from
//! Rust with the same words.
//!
//! A DeerFlow `config.yaml` works as is: the document may be the bare mapping or have a
//! top-level `summarization:` key (other top-level sections are ignored, except
//! `skills.container_path`, which DeerFlow keeps there).
//!
//! ```
//! use keel_summarization::config::{ContextSize, SummarizationConfig};
//!
//! let loaded = SummarizationConfig::from_yaml_str(
//!     "summarization:\n  enabled: true\n  trigger:\n    - type: tokens\n      value: 4000\n  keep:\n    type: messages\n    value: 20\n",
//! )
//! .unwrap();
//! assert_eq!(loaded.config.trigger, vec![ContextSize::Tokens(4000)]);
//! assert_eq!(loaded.config.stickiness_headroom, Some(0.75));
//!
//! let err = SummarizationConfig::from_yaml_str("trigger:\n  type: fraction\n  value: 1.5\n").unwrap_err();
//! assert!(err.to_string().contains("trigger.value"));
//! assert!(err.to_string().contains("(0, 1]"));
//! assert!(err.to_string().contains("line 3"));
//!
//! let typed = SummarizationConfig::builder()
//!     .trigger(ContextSize::Tokens(8000))
//!     .keep(ContextSize::Messages(10))
//!     .build()
//!     .unwrap();
//! assert!(typed.enabled);
//! ```

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use crate::events::DEFAULT_COMPACTING_MESSAGE;
use crate::yaml::{self, Node};

mod check;
mod error;
mod fields;
mod read;

pub use error::ConfigError;
use error::at;
pub(crate) use error::invalid;

/// A context size: how a trigger fires or how much `keep` retains.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum ContextSize {
    /// A token count (whole request for triggers: system prompt and tools included).
    Tokens(u64),
    /// A message count.
    Messages(u64),
    /// A fraction in (0, 1] of the model's `max_input_tokens`.
    Fraction(f64),
}

impl ContextSize {
    fn kind(&self) -> &'static str {
        match self {
            ContextSize::Tokens(_) => "tokens",
            ContextSize::Messages(_) => "messages",
            ContextSize::Fraction(_) => "fraction",
        }
    }

    /// The token threshold of a fraction for a context window: `max(1, floor(window * f))`.
    pub fn fraction_tokens(fraction: f64, window: u64) -> u64 {
        ((window as f64 * fraction).floor() as u64).max(1)
    }
}

/// Which token counter the middleware uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenCounterKind {
    /// LangChain's `count_tokens_approximately` (4 characters per token, 3.3 for
    /// Anthropic models), number for number.
    Approximate,
    /// The approximate counter with script-aware weighting (CJK text is not under-counted).
    ApproximateScript,
    /// Exact OpenAI `o200k_base` counts (needs the `tiktoken` feature).
    O200kBase,
    /// Exact OpenAI `cl100k_base` counts (needs the `tiktoken` feature).
    Cl100kBase,
}

impl TokenCounterKind {
    const NAMES: &'static [&'static str] = &[
        "approximate",
        "approximate_script",
        "o200k_base",
        "cl100k_base",
    ];

    /// The name as written in YAML (`o200k_base`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Approximate => "approximate",
            Self::ApproximateScript => "approximate_script",
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
        }
    }

    fn needs_tiktoken(self) -> bool {
        matches!(self, Self::O200kBase | Self::Cl100kBase)
    }

    fn parse(s: &str) -> Option<Self> {
        match s.replace('-', "_").as_str() {
            "approximate" => Some(Self::Approximate),
            "approximate_script" => Some(Self::ApproximateScript),
            "o200k_base" => Some(Self::O200kBase),
            "cl100k_base" => Some(Self::Cl100kBase),
            _ => None,
        }
    }
}

/// The validated configuration. Field docs give each key's default; `docs/summarization.md`
/// is the full reference.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SummarizationConfig {
    /// `enabled` (YAML default `false`, as in DeerFlow; the builder defaults to `true`).
    pub enabled: bool,
    /// `model_name`: the summary model, resolved by the caller's model registry; `None`
    /// uses the run's model.
    pub model_name: Option<String>,
    /// `trigger`: compaction runs when ANY of these is reached (`>=`).
    pub trigger: Vec<ContextSize>,
    /// `keep` (default `messages: 20`).
    pub keep: ContextSize,
    /// `trim_tokens_to_summarize` (default 4000; `None` = no trimming).
    pub trim_tokens_to_summarize: Option<u64>,
    /// `summary_prompt` (must contain `{messages}`; `None` = the built-in prompt).
    pub summary_prompt: Option<String>,
    /// `preserve_recent_skill_count` (default 5; 0 disables skill rescue).
    pub preserve_recent_skill_count: u64,
    /// `preserve_recent_skill_tokens` (default 25000).
    pub preserve_recent_skill_tokens: u64,
    /// `preserve_recent_skill_tokens_per_skill` (default 5000).
    pub preserve_recent_skill_tokens_per_skill: u64,
    /// `skill_file_read_tool_names` (default `[read_file, read, view, cat]`).
    pub skill_file_read_tool_names: Vec<String>,
    /// `skills_container_path` (default `/mnt/skills`; also read from DeerFlow's
    /// top-level `skills.container_path`).
    pub skills_container_path: String,
    /// `preserve_latest_user_message` (default true): never summarize away the latest
    /// real user message.
    pub preserve_latest_user_message: bool,
    /// `preserve_dynamic_context` (default true): keep messages flagged `dynamic_context`.
    pub preserve_dynamic_context: bool,
    /// `stickiness_headroom` (default 0.75; `None` disables): the kept window must be
    /// below this fraction of every trigger.
    pub stickiness_headroom: Option<f64>,
    /// `cache_capacity` (default 1024): threads remembered by the process-wide cache.
    pub cache_capacity: usize,
    /// `token_counter` (default `approximate`).
    pub token_counter: TokenCounterKind,
    /// `compacting_message`: the text of the `context_compacting` event.
    pub compacting_message: String,
    /// `summary_max_attempts` (default 3): attempts per model for transient errors.
    pub summary_max_attempts: u32,
    /// `summary_timeout_seconds` (default 60): time allowed for one summary attempt.
    pub summary_timeout_seconds: f64,
    /// `max_summary_chars` (default 24000): a longer summary is a failure.
    pub max_summary_chars: usize,
    /// `summary_deadline_seconds` (default 90): time allowed for the whole summary call
    /// (every model and attempt). When it passes, the last good summary (or the
    /// extractive one) is used, so one summary never holds a thread for minutes.
    pub summary_deadline_seconds: f64,
    /// `summary_max_tokens` (default 1024; `null`: the model's own limit): the output
    /// token cap sent with every summary call, so a small or chatty model cannot run
    /// past the timeout writing an overlong summary.
    pub summary_max_tokens: Option<u32>,
    /// `max_chars_per_message` (default 4000): per-message cap in the summary transcript.
    pub max_chars_per_message: usize,
    /// `circuit_breaker_failures` (default 3): consecutive failed summary calls that
    /// pause summary calls for a thread.
    pub circuit_breaker_failures: u32,
    /// `circuit_breaker_cooldown_seconds` (default 300).
    pub circuit_breaker_cooldown_seconds: u64,
    /// `extractive_word_budget` (default 300): word budget of the extractive summarizer.
    pub extractive_word_budget: usize,
    /// `precompute_at` (default `null`, off, as DeerFlow's schema has no such key): once
    /// a request reaches this share of a trigger, the summary the crossing call will
    /// need is written in the background, so that call pays no summary latency. A
    /// number in (0, 1); the bundled configurations use 0.8.
    pub precompute_at: Option<f64>,
    /// `precompute_max_concurrent` (default 4): background summaries one process writes
    /// at a time; a thread that finds them all busy is summarized when it crosses.
    pub precompute_max_concurrent: usize,
    /// `compact_tool` (default false): offers the model a `compact_conversation` tool
    /// (as deepagents does); calling it compacts the thread before the model's next step,
    /// as `Agent::compact` does.
    pub compact_tool: bool,
}

impl Default for SummarizationConfig {
    fn default() -> Self {
        SummarizationConfig {
            enabled: false,
            model_name: None,
            trigger: Vec::new(),
            keep: ContextSize::Messages(20),
            trim_tokens_to_summarize: Some(4000),
            summary_prompt: None,
            preserve_recent_skill_count: 5,
            preserve_recent_skill_tokens: 25_000,
            preserve_recent_skill_tokens_per_skill: 5_000,
            skill_file_read_tool_names: ["read_file", "read", "view", "cat"]
                .map(String::from)
                .to_vec(),
            skills_container_path: "/mnt/skills".into(),
            preserve_latest_user_message: true,
            preserve_dynamic_context: true,
            stickiness_headroom: Some(0.75),
            cache_capacity: 1024,
            token_counter: TokenCounterKind::Approximate,
            compacting_message: DEFAULT_COMPACTING_MESSAGE.into(),
            summary_max_attempts: 3,
            summary_timeout_seconds: 60.0,
            max_summary_chars: 24_000,
            summary_deadline_seconds: 90.0,
            summary_max_tokens: Some(crate::summary_call::DEFAULT_MAX_OUTPUT_TOKENS),
            max_chars_per_message: 4_000,
            circuit_breaker_failures: 3,
            circuit_breaker_cooldown_seconds: 300,
            extractive_word_budget: 300,
            precompute_at: None,
            precompute_max_concurrent: DEFAULT_PRECOMPUTE_MAX_CONCURRENT,
            compact_tool: false,
        }
    }
}

/// A configuration that loads but deserves attention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The key concerned.
    pub key: String,
    /// What will happen.
    pub message: String,
    /// The line, when known.
    pub line: Option<u64>,
}

impl std::fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "summarization.{}{}: {}",
            self.key,
            at(self.line),
            self.message
        )
    }
}

/// A loaded configuration and its warnings (also logged with `tracing::warn!`).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedConfig {
    /// The configuration.
    pub config: SummarizationConfig,
    /// Things that load but deserve attention (keep >= trigger, ...).
    pub warnings: Vec<ConfigWarning>,
    /// True when the document set no summarization key at all (an empty file, or a
    /// `summarization:` section with nothing in it): everything is a default, and
    /// `enabled` defaults to false.
    pub empty: bool,
}

/// The largest configuration file [`SummarizationConfig::from_yaml_file`] reads: 1 MiB.
/// A real `summarization.yaml` is a few hundred bytes; the cap keeps a wrong path (a
/// log, `/dev/zero`) from being read whole.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The largest token or message count a size or budget accepts: 10^9. Far above any
/// context window, and small enough that sums of them never overflow.
pub const MAX_COUNT: u64 = 1_000_000_000;

/// The longest `summary_timeout_seconds`: one day.
pub const MAX_TIMEOUT_SECONDS: f64 = 86_400.0;

/// The longest `circuit_breaker_cooldown_seconds`: 30 days.
pub const MAX_COOLDOWN_SECONDS: u64 = 30 * 86_400;

/// Default of `precompute_max_concurrent`.
pub const DEFAULT_PRECOMPUTE_MAX_CONCURRENT: usize = 4;

/// The largest `precompute_max_concurrent`.
pub const MAX_PRECOMPUTE_CONCURRENT: u64 = 1024;

/// The largest `cache_capacity`: 10^7 threads.
pub const MAX_CACHE_CAPACITY: u64 = 10_000_000;

/// Every key a `summarization:` section may hold (for "did you mean" suggestions, and
/// for tests that generate configurations).
pub const KEYS: &[&str] = &[
    "enabled",
    "model_name",
    "trigger",
    "keep",
    "trim_tokens_to_summarize",
    "summary_prompt",
    "preserve_recent_skill_count",
    "preserve_recent_skill_tokens",
    "preserve_recent_skill_tokens_per_skill",
    "skill_file_read_tool_names",
    "skills_container_path",
    "preserve_latest_user_message",
    "preserve_dynamic_context",
    "stickiness_headroom",
    "cache_capacity",
    "token_counter",
    "compacting_message",
    "summary_max_attempts",
    "summary_timeout_seconds",
    "summary_deadline_seconds",
    "max_summary_chars",
    "summary_max_tokens",
    "max_chars_per_message",
    "circuit_breaker_failures",
    "circuit_breaker_cooldown_seconds",
    "extractive_word_budget",
    "precompute_at",
    "precompute_max_concurrent",
    "compact_tool",
];

impl SummarizationConfig {
    /// A typed builder (enabled, with Keel's defaults; at least one trigger needed).
    pub fn builder() -> SummarizationConfigBuilder {
        SummarizationConfigBuilder {
            config: SummarizationConfig {
                enabled: true,
                ..SummarizationConfig::default()
            },
        }
    }

    /// Reads and validates a YAML file of at most [`MAX_CONFIG_BYTES`].
    pub fn from_yaml_file(path: impl AsRef<Path>) -> Result<LoadedConfig, ConfigError> {
        Self::from_yaml_file_with_cap(path, MAX_CONFIG_BYTES)
    }

    /// Reads and validates a YAML file, refusing one larger than `cap` bytes without
    /// reading past the cap.
    pub fn from_yaml_file_with_cap(
        path: impl AsRef<Path>,
        cap: u64,
    ) -> Result<LoadedConfig, ConfigError> {
        Self::from_yaml_str(&read_config_text(path.as_ref(), cap)?)
    }

    /// Parses and validates YAML text (the bare mapping, or a document with a top-level
    /// `summarization:` key).
    pub fn from_yaml_str(text: &str) -> Result<LoadedConfig, ConfigError> {
        let root =
            yaml::parse(text).map_err(|(message, line)| ConfigError::Syntax { message, line })?;
        Self::from_node(&root)
    }

    /// Validates an already parsed document or section (the bare mapping, or a mapping
    /// with a `summarization:` key), e.g. the settings of a stack file's
    /// `- summarization:` entry; errors name the lines of the file it was parsed from.
    pub fn from_node(root: &Node) -> Result<LoadedConfig, ConfigError> {
        read::load(root)
    }

    /// Checks ranges and consistency; returns warnings. Used by YAML loading and the builder.
    pub fn validate(&self) -> Result<Vec<ConfigWarning>, ConfigError> {
        check::ranges(self)?;
        check::consistency(self, &HashMap::new())
    }

    /// Drops fraction clauses when the context window is unknown (warned, never silent),
    /// or fails when `strict`. Returns the warnings.
    pub fn check_context_window(&self, max_input_tokens: Option<u64>) -> Result<(), ConfigError> {
        if max_input_tokens.is_some() {
            return Ok(());
        }
        let key = self
            .trigger
            .iter()
            .position(|t| matches!(t, ContextSize::Fraction(_)))
            .map(|i| format!("trigger[{i}]"))
            .or_else(|| matches!(self.keep, ContextSize::Fraction(_)).then(|| "keep".to_owned()));
        match key {
            Some(key) => Err(invalid(
format!("{key}.value"),
"fraction".into(),
"the model's context window (max_input_tokens) is unknown, so a fraction cannot be resolved".into(),
"a tokens or messages size, or a model profile with max_input_tokens".into(),
None,
)),
            None => Ok(()),
        }
    }
}

/// Reads a configuration file's text, refusing one larger than `cap` bytes without
/// reading past the cap, a directory, and text that is not UTF-8 (naming the line and
/// byte offset of the first bad byte). Every `keel` command that reads a
/// `summarization.yaml` reads it with this, so the messages are the same everywhere.
pub fn read_config_text(path: &Path, cap: u64) -> Result<String, ConfigError> {
    use keel_config::ReadError;
    let io = |message: String| ConfigError::Io {
        path: path.display().to_string(),
        message,
    };
    keel_config::read_capped(path, cap).map_err(|e| match e {
        ReadError::Directory
        | ReadError::Io {
            kind: std::io::ErrorKind::IsADirectory,
            ..
        } => io("it is a directory; name a YAML file".into()),
        ReadError::Io { kind, message } => io(keel_config::describe_io(kind, &message)),
        ReadError::TooLarge => ConfigError::TooLarge {
            path: path.display().to_string(),
            cap,
        },
        ReadError::NotUtf8 { line, offset, byte } => io(format!(
            "line {line}: byte offset {offset} is 0x{byte:02x}, which is not UTF-8; save the \
             file as UTF-8"
        )),
    })
}

/// Builds a [`SummarizationConfig`] from Rust; `build` validates like the YAML loader.
#[derive(Clone, Debug)]
pub struct SummarizationConfigBuilder {
    config: SummarizationConfig,
}

macro_rules! setter {
    ($(#[$doc:meta] $name:ident: $t:ty),* $(,)?) => {
        $(#[$doc] pub fn $name(mut self, value: $t) -> Self { self.config.$name = value; self })*
    };
}

impl SummarizationConfigBuilder {
    /// Adds a trigger (triggers are OR-ed).
    pub fn trigger(mut self, size: ContextSize) -> Self {
        self.config.trigger.push(size);
        self
    }

    /// The summary model's name, resolved by the model registry given to the middleware.
    pub fn model_name(mut self, name: impl Into<String>) -> Self {
        self.config.model_name = Some(name.into());
        self
    }

    /// The summary prompt (must contain `{messages}`).
    pub fn summary_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.config.summary_prompt = Some(prompt.into());
        self
    }

    /// Where skills are mounted.
    pub fn skills_container_path(mut self, path: impl Into<String>) -> Self {
        self.config.skills_container_path = path.into();
        self
    }

    /// Stickiness headroom: a fraction in (0, 1], or `None` to disable.
    pub fn stickiness_headroom(mut self, headroom: impl Into<Option<f64>>) -> Self {
        self.config.stickiness_headroom = headroom.into();
        self
    }

    /// Speculative summaries from this share of a trigger on: a number in (0, 1), or
    /// `None` (the default) to summarize only when a trigger is crossed.
    pub fn precompute_at(mut self, share: impl Into<Option<f64>>) -> Self {
        self.config.precompute_at = share.into();
        self
    }

    /// Text of the `context_compacting` event.
    pub fn compacting_message(mut self, text: impl Into<String>) -> Self {
        self.config.compacting_message = text.into();
        self
    }

    /// Skill-read tool names.
    pub fn skill_file_read_tool_names<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Self {
        self.config.skill_file_read_tool_names = names.into_iter().map(Into::into).collect();
        self
    }

    setter! {
        /// Whether compaction runs.
        enabled: bool,
        /// How much recent history to keep.
        keep: ContextSize,
        /// Token budget of the summarized span per fold (`None`: no trimming).
        trim_tokens_to_summarize: Option<u64>,
        /// Skill rescue: how many skill files.
        preserve_recent_skill_count: u64,
        /// Skill rescue: total token budget.
        preserve_recent_skill_tokens: u64,
        /// Skill rescue: per-skill cap.
        preserve_recent_skill_tokens_per_skill: u64,
        /// Rescue the latest real user message.
        preserve_latest_user_message: bool,
        /// Rescue dynamic-context reminders.
        preserve_dynamic_context: bool,
        /// Threads remembered by the cache.
        cache_capacity: usize,
        /// Which token counter to use.
        token_counter: TokenCounterKind,
        /// Attempts per model.
        summary_max_attempts: u32,
        /// Seconds per attempt.
        summary_timeout_seconds: f64,
        /// Seconds for the whole summary call.
        summary_deadline_seconds: f64,
        /// Longest acceptable summary.
        max_summary_chars: usize,
        /// Output token cap of summary calls (`None`: the model's own limit).
        summary_max_tokens: Option<u32>,
        /// Per-message cap in the transcript.
        max_chars_per_message: usize,
        /// Failures before the circuit breaker opens.
        circuit_breaker_failures: u32,
        /// Cool-down of the circuit breaker.
        circuit_breaker_cooldown_seconds: u64,
        /// Word budget of the extractive summarizer.
        extractive_word_budget: usize,
        /// Background summaries written at a time by one process.
        precompute_max_concurrent: usize,
        /// Offer the model the `compact_conversation` tool.
        compact_tool: bool,
    }

    /// Validates and returns the configuration (warnings are logged).
    pub fn build(self) -> Result<SummarizationConfig, ConfigError> {
        for w in self.config.validate()? {
            tracing::warn!("{w}");
        }
        Ok(self.config)
    }
}
