//! Building a replay from the options `keel replay` takes: the summarization
//! configuration, session memory, the database and the summary model.
//!
//! Everything that can be wrong with the input is checked before the database is
//! opened: the transcript, the YAML, the memory settings, the summary model's
//! configuration. A replay that fails to start writes nothing (and creates no database
//! file).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_config::yaml::{Node, Yaml};
use keel_core::message::new_id;
use keel_core::middleware::Middleware;
use keel_core::model::{ChatModel, ModelProfile};
use keel_core::store::{SessionMemoryStore, SessionScope, StoreError};
use keel_core::tokens::TokenCounter;
use keel_memory::{FoldEngine, SessionMemoryMiddleware, SessionMemorySettings, SettingsError};
use keel_recall::RecallSettings;
use keel_store::Store;
use keel_store::error::ConnectError;
use keel_summarization::cache::SummaryCache;
use keel_summarization::config::{ConfigError, SummarizationConfig};
use keel_summarization::middleware::{BuildError, SummarizationMiddleware};
use keel_tokens::{ApproximateCounter, CachedCounter};

use crate::engine::{Replay, ReplayEngine, ReplayError, ReplayObserver};
use crate::input::Limits;
use crate::transcript::{LoadError, Transcript};

/// The database used when session memory needs one and no URL is given: `./keel.db`,
/// created on first use.
pub const DEFAULT_DB_URL: &str = "sqlite://keel.db?mode=rwc";

/// The flow id of replayed sessions in the database.
pub const REPLAY_FLOW_ID: &str = "keel-replay";

/// The user id of replayed sessions in the database.
pub const REPLAY_USER_ID: &str = "replay";

/// Session-memory options (`--memory session --n-messages N --pinned-keys k1,k2`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryOptions {
    /// Recent messages sent verbatim (`None`: the memory crate's default).
    pub n_messages: Option<usize>,
    /// Keys the summary keeps for the whole session.
    pub pinned_keys: Vec<String>,
}

/// What to replay with. Every field is optional; with none the replay sends the history
/// verbatim (a baseline run).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayOptions {
    /// A `summarization.yaml`.
    pub config: Option<PathBuf>,
    /// Session memory.
    pub memory: Option<MemoryOptions>,
    /// Database URL (`sqlite://...`, `postgres://...`). Default: [`DEFAULT_DB_URL`] when
    /// session memory is on; no database otherwise.
    pub db: Option<String>,
    /// An OpenAI-compatible model for summaries (`OPENAI_BASE_URL`, `OPENAI_API_KEY`);
    /// default: the built-in extractive summarizer, offline and deterministic.
    pub summary_model: Option<String>,
    /// The answering model's context window, for `fraction` triggers and keeps.
    pub context_window: Option<u64>,
    /// The session id (and thread id) to replay into. Default: a new id per run, so
    /// replays never mix; give the same id to several replays to share one session.
    pub session: Option<String>,
    /// Caps on what is read from the transcript and the configuration.
    pub limits: Limits,
    /// The largest configuration file accepted, in bytes.
    pub max_config_bytes: Option<u64>,
    /// Do not keep each request in [`Replay::requests`]: a caller that handles them as
    /// they come (a dump written by a [`ReplayObserver`]) keeps memory flat on a long
    /// transcript.
    pub discard_requests: bool,
    /// Recall of the exact evidence: `None` is the default (on with session memory, or
    /// when the configuration has a `recall:` section), `Some(true)` on (with the
    /// configuration's settings when it has them), `Some(false)` off.
    pub recall: Option<bool>,
}

/// A replay that could not start. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The transcript is missing, malformed or inconsistent.
    #[error(transparent)]
    Transcript(#[from] LoadError),
    /// The summarization configuration is invalid.
    #[error("{}", config_error(path, source))]
    Config {
        /// The YAML file.
        path: PathBuf,
        /// What is wrong, with the key.
        source: Box<ConfigError>,
    },
    /// A `fraction` size needs the model's context window, which a replay cannot know.
    #[error(
        "{}: summarization.{key} is a fraction of the model's context window, which keel \
         cannot know offline; pass --context-window TOKENS (the answering model's input \
         limit, for example 128000) or use a `tokens` size",
        path.display()
    )]
    NeedsContextWindow {
        /// The YAML file.
        path: PathBuf,
        /// The key (`trigger[0]`, `keep`).
        key: String,
    },
    /// The summarization middleware could not be built from a valid configuration.
    #[error("{}: {source}", path.display())]
    Summarization {
        /// The YAML file.
        path: PathBuf,
        /// What is wrong.
        source: Box<BuildError>,
    },
    /// A session-memory setting is out of range.
    #[error("--memory session: {0}")]
    Memory(#[from] SettingsError),
    /// The summary model is misconfigured.
    #[error("--summary-model: {0}")]
    SummaryModel(#[from] crate::models::ModelByNameError),
    /// Session memory needs to write, and the database was opened read-only.
    #[error(
        "--db {url}: session memory writes the session to the database, which `mode=ro` \
         opens read-only; drop `?mode=ro`"
    )]
    ReadOnlyForMemory {
        /// The URL, password hidden.
        url: String,
    },
    /// The configuration's `recall:` section is invalid.
    #[error("{}: {message}", path.display())]
    Recall {
        /// The YAML file.
        path: PathBuf,
        /// What is wrong, with the key (`recall.max_tokens`) and its line.
        message: String,
    },
    /// The database could not be opened.
    #[error("--db: {0}")]
    Connect(#[from] ConnectError),
}

/// A replay ready to run: inputs checked, middleware built, database open.
pub struct Prepared {
    /// The checked transcript.
    pub transcript: Transcript,
    /// Things worth telling the user before the figures (configuration warnings).
    pub warnings: Vec<String>,
    /// The thread id (and, with session memory, the session id) of this run.
    pub thread_id: String,
    engine: ReplayEngine,
    memory: Option<(Arc<Store>, SessionScope)>,
}

impl Prepared {
    /// Runs the replay. With session memory, the report ends with the session's pinned
    /// keys and summary as stored.
    pub async fn run(&self, observer: &mut dyn ReplayObserver) -> Result<Replay, FinishError> {
        let mut replay = self.engine.run(&self.transcript, observer).await?;
        if let Some((store, scope)) = &self.memory
            && let Some(state) = store.get_state(scope).await?
        {
            replay.report.pinned = state.pinned;
            if !state.summary.is_empty() {
                replay.report.summary = Some(state.summary);
            }
        }
        Ok(replay)
    }

    /// The engine (for callers that drive it themselves).
    pub fn engine(&self) -> &ReplayEngine {
        &self.engine
    }
}

/// A replay that started and then failed.
#[derive(Debug, thiserror::Error)]
pub enum FinishError {
    /// A model call of the replay failed.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// Reading the final session-memory state failed.
    #[error("reading the session memory at the end: {0}")]
    Store(#[from] StoreError),
}

/// A configuration error with its file named once.
fn config_error(path: &Path, e: &ConfigError) -> String {
    match e {
        // These name the file already.
        ConfigError::Io { .. } | ConfigError::TooLarge { .. } => e.to_string(),
        _ => format!("{}: {e}", path.display()),
    }
}

/// The transcript's warnings as `FILE:LINE: message` lines.
pub fn transcript_warnings(path: &Path, transcript: &Transcript) -> Vec<String> {
    transcript
        .warnings()
        .iter()
        .map(|f| format!("{}:{}: {}", path.display(), f.line, f.problem))
        .collect()
}

/// Reads and parses a configuration file once, into the line-aware tree every section
/// (summarization, recall) is read from. `max_bytes` defaults to keel-summarization's
/// [`MAX_CONFIG_BYTES`](keel_summarization::config::MAX_CONFIG_BYTES).
fn parse_config(path: &Path, max_bytes: Option<u64>) -> Result<Node, SetupError> {
    let cap = max_bytes.unwrap_or(keel_summarization::config::MAX_CONFIG_BYTES);
    let config_error = |source: ConfigError| SetupError::Config {
        path: path.to_owned(),
        source: Box::new(source),
    };
    let text = keel_summarization::config::read_config_text(path, cap).map_err(config_error)?;
    keel_config::yaml::parse(&text)
        .map_err(|(message, line)| config_error(ConfigError::Syntax { message, line }))
}

/// Loads a `summarization.yaml` the way every `keel` command does: the same checks, the
/// same warnings (an empty file, `enabled: false`, an unused `model_name`), and a
/// `fraction` size refused when the context window is unknown.
pub fn load_summarization(
    path: &Path,
    context_window: Option<u64>,
    summary_model: Option<&str>,
    max_bytes: Option<u64>,
) -> Result<(SummarizationConfig, Vec<String>), SetupError> {
    let root = parse_config(path, max_bytes)?;
    summarization_from_root(path, &root, context_window, summary_model)
}

/// [`load_summarization`] on a file already parsed (`root`, read from `path`).
fn summarization_from_root(
    path: &Path,
    root: &Node,
    context_window: Option<u64>,
    summary_model: Option<&str>,
) -> Result<(SummarizationConfig, Vec<String>), SetupError> {
    let loaded = SummarizationConfig::from_node(root).map_err(|source| SetupError::Config {
        path: path.to_owned(),
        source: Box::new(source),
    })?;
    let config = loaded.config;
    let mut warnings: Vec<String> = loaded
        .warnings
        .iter()
        .map(|w| format!("{}: {w}", path.display()))
        .collect();
    if !config.enabled {
        let why = if loaded.empty {
            "the file sets nothing, and summarization.enabled defaults to false"
        } else {
            "summarization.enabled is false"
        };
        warnings.push(format!(
            "{}: {why}, so requests pass through unchanged; set `enabled: true` and a \
             trigger to compact",
            path.display()
        ));
        return Ok((config, warnings));
    }
    if context_window.is_none()
        && let Err(keel_summarization::config::ConfigError::Invalid(e)) =
            config.check_context_window(None)
    {
        // The key as the section names it (`trigger[0]`), without the section.
        let key = e.key.strip_prefix("summarization.").unwrap_or(&e.key);
        return Err(SetupError::NeedsContextWindow {
            path: path.to_owned(),
            key: key.trim_end_matches(".value").to_owned(),
        });
    }
    if let Some(name) = &config.model_name {
        warnings.push(format!(
            "{}: summarization.model_name = {name:?} is not used by keel; summaries come \
             from {}",
            path.display(),
            summary_model.map_or_else(
                || "the built-in extractive summarizer".to_owned(),
                |m| format!("--summary-model {m}")
            )
        ));
    }
    Ok((config, warnings))
}

/// The top-level `recall:` section of a configuration file (`None` when it has none or
/// it is empty; `recall: {}` turns recall on with its defaults). Its keys are
/// [`RecallSettings`]'s, read by [`keel_recall::settings_from_node`]: an unknown key, a
/// value of the wrong type or out of range is an error naming the key and its line.
/// The file is read with the checks and messages of [`load_summarization`].
pub fn load_recall(
    path: &Path,
    max_bytes: Option<u64>,
) -> Result<Option<RecallSettings>, SetupError> {
    let root = parse_config(path, max_bytes)?;
    recall_from_root(path, &root)
}

/// [`load_recall`] on a file already parsed (`root`, read from `path`).
fn recall_from_root(path: &Path, root: &Node) -> Result<Option<RecallSettings>, SetupError> {
    let Yaml::Map(entries) = &root.value else {
        return Ok(None);
    };
    let Some((_, _, node)) = entries.iter().find(|(key, _, _)| key == "recall") else {
        return Ok(None);
    };
    if matches!(node.value, Yaml::Null) {
        return Ok(None);
    }
    keel_recall::settings_from_node("recall", node)
        .map(Some)
        .map_err(|e| SetupError::Recall {
            path: path.to_owned(),
            message: e.to_string(),
        })
}

/// What `--config` sets: summarization (with the file it came from) and recall.
#[derive(Default)]
struct ConfigSections {
    summarization: Option<(PathBuf, SummarizationConfig)>,
    recall: Option<RecallSettings>,
}

/// Reads the `--config` file once and its sections from the one parse: summarization
/// first (its errors come first), then recall, scoped to the replay's flow and user.
fn load_config(
    options: &ReplayOptions,
    warnings: &mut Vec<String>,
) -> Result<ConfigSections, SetupError> {
    let Some(path) = &options.config else {
        return Ok(ConfigSections::default());
    };
    let root = parse_config(path, options.max_config_bytes)?;
    // A file holding only a `recall:` section configures recall alone.
    let recall_only = matches!(&root.value, Yaml::Map(entries)
        if !entries.is_empty() && entries.iter().all(|(key, _, _)| key == "recall"));
    let summarization = if recall_only {
        None
    } else {
        let (config, config_warnings) = summarization_from_root(
            path,
            &root,
            options.context_window,
            options.summary_model.as_deref(),
        )?;
        warnings.extend(config_warnings);
        Some((path.clone(), config))
    };
    let mut recall = recall_from_root(path, &root)?;
    if recall_only && recall.is_none() {
        recall = Some(RecallSettings::default());
    }
    Ok(ConfigSections {
        summarization,
        recall,
    })
}

/// The recall a replay runs with: the configuration's settings or the defaults, as
/// [`ReplayOptions::recall`] asks, scoped to the replay's flow and user.
fn recall_settings(
    options: &ReplayOptions,
    configured: Option<RecallSettings>,
) -> Option<RecallSettings> {
    let on = match options.recall {
        Some(on) => on,
        None => configured.is_some() || options.memory.is_some(),
    };
    on.then(|| {
        let mut r = configured.unwrap_or_default();
        r.flow_id = REPLAY_FLOW_ID.to_owned();
        r.user_id = REPLAY_USER_ID.to_owned();
        r
    })
}

/// The thread id of a run: `--session`, or a new `replay-STEM-ID`.
fn thread_id_for(transcript_path: &Path, options: &ReplayOptions) -> String {
    let stem = transcript_path
        .file_stem()
        .map_or_else(|| "transcript".into(), |s| s.to_string_lossy().into_owned());
    match &options.session {
        Some(id) => id.clone(),
        None => format!("replay-{stem}-{}", new_id()),
    }
}

/// The `--summary-model`, configured from the environment (`None`: the extractive
/// summarizer); `anthropic:NAME` for Claude (see [`crate::models`]).
fn summary_model(options: &ReplayOptions) -> Result<Option<Arc<dyn ChatModel>>, SetupError> {
    Ok(match &options.summary_model {
        Some(name) => Some(crate::models::model_by_name(name)?),
        None => None,
    })
}

/// The checked session-memory settings, with a warning when pinned keys are left to the
/// extractive summarizer.
fn memory_settings(
    options: &ReplayOptions,
    warnings: &mut Vec<String>,
) -> Result<Option<SessionMemorySettings>, SetupError> {
    let Some(m) = &options.memory else {
        return Ok(None);
    };
    let scope = SessionScope::new(REPLAY_FLOW_ID, REPLAY_USER_ID, "", "");
    let mut settings =
        SessionMemorySettings::for_scope(scope).with_pinned_keys(m.pinned_keys.clone());
    if let Some(n) = m.n_messages {
        settings = settings.with_n_messages(n);
    }
    settings.validate()?;
    if options.summary_model.is_none() && !m.pinned_keys.is_empty() {
        warnings.push(
            "the extractive summarizer fills pinned keys only where the user or the \
             assistant states them recognisably (`key value`, `key: value`, \
             \"the ticket for this is TCK-7\", a correction of the same shape); \
             pass --summary-model to have a model fill the rest"
                .to_owned(),
        );
    }
    Ok(Some(settings))
}

/// Opens the database, only when something stores into it (`--db`, or session memory
/// on [`DEFAULT_DB_URL`]); session memory on a read-only database is refused first.
async fn open_store(
    options: &ReplayOptions,
    with_memory: bool,
) -> Result<Option<Arc<Store>>, SetupError> {
    let db_url = match (&options.db, with_memory) {
        (Some(url), _) => Some(url.as_str()),
        (None, true) => Some(DEFAULT_DB_URL),
        (None, false) => None,
    };
    if let Some(url) = db_url
        && with_memory
        && url
            .split_once('?')
            .is_some_and(|(_, q)| q.split('&').any(|kv| kv.eq_ignore_ascii_case("mode=ro")))
    {
        return Err(SetupError::ReadOnlyForMemory {
            url: keel_store::error::redact_url(url),
        });
    }
    Ok(match db_url {
        // One process, one query at a time: a pool of one connection (measured in
        // docs/benchmarks.md, session-memory replay).
        Some(url) => Some(Arc::new(Store::connect_single(url).await?)),
        None => None,
    })
}

/// The recall middleware; with a database it indexes there.
fn recall_middleware(
    settings: RecallSettings,
    store: Option<&Arc<Store>>,
    options: &ReplayOptions,
) -> Result<Arc<dyn Middleware>, SetupError> {
    let mut builder = keel_recall::RecallMiddleware::builder(settings);
    if let Some(store) = store {
        builder = builder.index(store.clone());
    }
    let middleware = builder.build().map_err(|e| SetupError::Recall {
        path: options.config.clone().unwrap_or_default(),
        message: format!("recall: {e}"),
    })?;
    Ok(Arc::new(middleware))
}

/// The session-memory middleware on `store`, and the scope of this run's session in it.
fn memory_middleware(
    settings: SessionMemorySettings,
    store: &Arc<Store>,
    summary_model: Option<&Arc<dyn ChatModel>>,
    thread_id: &str,
) -> Result<(Arc<dyn Middleware>, SessionScope), SetupError> {
    let scope = settings.scope_for_thread(thread_id);
    let builder = SessionMemoryMiddleware::builder(settings).store(store.clone());
    let builder = match summary_model {
        Some(model) => builder.summary_model(model.clone()),
        None => builder.fold_engine(FoldEngine::Extractive),
    };
    Ok((Arc::new(builder.build()?), scope))
}

/// The summarization middleware, with a summary cache of its own.
fn summarization_middleware(
    (path, config): (PathBuf, SummarizationConfig),
    store: Option<&Arc<Store>>,
    summary_model: Option<&Arc<dyn ChatModel>>,
    profile: &ModelProfile,
) -> Result<SummarizationMiddleware, SetupError> {
    // A cache of its own: replays are independent of each other and of any agent in the
    // same process. With a database, summaries also go to its second level.
    let mut cache = SummaryCache::new(config.cache_capacity);
    if let Some(store) = store {
        cache = cache.with_store(store.clone());
    }
    let mut builder = SummarizationMiddleware::builder(config)
        .cache(Arc::new(cache))
        .model_profile(profile.clone());
    builder = match summary_model {
        Some(model) => builder.summary_model(model.clone()),
        None => builder.extractive(),
    };
    builder.build().map_err(|source| SetupError::Summarization {
        path,
        source: Box::new(source),
    })
}

/// Checks every input, then builds the middleware stack and opens the database.
pub async fn prepare(
    transcript: impl AsRef<Path>,
    options: &ReplayOptions,
) -> Result<Prepared, SetupError> {
    let transcript_path = transcript.as_ref();
    let loaded = Transcript::read_for_replay(transcript_path, options.limits)?;
    prepare_transcript(loaded, transcript_path, options).await
}

/// [`prepare`] on a transcript already built in memory (a converted benchmark file, for
/// example). `source` names it in warnings and in the run's thread id; it is not read.
pub async fn prepare_transcript(
    transcript: Transcript,
    source: &Path,
    options: &ReplayOptions,
) -> Result<Prepared, SetupError> {
    let transcript_path = source;
    if transcript.model_calls() == 0 {
        return Err(LoadError::NoModelCalls {
            path: source.to_owned(),
        }
        .into());
    }
    let thread_id = thread_id_for(transcript_path, options);
    let mut profile = ModelProfile::new("transcript", "replay");
    profile.max_input_tokens = options.context_window;
    let mut warnings = transcript_warnings(transcript_path, &transcript);

    // 1. Everything that needs no database, so a bad input fails before any write.
    let summary_model = summary_model(options)?;
    let config = load_config(options, &mut warnings)?;
    let memory_settings = memory_settings(options, &mut warnings)?;

    // 2. The database, only when something stores into it.
    let store = open_store(options, memory_settings.is_some()).await?;

    // 3. The stack, outermost first: session memory builds `[summary, *last N]`, then
    // summarization compacts whatever is still over its trigger.
    let mut stack: Vec<Arc<dyn Middleware>> = Vec::new();
    // Recall sits outermost and still sees the final request (it adds its excerpts
    // after the inner middleware ran); with a database it indexes there.
    if let Some(settings) = recall_settings(options, config.recall) {
        stack.push(recall_middleware(settings, store.as_ref(), options)?);
    }
    let mut memory = None;
    if let (Some(settings), Some(store)) = (memory_settings, &store) {
        let (middleware, scope) =
            memory_middleware(settings, store, summary_model.as_ref(), &thread_id)?;
        stack.push(middleware);
        memory = Some((store.clone(), scope));
    }
    let mut counter: Option<Arc<dyn TokenCounter>> = None;
    if let Some(summarization) = config.summarization {
        let middleware = summarization_middleware(
            summarization,
            store.as_ref(),
            summary_model.as_ref(),
            &profile,
        )?;
        // Figures are counted the way the middleware counts: one set of numbers.
        counter = Some(middleware.counter_for(&profile));
        stack.push(Arc::new(middleware));
    }
    let counter =
        counter.unwrap_or_else(|| Arc::new(CachedCounter::new(ApproximateCounter::langchain())));

    let engine = ReplayEngine::new(stack, counter)
        .with_thread_id(thread_id.clone())
        .with_kept_requests(!options.discard_requests)
        .with_model_profile(profile);
    Ok(Prepared {
        transcript,
        warnings,
        thread_id,
        engine,
        memory,
    })
}
