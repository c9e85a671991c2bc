//! Configuration: DeerFlow's `summarization.yaml` schema plus Keel's own keys, and a
//! typed builder. Both paths go through one validation, so a value rejected in YAML is
//! rejected from Rust with the same message.
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
use crate::transcript::MESSAGES_SLOT;
use crate::yaml::{self, Node, Yaml};

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

/// A configuration error: which key, what value, what is allowed, and where.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
    /// The file is larger than the cap.
    #[error(
        "{path} is larger than {cap} bytes, the cap on a configuration file; is it the right \
         file? If so, raise the cap (keel: --max-config-bytes BYTES or KEEL_MAX_CONFIG_BYTES)"
    )]
    TooLarge {
        /// The path.
        path: String,
        /// The cap, in bytes.
        cap: u64,
    },
    /// The text is not valid YAML.
    #[error("invalid YAML{}: {message}", at(*line))]
    Syntax {
        /// The parser's message.
        message: String,
        /// The line, when known.
        line: Option<u64>,
    },
    /// A key has a value outside its allowed range or of the wrong type: the shared
    /// [`keel_config::ConfigError`], its key written as the user wrote it
    /// (`summarization.trigger[1].value`).
    #[error(transparent)]
    Invalid(keel_config::ConfigError),
    /// A key that does not exist.
    #[error("unknown key summarization.{key}{}{}", at(*line), suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownKey {
        /// The key path.
        key: String,
        /// The nearest known key, when one is close.
        suggestion: Option<String>,
        /// The line.
        line: Option<u64>,
    },
}

/// A refused value at `key` (relative to the section), with its line when it came from
/// YAML.
pub(crate) fn invalid(
    key: String,
    value: String,
    problem: String,
    allowed: String,
    line: Option<u64>,
) -> ConfigError {
    ConfigError::Invalid(keel_config::ConfigError::at(
        key_path(&key),
        value,
        problem,
        allowed,
        line.unwrap_or(0),
    ))
}

/// The key as the user wrote it: `summarization.<key>`, except for keys of DeerFlow's
/// other top-level sections (`skills.container_path`).
fn key_path(key: &str) -> String {
    if key == "(root)" {
        "the document".to_owned()
    } else if key.starts_with("skills.") {
        key.to_owned()
    } else {
        format!("summarization.{key}")
    }
}

fn at(line: Option<u64>) -> String {
    line.filter(|l| *l > 0)
        .map(|l| format!(" (line {l})"))
        .unwrap_or_default()
}

/// An I/O error in words, without the OS error number.
fn describe_io(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::NotFound => "no such file".to_owned(),
        ErrorKind::PermissionDenied => "permission denied".to_owned(),
        ErrorKind::IsADirectory => "it is a directory; name a YAML file".to_owned(),
        _ => {
            let text = error.to_string();
            text.split(" (os error").next().unwrap_or(&text).to_owned()
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

const WHOLE_1: &str = "a whole number in [1, 1000000000]";
const WHOLE_0: &str = "a whole number in [0, 1000000000]";

/// The longest `summary_timeout_seconds`: one day.
pub const MAX_TIMEOUT_SECONDS: f64 = 86_400.0;

/// The longest `circuit_breaker_cooldown_seconds`: 30 days.
pub const MAX_COOLDOWN_SECONDS: u64 = 30 * 86_400;

/// The allowed values of `precompute_at`.
const PRECOMPUTE_AT_RANGE: &str = "a number in (0, 1), or null to disable";

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

fn suggest(key: &str, known: &[&str]) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::normalized_damerau_levenshtein(key, k), *k))
        .filter(|(score, _)| *score >= 0.5)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_owned())
}

struct Ctx<'a> {
    key: &'a str,
    node: &'a Node,
}

impl Ctx<'_> {
    fn invalid(&self, problem: &str, allowed: &str) -> ConfigError {
        invalid(
            self.key.to_owned(),
            self.node.value.show(),
            problem.to_owned(),
            allowed.to_owned(),
            Some(self.node.line),
        )
    }

    fn bool(&self) -> Result<bool, ConfigError> {
        match &self.node.value {
            Yaml::Bool(b) => Ok(*b),
            _ => Err(self.invalid("must be a boolean", "true or false")),
        }
    }

    /// A whole number `>= min`; booleans, floats and strings are rejected.
    fn int(&self, min: u64, allowed: &str) -> Result<u64, ConfigError> {
        match &self.node.value {
            Yaml::Int(i) if *i >= i128::from(min) => {
                u64::try_from(*i).map_err(|_| self.invalid("is too large", allowed))
            }
            Yaml::Int(_) => Err(self.invalid(
                if min == 0 {
                    "must not be negative"
                } else {
                    "must be positive"
                },
                allowed,
            )),
            Yaml::Bool(_) => Err(self.invalid("is a boolean, not a number", allowed)),
            Yaml::Float(f) if !f.is_finite() => {
                Err(self.invalid("is not a finite number", allowed))
            }
            Yaml::Float(f) if f.fract() == 0.0 && *f > 0.0 => {
                Err(self.invalid("is too large", allowed))
            }
            Yaml::Float(f) if f.fract() == 0.0 => Err(self.invalid(
                if min == 0 {
                    "must not be negative"
                } else {
                    "must be positive"
                },
                allowed,
            )),
            Yaml::Float(_) => Err(self.invalid("must be a whole number", allowed)),
            Yaml::Str(_) => Err(self.invalid("is a string, not a number", allowed)),
            _ => Err(self.invalid("must be a number", allowed)),
        }
    }

    fn number(&self, allowed: &str) -> Result<f64, ConfigError> {
        match &self.node.value {
            Yaml::Int(i) => Ok(*i as f64),
            Yaml::Float(f) if f.is_finite() => Ok(*f),
            Yaml::Float(_) => Err(self.invalid("is not a finite number", allowed)),
            Yaml::Bool(_) => Err(self.invalid("is a boolean, not a number", allowed)),
            Yaml::Str(_) => Err(self.invalid("is a string, not a number", allowed)),
            _ => Err(self.invalid("must be a number", allowed)),
        }
    }

    fn string(&self) -> Result<String, ConfigError> {
        match &self.node.value {
            Yaml::Str(s) => Ok(s.clone()),
            _ => Err(self.invalid("must be a string", "a string")),
        }
    }

    fn opt_string(&self) -> Result<Option<String>, ConfigError> {
        match &self.node.value {
            Yaml::Null => Ok(None),
            Yaml::Str(s) => Ok(Some(s.clone())),
            _ => Err(self.invalid("must be a string or null", "a string or null")),
        }
    }
}

fn context_size(
    key: &str,
    node: &Node,
    keys: &mut HashMap<String, u64>,
) -> Result<ContextSize, ConfigError> {
    let Yaml::Map(entries) = &node.value else {
        return Err(Ctx { key, node }.invalid(
            "must be a mapping with `type` and `value`",
            "{type: tokens|messages|fraction, value: ...}",
        ));
    };
    let mut kind: Option<(String, &Node)> = None;
    let mut value: Option<&Node> = None;
    for (k, line, v) in entries {
        match k.as_str() {
            "type" => {
                kind = Some((
                    Ctx {
                        key: &format!("{key}.type"),
                        node: v,
                    }
                    .string()?,
                    v,
                ))
            }
            "value" => value = Some(v),
            other => {
                return Err(ConfigError::UnknownKey {
                    key: format!("{key}.{other}"),
                    suggestion: suggest(other, &["type", "value"]),
                    line: Some(*line),
                });
            }
        }
    }
    let Some((kind, kind_node)) = kind else {
        return Err(Ctx { key, node }.invalid("has no `type`", "tokens, messages or fraction"));
    };
    let Some(value) = value else {
        return Err(Ctx { key, node }.invalid("has no `value`", "a positive number"));
    };
    let vkey = format!("{key}.value");
    keys.insert(vkey.clone(), value.line);
    let ctx = Ctx {
        key: &vkey,
        node: value,
    };
    match kind.as_str() {
        "tokens" => Ok(ContextSize::Tokens(ctx.int(1, WHOLE_1)?)),
        "messages" => Ok(ContextSize::Messages(ctx.int(1, WHOLE_1)?)),
        "fraction" => Ok(ContextSize::Fraction(ctx.number("a number in (0, 1]")?)),
        other => Err(invalid(
            format!("{key}.type"),
            format!("{other:?}"),
            "is not a known kind".into(),
            "tokens, messages or fraction".into(),
            Some(kind_node.line),
        )),
    }
}

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
        use std::io::Read as _;
        let path = path.as_ref();
        let io = |message: String| ConfigError::Io {
            path: path.display().to_string(),
            message,
        };
        if path.is_dir() {
            return Err(io("it is a directory; name a YAML file".into()));
        }
        let file = std::fs::File::open(path).map_err(|e| io(describe_io(&e)))?;
        let mut bytes = Vec::new();
        file.take(cap.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io(describe_io(&e)))?;
        if bytes.len() as u64 > cap {
            return Err(ConfigError::TooLarge {
                path: path.display().to_string(),
                cap,
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
            io(format!(
                "line {line}: byte offset {at} is 0x{:02x}, which is not UTF-8; save the file \
                 as UTF-8",
                bytes[at]
            ))
        })?;
        Self::from_yaml_str(&text)
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
        let mut container_from_skills: Option<(String, u64)> = None;
        let section: Option<Node> = match &root.value {
            Yaml::Null => None,
            Yaml::Map(entries) if entries.iter().any(|(k, _, _)| k == "summarization") => {
                for (k, _, v) in entries {
                    if k == "skills"
                        && let Yaml::Map(skills) = &v.value
                        && let Some((_, _, p)) =
                            skills.iter().find(|(k, _, _)| k == "container_path")
                    {
                        let path = Ctx {
                            key: "skills.container_path",
                            node: p,
                        }
                        .string()?;
                        container_from_skills = Some((path, p.line));
                    }
                }
                entries
                    .iter()
                    .find(|(k, _, _)| k == "summarization")
                    .map(|(_, _, v)| v.clone())
            }
            Yaml::Map(_) => Some(root.clone()),
            _ => {
                return Err(invalid(
                    "(root)".into(),
                    root.value.show(),
                    "the document must be a mapping".into(),
                    "a mapping of summarization keys, or a mapping with a `summarization:` key"
                        .into(),
                    Some(root.line),
                ));
            }
        };
        let mut config = SummarizationConfig::default();
        let mut keys: HashMap<String, u64> = HashMap::new();
        if let Some((path, line)) = container_from_skills {
            config.skills_container_path = path;
            keys.insert("skills.container_path".into(), line);
        }
        match section.as_ref().map(|n| &n.value) {
            None | Some(Yaml::Null) => {}
            Some(Yaml::Map(entries)) => {
                for (key, key_line, node) in entries {
                    keys.insert(key.clone(), node.line);
                    let ctx = Ctx { key, node };
                    match key.as_str() {
                        "enabled" => config.enabled = ctx.bool()?,
                        "model_name" => config.model_name = ctx.opt_string()?,
                        "trigger" => {
                            config.trigger = match &node.value {
                                Yaml::Null => Vec::new(),
                                Yaml::Seq(items) => items
                                    .iter()
                                    .enumerate()
                                    .map(|(i, n)| {
                                        context_size(&format!("trigger[{i}]"), n, &mut keys)
                                    })
                                    .collect::<Result<_, _>>()?,
                                _ => vec![context_size("trigger", node, &mut keys)?],
                            }
                        }
                        "keep" => config.keep = context_size("keep", node, &mut keys)?,
                        "trim_tokens_to_summarize" => {
                            config.trim_tokens_to_summarize = match node.value {
                                Yaml::Null => None,
                                _ => Some(
                                    ctx.int(1, "a whole number in [1, 1000000000], or null for no trimming")?,
                                ),
                            }
                        }
                        "summary_prompt" => config.summary_prompt = ctx.opt_string()?,
                        "preserve_recent_skill_count" => {
                            config.preserve_recent_skill_count =
                                ctx.int(0, WHOLE_0)?
                        }
                        "preserve_recent_skill_tokens" => {
                            config.preserve_recent_skill_tokens = ctx.int(0, WHOLE_0)?
                        }
                        "preserve_recent_skill_tokens_per_skill" => {
                            config.preserve_recent_skill_tokens_per_skill = ctx.int(0, WHOLE_0)?
                        }
                        "skill_file_read_tool_names" => {
                            config.skill_file_read_tool_names = match &node.value {
                                Yaml::Seq(items) => items
                                    .iter()
                                    .enumerate()
                                    .map(|(i, n)| {
                                        Ctx {
                                            key: &format!("skill_file_read_tool_names[{i}]"),
                                            node: n,
                                        }
                                        .string()
                                    })
                                    .collect::<Result<_, _>>()?,
                                _ => {
                                    return Err(ctx.invalid(
                                        "must be a list of tool names",
                                        "a list of strings",
                                    ));
                                }
                            }
                        }
                        "skills_container_path" => {
                            // This key wins over DeerFlow's top-level one.
                            keys.remove("skills.container_path");
                            config.skills_container_path = ctx.string()?
                        }
                        "preserve_latest_user_message" => {
                            config.preserve_latest_user_message = ctx.bool()?
                        }
                        "preserve_dynamic_context" => {
                            config.preserve_dynamic_context = ctx.bool()?
                        }
                        "stickiness_headroom" => {
                            config.stickiness_headroom = match node.value {
                                Yaml::Null => None,
                                _ => Some(ctx.number("a number in (0, 1], or null to disable")?),
                            }
                        }
                        "cache_capacity" => {
                            config.cache_capacity =
                                usize::try_from(ctx.int(1, "a whole number in [1, 10000000]")?)
                                    .unwrap_or(usize::MAX)
                        }
                        "token_counter" => {
                            let s = ctx.string()?;
                            config.token_counter =
                                TokenCounterKind::parse(&s).ok_or_else(|| {
                                    ctx.invalid(
                                        "is not a known token counter",
                                        &TokenCounterKind::NAMES.join(", "),
                                    )
                                })?;
                            if config.token_counter.needs_tiktoken() && !cfg!(feature = "tiktoken") {
                                return Err(ctx.invalid(
                                    "exact counting needs keel-summarization's `tiktoken` feature",
                                    "approximate or approximate_script (or build with --features tiktoken)",
                                ));
                            }
                        }
                        "compacting_message" => config.compacting_message = ctx.string()?,
                        "summary_max_attempts" => {
                            config.summary_max_attempts =
                                u32::try_from(ctx.int(1, "a whole number in [1, 10]")?)
                                    .unwrap_or(u32::MAX)
                        }
                        "summary_timeout_seconds" => {
                            config.summary_timeout_seconds =
                                ctx.number("a number of seconds in (0, 86400]")?
                        }
                        "summary_deadline_seconds" => {
                            config.summary_deadline_seconds =
                                ctx.number("a number of seconds in (0, 86400]")?
                        }
                        "max_summary_chars" => {
                            config.max_summary_chars = usize::try_from(ctx.int(1, WHOLE_1)?)
                                    .unwrap_or(usize::MAX)
                        }
                        "summary_max_tokens" => {
                            config.summary_max_tokens = match node.value {
                                Yaml::Null => None,
                                _ => Some(
                                    u32::try_from(ctx.int(
                                        1,
                                        "a whole number in [1, 4294967295], or null for the model's own limit",
                                    )?)
                                    .map_err(|_| {
                                        ctx.invalid(
                                            "is too large",
                                            "a whole number in [1, 4294967295], or null for the model's own limit",
                                        )
                                    })?,
                                ),
                            }
                        }
                        "max_chars_per_message" => {
                            config.max_chars_per_message =
                                usize::try_from(ctx.int(0, "a whole number in [0, 1000000000] (0: no cap)")?)
                                    .unwrap_or(usize::MAX)
                        }
                        "circuit_breaker_failures" => {
                            config.circuit_breaker_failures =
                                u32::try_from(ctx.int(1, "a whole number in [1, 1000000]")?)
                                    .unwrap_or(u32::MAX)
                        }
                        "circuit_breaker_cooldown_seconds" => {
                            config.circuit_breaker_cooldown_seconds =
                                ctx.int(0, "a whole number in [0, 2592000]")?
                        }
                        "extractive_word_budget" => {
                            config.extractive_word_budget = usize::try_from(ctx.int(1, WHOLE_1)?)
                                    .unwrap_or(usize::MAX)
                        }
                        "precompute_at" => {
                            config.precompute_at = match node.value {
                                Yaml::Null => None,
                                _ => Some(ctx.number(PRECOMPUTE_AT_RANGE)?),
                            }
                        }
                        "compact_tool" => config.compact_tool = ctx.bool()?,
                        "precompute_max_concurrent" => {
                            config.precompute_max_concurrent =
                                usize::try_from(ctx.int(1, "a whole number in [1, 1024]")?)
                                    .unwrap_or(usize::MAX)
                        }
                        other => {
                            return Err(ConfigError::UnknownKey {
                                key: other.to_owned(),
                                suggestion: suggest(other, KEYS),
                                line: Some(*key_line),
                            });
                        }
                    }
                }
            }
            Some(other) => {
                return Err(invalid(
                    "(section)".into(),
                    other.show(),
                    "must be a mapping".into(),
                    "a mapping of summarization keys".into(),
                    section.as_ref().map(|n| n.line),
                ));
            }
        }
        let warnings = config.validate_with_lines(&keys)?;
        for w in &warnings {
            tracing::warn!("{w}");
        }
        let empty = match section.as_ref().map(|n| &n.value) {
            None | Some(Yaml::Null) => true,
            Some(Yaml::Map(entries)) => entries.is_empty(),
            Some(_) => false,
        };
        Ok(LoadedConfig {
            config,
            warnings,
            empty,
        })
    }

    /// Checks ranges and consistency; returns warnings. Used by YAML loading and the builder.
    pub fn validate(&self) -> Result<Vec<ConfigWarning>, ConfigError> {
        self.validate_with_lines(&HashMap::new())
    }

    fn validate_with_lines(
        &self,
        lines: &HashMap<String, u64>,
    ) -> Result<Vec<ConfigWarning>, ConfigError> {
        let line = |k: &str| lines.get(k).copied();
        let bad = |key: &str, value: String, problem: &str, allowed: &str| {
            invalid(
                key.to_owned(),
                value,
                problem.to_owned(),
                allowed.to_owned(),
                line(key),
            )
        };
        let check_size = |key: &str, size: &ContextSize| -> Result<(), ConfigError> {
            match *size {
                ContextSize::Fraction(f) if !(f.is_finite() && f > 0.0 && f <= 1.0) => Err(bad(
                    &format!("{key}.value"),
                    f.to_string(),
                    "fraction is out of range",
                    "a number in (0, 1]",
                )),
                ContextSize::Tokens(0) | ContextSize::Messages(0) => Err(bad(
                    &format!("{key}.value"),
                    "0".into(),
                    &format!("a {} count must be positive", size.kind()),
                    WHOLE_1,
                )),
                ContextSize::Tokens(n) | ContextSize::Messages(n) if n > MAX_COUNT => Err(bad(
                    &format!("{key}.value"),
                    n.to_string(),
                    "is too large",
                    &format!("a whole number in [1, {MAX_COUNT}]"),
                )),
                _ => Ok(()),
            }
        };
        let single = self.trigger.len() == 1;
        for (i, t) in self.trigger.iter().enumerate() {
            check_size(
                &if single && !lines.contains_key("trigger[0].value") {
                    "trigger".to_owned()
                } else {
                    format!("trigger[{i}]")
                },
                t,
            )?;
        }
        check_size("keep", &self.keep)?;
        if self.enabled && self.trigger.is_empty() {
            return Err(bad(
                "trigger",
                "[]".into(),
                "summarization is enabled but has no trigger",
                "one or more of {type: tokens|messages|fraction, value: ...}",
            ));
        }
        if let Some(p) = &self.summary_prompt
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
        if let Some(p) = self.precompute_at
            && !(p.is_finite() && p > 0.0 && p < 1.0)
        {
            return Err(bad(
                "precompute_at",
                p.to_string(),
                "is out of range",
                PRECOMPUTE_AT_RANGE,
            ));
        }
        if let Some(h) = self.stickiness_headroom
            && !(h.is_finite() && h > 0.0 && h <= 1.0)
        {
            return Err(bad(
                "stickiness_headroom",
                h.to_string(),
                "headroom is out of range",
                "a number in (0, 1], or null to disable",
            ));
        }
        if self.trim_tokens_to_summarize == Some(0) {
            return Err(bad(
                "trim_tokens_to_summarize",
                "0".into(),
                "must be positive",
                "a whole number in [1, 1000000000], or null for no trimming",
            ));
        }
        if self.summary_max_tokens == Some(0) {
            return Err(bad(
                "summary_max_tokens",
                "0".into(),
                "must be positive",
                "a whole number >= 1, or null for the model's own limit",
            ));
        }
        if self.precompute_max_concurrent == 0 {
            return Err(bad(
                "precompute_max_concurrent",
                "0".into(),
                "must be positive",
                "a whole number in [1, 1024]",
            ));
        }
        if self.cache_capacity == 0 {
            return Err(bad(
                "cache_capacity",
                "0".into(),
                "must be positive",
                "a whole number in [1, 10000000]",
            ));
        }
        if !(1..=10).contains(&self.summary_max_attempts) {
            return Err(bad(
                "summary_max_attempts",
                self.summary_max_attempts.to_string(),
                "is out of range",
                "a whole number in [1, 10]",
            ));
        }
        if !(self.summary_timeout_seconds.is_finite()
            && self.summary_timeout_seconds > 0.0
            && self.summary_timeout_seconds <= MAX_TIMEOUT_SECONDS)
        {
            return Err(bad(
                "summary_timeout_seconds",
                self.summary_timeout_seconds.to_string(),
                "is out of range",
                "a number of seconds in (0, 86400]",
            ));
        }
        let counts: [(&str, u64, u64, u64); 10] = [
            (
                "trim_tokens_to_summarize",
                self.trim_tokens_to_summarize.unwrap_or(1),
                1,
                MAX_COUNT,
            ),
            (
                "preserve_recent_skill_count",
                self.preserve_recent_skill_count,
                0,
                MAX_COUNT,
            ),
            (
                "preserve_recent_skill_tokens",
                self.preserve_recent_skill_tokens,
                0,
                MAX_COUNT,
            ),
            (
                "preserve_recent_skill_tokens_per_skill",
                self.preserve_recent_skill_tokens_per_skill,
                0,
                MAX_COUNT,
            ),
            (
                "cache_capacity",
                self.cache_capacity as u64,
                1,
                MAX_CACHE_CAPACITY,
            ),
            (
                "max_summary_chars",
                self.max_summary_chars as u64,
                1,
                MAX_COUNT,
            ),
            (
                "max_chars_per_message",
                self.max_chars_per_message as u64,
                0,
                MAX_COUNT,
            ),
            (
                "circuit_breaker_cooldown_seconds",
                self.circuit_breaker_cooldown_seconds,
                0,
                MAX_COOLDOWN_SECONDS,
            ),
            (
                "extractive_word_budget",
                self.extractive_word_budget as u64,
                1,
                MAX_COUNT,
            ),
            (
                "precompute_max_concurrent",
                self.precompute_max_concurrent as u64,
                1,
                MAX_PRECOMPUTE_CONCURRENT,
            ),
        ];
        for (key, value, min, max) in counts {
            if value > max {
                return Err(bad(
                    key,
                    value.to_string(),
                    "is too large",
                    &format!("a whole number in [{min}, {max}]"),
                ));
            }
        }
        if self.circuit_breaker_failures > 1_000_000 {
            return Err(bad(
                "circuit_breaker_failures",
                self.circuit_breaker_failures.to_string(),
                "is too large",
                "a whole number in [1, 1000000]",
            ));
        }
        if !(self.summary_deadline_seconds.is_finite()
            && self.summary_deadline_seconds > 0.0
            && self.summary_deadline_seconds <= 86_400.0)
        {
            return Err(bad(
                "summary_deadline_seconds",
                self.summary_deadline_seconds.to_string(),
                "out of range",
                "a number of seconds in (0, 86400]",
            ));
        }
        if self.circuit_breaker_failures == 0 {
            return Err(bad(
                "circuit_breaker_failures",
                "0".into(),
                "must be positive",
                "a whole number in [1, 1000000]",
            ));
        }
        if self.extractive_word_budget == 0 || self.max_summary_chars == 0 {
            let key = if self.extractive_word_budget == 0 {
                "extractive_word_budget"
            } else {
                "max_summary_chars"
            };
            return Err(bad(key, "0".into(), "must be positive", WHOLE_1));
        }
        if !self.skills_container_path.starts_with('/') {
            return Err(bad(
                if lines.contains_key("skills.container_path") {
                    "skills.container_path"
                } else {
                    "skills_container_path"
                },
                format!("{:?}", self.skills_container_path),
                "must be an absolute path",
                "an absolute path such as /mnt/skills",
            ));
        }
        if self.compacting_message.trim().is_empty() {
            return Err(bad(
                "compacting_message",
                "\"\"".into(),
                "must not be blank",
                "a non-empty string",
            ));
        }
        if self.token_counter.needs_tiktoken() && !cfg!(feature = "tiktoken") {
            return Err(bad(
                "token_counter",
                format!("{:?}", self.token_counter.name()),
                "exact counting needs keel-summarization's `tiktoken` feature",
                "approximate or approximate_script (or build with --features tiktoken)",
            ));
        }

        let mut warnings = Vec::new();
        // keep >= trigger of the same kind: compaction still runs when the trigger is
        // reached, but the window keep asks for is already at the trigger on its own.
        for (i, t) in self.trigger.iter().enumerate() {
            let reaches = match (self.keep, *t) {
                (ContextSize::Messages(k), ContextSize::Messages(t)) => k >= t,
                (ContextSize::Tokens(k), ContextSize::Tokens(t)) => k >= t,
                (ContextSize::Fraction(k), ContextSize::Fraction(t)) => k >= t,
                _ => false,
            };
            if reaches {
                let what_happens = match self.stickiness_headroom {
                    Some(h) => format!(
                        "when the trigger is reached, stickiness headroom shrinks the kept window toward {h} x the trigger, but never below its floor (half of keep, the newest message with its tool calls, the message before it and the latest user message), so the window stays near the trigger and most later calls compact again"
                    ),
                    None => "when the trigger is reached, compaction keeps that window, which alone reaches the trigger again, so every later call compacts again".to_owned(),
                };
                warnings.push(ConfigWarning {
                    key: "keep".into(),
                    message: format!(
                        "keep ({} {}) is not smaller than trigger #{i} ({} {}): {what_happens}; set keep to about half of the trigger",
                        self.keep.kind(),
                        show_size(&self.keep),
                        t.kind(),
                        show_size(t)
                    ),
                    line: line("keep.value"),
                });
            }
        }
        Ok(warnings)
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

fn show_size(s: &ContextSize) -> String {
    match s {
        ContextSize::Tokens(n) | ContextSize::Messages(n) => n.to_string(),
        ContextSize::Fraction(f) => f.to_string(),
    }
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
