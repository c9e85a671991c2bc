//! One reader per middleware: its stack-file name, its settings under LangChain's
//! constructor argument names, and what it builds.

use std::sync::Arc;

use keel_config::yaml::{Node, Yaml};
use keel_core::middleware::Middleware;
use keel_core::model::ModelErrorKind;
use keel_core::model::ModelRegistry;

use super::value::{At, Refuse, known_keys};
use crate::backoff::{Backoff, MAX_RETRIES};
use crate::context_editing::{ClearToolUses, ContextEditing};
use crate::error::ConfigError;
use crate::human_in_the_loop::{
    DEFAULT_DESCRIPTION_PREFIX as HITL_PREFIX, DecisionType, HumanInTheLoop, InterruptMode,
    InterruptOn,
};
use crate::llm_tool_emulator::LlmToolEmulator;
use crate::llm_tool_selector::{
    DEFAULT_SYSTEM_PROMPT as SELECTOR_PROMPT, LlmToolSelector, OnParsingFailure,
};
use crate::model_fallback::ModelFallback;
use crate::model_retry::{DEFAULT_RETRY_ON, ModelFailure, ModelRetry};
use crate::model_router::{ModelRouter, Route};
use crate::tool_retry::{ToolFailure, ToolFailureKind, ToolRetry};
use keel_config::stack::StackError;

/// The middleware names a stack file accepts (LangChain's class names in snake case,
/// without `_middleware`).
pub const NAMES: &[&str] = &[
    "model_call_limit",
    "tool_call_limit",
    "model_retry",
    "tool_retry",
    "tool_error",
    "model_fallback",
    "context_editing",
    "pii",
    "todo_list",
    "llm_tool_selector",
    "llm_tool_emulator",
    "model_router",
    "model_refusal",
    "human_in_the_loop",
    "recall",
];

/// The largest call limit accepted.
pub(crate) const MAX_LIMIT: u64 = 1_000_000_000;

/// A parsed entry, before models are resolved.
#[derive(Clone)]
pub(crate) enum Entry {
    /// Built already: it needs no model.
    Ready(Arc<dyn Middleware>),
    /// `model_fallback`: model names and their lines.
    Fallback(Vec<(String, u64)>),
    /// `llm_tool_selector`: its settings and the selection model's name, if any.
    Selector {
        model: Option<(String, u64)>,
        system_prompt: String,
        max_tools: Option<usize>,
        always_include: Vec<String>,
        max_retries: u32,
        on_parsing_failure: OnParsingFailure,
    },
    /// `llm_tool_emulator`: the emulator model's name and the tools it answers.
    Emulator {
        model: (String, u64),
        tools: Option<Vec<String>>,
    },
    /// `model_router`: routes (name, model name, line, criteria), instructions, and the
    /// classifier's name.
    Router {
        routes: Vec<(String, String, u64, String)>,
        instructions: String,
        classifier: (String, u64),
    },
}

/// Context for one entry's errors.
pub(crate) struct EntryAt<'a> {
    pub index: usize,
    pub name: &'a str,
    pub line: u64,
}

impl EntryAt<'_> {
    fn key(&self, field: &str) -> String {
        format!("middleware[{}].{}.{field}", self.index, self.name)
    }

    fn config(&self, source: ConfigError) -> StackError {
        StackError::Middleware {
            index: self.index,
            line: self.line,
            source: Box::new(source),
        }
    }
}

/// The settings of one entry, looked up by name.
struct Args<'a> {
    at: &'a EntryAt<'a>,
    entries: &'a [(String, u64, Node)],
}

impl<'a> Args<'a> {
    fn get(&self, key: &str) -> Option<At<'a>> {
        self.entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, _, n)| At::new(self.at.key(key), n))
    }
}

fn backoff(args: &Args<'_>) -> Result<Backoff, StackError> {
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

const RETRY_KEYS: [&str; 7] = [
    "max_retries",
    "retry_on",
    "on_failure",
    "backoff_factor",
    "initial_delay",
    "max_delay",
    "jitter",
];

const MODEL_KINDS: [&str; 9] = [
    "rate_limited",
    "server",
    "timeout",
    "connection",
    "authentication",
    "invalid_request",
    "context_overflow",
    "malformed_response",
    "rejected",
];

fn model_kind(name: &str) -> Option<ModelErrorKind> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

/// Reads one entry.
pub(crate) fn read(at: &EntryAt<'_>, node: &Node) -> Result<Entry, StackError> {
    if at.name == "model_fallback"
        && let Yaml::Seq(_) = node.value
    {
        let list = At::new(at.key("models"), node);
        return fallback_models(&list);
    }
    let entries = At::new(format!("middleware[{}].{}", at.index, at.name), node).map()?;
    let args = Args { at, entries };
    let prefix = format!("middleware[{}].{}", at.index, at.name);
    let known: &[&str] = match at.name {
        "model_retry" => &RETRY_KEYS,
        "tool_retry" => &[
            "max_retries",
            "retry_on",
            "on_failure",
            "backoff_factor",
            "initial_delay",
            "max_delay",
            "jitter",
            "tools",
        ],
        "model_fallback" => &["models"],
        "context_editing" => &["edits", "token_count_method"],
        "llm_tool_selector" => &[
            "model",
            "system_prompt",
            "max_tools",
            "always_include",
            "max_retries",
            "on_parsing_failure",
        ],
        "llm_tool_emulator" => &["tools", "model"],
        "model_router" => &["choices", "instructions", "classifier"],
        "human_in_the_loop" => &["interrupt_on", "description_prefix", "interrupt_mode"],
        "recall" => &[
            "max_excerpts",
            "max_tokens",
            "min_score",
            "max_excerpt_chars",
            "flow_id",
            "user_id",
        ],
        _ => &[],
    };
    known_keys(&prefix, entries, known)?;
    let ready = |m: Arc<dyn Middleware>| Ok(Entry::Ready(m));
    match at.name {
        "model_retry" => {
            let retry_on = match args.get("retry_on") {
                None => DEFAULT_RETRY_ON.to_vec(),
                Some(v) => v
                    .strings()?
                    .iter()
                    .map(|k| {
                        model_kind(k).ok_or_else(|| {
                            v.refuse(
                                &format!("{k:?} is not a model error kind"),
                                &format!("a list of {}", MODEL_KINDS.join(", ")),
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?,
            };
            let on_failure = match args.get("on_failure") {
                None => ModelFailure::Continue,
                Some(v) => match v.choice(&["continue", "error"])? {
                    "error" => ModelFailure::Error,
                    _ => ModelFailure::Continue,
                },
            };
            let m =
                ModelRetry::new(backoff(&args)?, retry_on, on_failure).map_err(|e| at.config(e))?;
            ready(Arc::new(m))
        }
        "tool_retry" => {
            let kinds = ["failed", "invalid_arguments", "unknown"];
            let retry_on = match args.get("retry_on") {
                None => vec![ToolFailureKind::Failed],
                Some(v) => v
                    .strings()?
                    .iter()
                    .map(|k| match k.as_str() {
                        "failed" => Ok(ToolFailureKind::Failed),
                        "invalid_arguments" => Ok(ToolFailureKind::InvalidArguments),
                        "unknown" => Ok(ToolFailureKind::Unknown),
                        _ => Err(v.refuse(
                            &format!("{k:?} is not a tool failure kind"),
                            &format!("a list of {}", kinds.join(", ")),
                        )),
                    })
                    .collect::<Result<_, _>>()?,
            };
            let on_failure = match args.get("on_failure") {
                None => ToolFailure::Continue,
                Some(v) => match v.choice(&["continue", "error"])? {
                    "error" => ToolFailure::Error,
                    _ => ToolFailure::Continue,
                },
            };
            let tools = args.get("tools").map(|v| v.strings()).transpose()?;
            let m = ToolRetry::new(backoff(&args)?, tools, retry_on, on_failure)
                .map_err(|e| at.config(e))?;
            ready(Arc::new(m))
        }
        "model_fallback" => match args.get("models") {
            Some(list) => fallback_models(&list),
            None => Err(at.config(ConfigError::new(
                "model_fallback",
                "models",
                "(missing)",
                "no fallback model",
                "a list of one or more model names",
            ))),
        },
        "context_editing" => context_editing(at, &args),
        "recall" => {
            let mut settings = keel_recall::RecallSettings::default();
            let whole = |key: &str, max: u64| -> Result<Option<usize>, StackError> {
                Ok(args
                    .get(key)
                    .map(|v| v.count(max).map(|n| n as usize))
                    .transpose()?)
            };
            if let Some(n) = whole("max_excerpts", u64::MAX >> 1)? {
                settings.max_excerpts = n;
            }
            if let Some(n) = whole("max_tokens", u64::MAX >> 1)? {
                settings.max_tokens = n;
            }
            if let Some(n) = whole("max_excerpt_chars", u64::MAX >> 1)? {
                settings.max_excerpt_chars = n;
            }
            if let Some(v) = args.get("min_score") {
                settings.min_score = v.number()?;
            }
            if let Some(v) = args.get("flow_id") {
                settings.flow_id = v.string()?;
            }
            if let Some(v) = args.get("user_id") {
                settings.user_id = v.string()?;
            }
            let m = keel_recall::RecallMiddleware::builder(settings)
                .build()
                .map_err(|e| {
                    at.config(ConfigError::new(
                        "recall",
                        e.field,
                        e.value,
                        "is out of range",
                        e.range,
                    ))
                })?;
            ready(Arc::new(m))
        }
        "human_in_the_loop" => {
            let mode = match args.get("interrupt_mode") {
                Some(v) => match v.choice(&["batched", "per_call"])? {
                    "per_call" => InterruptMode::PerCall,
                    _ => InterruptMode::Batched,
                },
                None => InterruptMode::Batched,
            };
            let prefix = match args.get("description_prefix") {
                Some(v) => v.string()?,
                None => HITL_PREFIX.into(),
            };
            let Some(on) = args.get("interrupt_on") else {
                return Err(at.config(ConfigError::new(
                    "human_in_the_loop",
                    "interrupt_on",
                    "(missing)",
                    "is required",
                    "a mapping {tool: true | false | {allowed_decisions: [...], description: TEXT}}",
                )));
            };
            let mut list = Vec::new();
            for (tool, _, node) in on.map()? {
                let v = At::new(format!("{}.{tool}", on.key), node);
                match &node.value {
                    Yaml::Bool(true) => list.push((tool.clone(), InterruptOn::all())),
                    Yaml::Bool(false) => {}
                    _ => {
                        let fields = v.map()?;
                        known_keys(&v.key, fields, &["allowed_decisions", "description"])?;
                        let mut config = InterruptOn {
                            allowed_decisions: Vec::new(),
                            description: None,
                        };
                        for (k, _, n) in fields {
                            let f = At::new(format!("{}.{k}", v.key), n);
                            if k == "description" {
                                config.description = Some(f.string()?);
                                continue;
                            }
                            for d in f.strings()? {
                                config.allowed_decisions.push(match d.as_str() {
                                    "approve" => DecisionType::Approve,
                                    "edit" => DecisionType::Edit,
                                    "reject" => DecisionType::Reject,
                                    "respond" => DecisionType::Respond,
                                    _ => {
                                        return Err(f.refuse(
                                            &format!("{d:?} is not a decision"),
                                            "a list of approve, edit, reject, respond",
                                        ));
                                    }
                                });
                            }
                        }
                        list.push((tool.clone(), config));
                    }
                }
            }
            let m = HumanInTheLoop::new(list, prefix)
                .map_err(|e| at.config(e))?
                .with_mode(mode);
            ready(Arc::new(m))
        }
        "llm_tool_selector" => {
            let model = match args.get("model") {
                Some(v) if !v.is_null() => Some((v.string()?, v.node.line)),
                _ => None,
            };
            let system_prompt = match args.get("system_prompt") {
                Some(v) => v.string()?,
                None => SELECTOR_PROMPT.into(),
            };
            let max_tools = match args.get("max_tools") {
                Some(v) => v.opt_count(MAX_LIMIT)?.map(|n| n as usize),
                None => None,
            };
            let always_include = match args.get("always_include") {
                Some(v) if !v.is_null() => v.strings()?,
                _ => Vec::new(),
            };
            let max_retries = match args.get("max_retries") {
                Some(v) => v.count(100)? as u32,
                None => 1,
            };
            let on_parsing_failure = match args.get("on_parsing_failure") {
                None => OnParsingFailure::Error,
                Some(v) => match &v.node.value {
                    Yaml::Seq(_) => OnParsingFailure::Tools(v.strings()?),
                    _ => match v.choice(&["error", "none", "all"])? {
                        "none" => OnParsingFailure::None,
                        "all" => OnParsingFailure::All,
                        _ => OnParsingFailure::Error,
                    },
                },
            };
            Ok(Entry::Selector {
                model,
                system_prompt,
                max_tools,
                always_include,
                max_retries,
                on_parsing_failure,
            })
        }
        "llm_tool_emulator" => {
            let Some(model) = args.get("model").filter(|v| !v.is_null()) else {
                return Err(at.config(ConfigError::new(
                    "llm_tool_emulator",
                    "model",
                    "(missing)",
                    "is required (LangChain's default hosted model is deprecated)",
                    "a model name the application resolves",
                )));
            };
            let tools = match args.get("tools") {
                Some(v) if !v.is_null() => Some(v.strings()?),
                _ => None,
            };
            Ok(Entry::Emulator {
                model: (model.string()?, model.node.line),
                tools,
            })
        }
        "model_router" => {
            let required = |key: &str, allowed: &str| {
                args.get(key).ok_or_else(|| {
                    at.config(ConfigError::new(
                        "model_router",
                        key,
                        "(missing)",
                        "is required",
                        allowed,
                    ))
                })
            };
            let choices = required(
                "choices",
                "a mapping {route: {model: NAME, criteria: TEXT}}",
            )?;
            let mut routes = Vec::new();
            for (route, _, node) in choices.map()? {
                let prefix = format!("{}.{route}", choices.key);
                let fields = At::new(prefix.clone(), node).map()?;
                known_keys(&prefix, fields, &["model", "criteria"])?;
                let get = |k: &str| {
                    fields
                        .iter()
                        .find(|(f, _, _)| f == k)
                        .map(|(_, _, n)| At::new(format!("{prefix}.{k}"), n))
                };
                let model = get("model").ok_or_else(|| {
                    At::new(prefix.clone(), node)
                        .refuse("has no model", "{model: NAME, criteria: TEXT}")
                })?;
                let criteria = match get("criteria") {
                    Some(c) => c.string()?,
                    None => String::new(),
                };
                routes.push((route.clone(), model.string()?, model.node.line, criteria));
            }
            let instructions =
                required("instructions", "the routing instructions, as text")?.string()?;
            let classifier = required("classifier", "a model name the application resolves")?;
            Ok(Entry::Router {
                routes,
                instructions,
                classifier: (classifier.string()?, classifier.node.line),
            })
        }
        _ => Err(keel_config::UnknownKey {
            key: prefix,
            suggestion: None,
            line: at.line,
        }
        .into()),
    }
}

fn fallback_models(list: &At<'_>) -> Result<Entry, StackError> {
    let Yaml::Seq(items) = &list.node.value else {
        return Err(list.refuse(
            "is not a list of model names",
            "a list of one or more model names",
        ));
    };
    if items.is_empty() {
        return Err(list.refuse("no fallback model", "a list of one or more model names"));
    }
    let mut names = Vec::new();
    for (i, n) in items.iter().enumerate() {
        names.push((At::new(format!("{}[{i}]", list.key), n).string()?, n.line));
    }
    Ok(Entry::Fallback(names))
}

fn context_editing(at: &EntryAt<'_>, args: &Args<'_>) -> Result<Entry, StackError> {
    if let Some(v) = args.get("token_count_method") {
        v.choice(&["approximate"]).map_err(|_| {
            v.refuse(
                "is not supported: Keel chat models do not count tokens",
                "approximate (LangChain's count_tokens_approximately)",
            )
        })?;
    }
    let Some(edits) = args.get("edits") else {
        return Ok(Entry::Ready(Arc::new(ContextEditing::default())));
    };
    let Yaml::Seq(items) = &edits.node.value else {
        return Err(edits.refuse("is not a list", "a list of `clear_tool_uses: {...}` edits"));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("{}[{i}]", edits.key);
        let entries = At::new(key.clone(), item).map()?;
        let [(kind, kind_line, settings)] = entries else {
            return Err(
                At::new(key, item).refuse("is not a one-key mapping", "`clear_tool_uses: {...}`")
            );
        };
        if kind != "clear_tool_uses" {
            return Err(keel_config::UnknownKey {
                key: format!("{key}.{kind}"),
                suggestion: Some("clear_tool_uses".into()),
                line: *kind_line,
            }
            .into());
        }
        let prefix = format!("{key}.clear_tool_uses");
        let fields = At::new(prefix.clone(), settings).map()?;
        known_keys(
            &prefix,
            fields,
            &[
                "trigger",
                "clear_at_least",
                "keep",
                "clear_tool_inputs",
                "exclude_tools",
                "placeholder",
            ],
        )?;
        let mut edit = ClearToolUses::default();
        for (k, _, n) in fields {
            let v = At::new(format!("{prefix}.{k}"), n);
            match k.as_str() {
                "trigger" => edit.trigger = v.count(MAX_LIMIT)?,
                "clear_at_least" => edit.clear_at_least = v.count(MAX_LIMIT)?,
                "keep" => edit.keep = v.count(MAX_LIMIT)? as usize,
                "clear_tool_inputs" => edit.clear_tool_inputs = v.bool()?,
                "exclude_tools" => edit.exclude_tools = v.strings()?,
                _ => edit.placeholder = v.string()?,
            }
        }
        edit.validate().map_err(|e| at.config(e))?;
        out.push(edit);
    }
    Ok(Entry::Ready(Arc::new(ContextEditing::new(out))))
}

fn resolve(
    models: &Arc<dyn ModelRegistry>,
    name: &str,
    line: u64,
    key: String,
) -> Result<Arc<dyn keel_core::model::ChatModel>, StackError> {
    models
        .resolve(name)
        .ok_or_else(|| StackError::UnknownModel {
            key,
            name: name.to_owned(),
            line,
        })
}

/// Builds an entry with the application's models.
pub(crate) fn build(
    entry: &Entry,
    index: usize,
    name: &str,
    line: u64,
    models: &Arc<dyn ModelRegistry>,
) -> Result<Option<Arc<dyn Middleware>>, StackError> {
    match entry {
        Entry::Ready(m) => Ok(Some(m.clone())),
        Entry::Fallback(names) => {
            let mut list = Vec::new();
            for (i, (model, line)) in names.iter().enumerate() {
                let resolved = models
                    .resolve(model)
                    .ok_or_else(|| StackError::UnknownModel {
                        key: format!("middleware[{index}].{name}.models[{i}]"),
                        name: model.clone(),
                        line: *line,
                    })?;
                list.push(resolved);
            }
            let m = ModelFallback::new(list).map_err(|source| StackError::Middleware {
                index,
                line,
                source: Box::new(source),
            })?;
            Ok(Some(Arc::new(m)))
        }
        Entry::Selector {
            model,
            system_prompt,
            max_tools,
            always_include,
            max_retries,
            on_parsing_failure,
        } => {
            let model = match model {
                Some((n, l)) => Some(resolve(
                    models,
                    n,
                    *l,
                    format!("middleware[{index}].{name}.model"),
                )?),
                None => None,
            };
            let m = LlmToolSelector::new(
                model,
                system_prompt.clone(),
                *max_tools,
                always_include.clone(),
                *max_retries,
                on_parsing_failure.clone(),
            )
            .map_err(|source| StackError::Middleware {
                index,
                line,
                source: Box::new(source),
            })?;
            Ok(Some(Arc::new(m)))
        }
        Entry::Emulator {
            model: (n, l),
            tools,
        } => {
            let model = resolve(models, n, *l, format!("middleware[{index}].{name}.model"))?;
            Ok(Some(Arc::new(LlmToolEmulator::new(model, tools.clone()))))
        }
        Entry::Router {
            routes,
            instructions,
            classifier: (cn, cl),
        } => {
            let mut list = Vec::new();
            for (route, model, model_line, criteria) in routes {
                list.push(Route {
                    name: route.clone(),
                    model: resolve(
                        models,
                        model,
                        *model_line,
                        format!("middleware[{index}].{name}.choices.{route}.model"),
                    )?,
                    criteria: criteria.clone(),
                });
            }
            let classifier = resolve(
                models,
                cn,
                *cl,
                format!("middleware[{index}].{name}.classifier"),
            )?;
            let m = ModelRouter::new(list, instructions.clone(), classifier).map_err(|source| {
                StackError::Middleware {
                    index,
                    line,
                    source: Box::new(source),
                }
            })?;
            Ok(Some(Arc::new(m)))
        }
    }
}
