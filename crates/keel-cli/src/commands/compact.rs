//! `keel compact FILE --config summarization.yaml [--json] [--summary-model NAME]`: runs
//! the summarization middleware once over a transcript, as if the next model call were
//! made, and shows the request that would be sent and what happened.
//!
//! By default the summary comes from the deterministic extractive summarizer (offline, no
//! model, same output every time). `--summary-model NAME` summarizes with an
//! OpenAI-compatible model configured from the environment (`OPENAI_BASE_URL`,
//! `OPENAI_API_KEY`, ...; see keel-openai), which is also the run's model for fallback.
//!
//! Plain output lists the request (one line per message) and the report; `--json` prints
//! one object: `{"request": {"messages": [...]}, "report": {...}}`, the messages exactly
//! as they would be sent, ids included.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::message::Message;
use keel_core::middleware::{ModelRequest, Runtime};
use keel_core::model::{
    ChatModel, ChatRequest, ModelError, ModelErrorKind, ModelProfile, ModelSettings,
};
use keel_core::state::AgentState;
use keel_core::stream::{StreamEvent, StreamWriter};
use keel_replay::{Transcript, load_summarization, transcript_warnings};
use keel_summarization::cache::SummaryCache;
use keel_summarization::config::SummarizationConfig;
use keel_summarization::middleware::{CompactionReport, SummarizationMiddleware};
use serde_json::{Value, json};

use super::{Caps, CommandResult, clean, clean_json, print, warn};

/// Arguments of `keel compact`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A JSONL transcript (one message per line), the thread before the next model call.
    pub file: PathBuf,
    /// The summarization configuration (DeerFlow's `summarization.yaml` schema).
    #[arg(long)]
    pub config: PathBuf,
    /// Print one JSON object: `{"request": {"messages": [...]}, "report": {...}}`.
    #[arg(long)]
    pub json: bool,
    /// Summarize with this OpenAI-compatible model (from the environment), or with Claude
    /// as `anthropic:NAME` (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL), instead of the
    /// extractive summarizer.
    #[arg(long, value_name = "NAME")]
    pub summary_model: Option<String>,
    /// The model's context window in tokens (resolves `fraction` triggers and decides
    /// whether an uncompressed request fits). Also spelled `--context-window`, as in
    /// `keel replay`.
    #[arg(
        long,
        visible_alias = "context-window",
        value_name = "TOKENS",
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub max_input_tokens: Option<u64>,
    /// A system prompt to count with the request (the trigger counts the whole request);
    /// by default a system message on the transcript's first line is the system prompt.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
}

/// The run's model when no model is called: it has a profile (for counting and the
/// context window) and refuses calls, which the extractive mode never makes.
struct NoModel(ModelProfile);

#[async_trait]
impl ChatModel for NoModel {
    fn profile(&self) -> &ModelProfile {
        &self.0
    }
    async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
        Err(ModelError::new(
            ModelErrorKind::Rejected,
            "keel compact runs offline; pass --summary-model to use a model",
        ))
    }
}

/// What one run produced.
pub struct Outcome {
    /// The messages that would be sent, the system prompt first.
    pub messages: Vec<Message>,
    /// What the middleware did.
    pub report: CompactionReport,
    /// Custom stream events, in order.
    pub events: Vec<Value>,
    /// Transcript and configuration warnings (also printed on stderr).
    pub warnings: Vec<String>,
}

/// Runs the middleware once over `messages`. A system message on the first line is the
/// system prompt (as an agent keeps it: outside the conversation), unless `system` is given.
pub async fn compact(
    mut messages: Vec<Message>,
    config: SummarizationConfig,
    warnings: Vec<String>,
    summary_model: Option<Arc<dyn ChatModel>>,
    max_input_tokens: Option<u64>,
    system: Option<String>,
    thread_id: &str,
) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
    let system = match system {
        Some(text) => Some(Message::system(text)),
        None if messages
            .first()
            .is_some_and(|m| m.role() == keel_core::message::Role::System) =>
        {
            Some(messages.remove(0))
        }
        None => None,
    };
    let builder = SummarizationMiddleware::builder(config)
        .cache(Arc::new(SummaryCache::new(1)))
        .report_ids(true);
    let (builder, run_model): (_, Arc<dyn ChatModel>) = match summary_model {
        Some(model) => (builder.summary_model(model.clone()), model),
        None => {
            let mut profile = ModelProfile::new("offline", "offline");
            profile.max_input_tokens = max_input_tokens;
            (builder.extractive(), Arc::new(NoModel(profile)))
        }
    };
    let middleware = builder.build()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut runtime = Runtime::detached(thread_id);
    runtime.writer = StreamWriter::new(tx).for_node("SummarizationMiddleware");
    let request = ModelRequest {
        messages: Arc::new(messages),
        system,
        tools: Arc::new(Vec::new()),
        tool_choice: None,
        settings: ModelSettings::default(),
        model: run_model,
        state: Arc::new(AgentState::default()),
        runtime,
    };
    let prepared = middleware.prepare(&request).await;
    drop(request);
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let StreamEvent::Custom { payload, .. } = event {
            events.push(payload);
        }
    }
    // As sent to the provider: the system prompt first.
    let mut sent: Vec<Message> = prepared.request.system.iter().cloned().collect();
    sent.extend(prepared.request.messages.iter().cloned());
    Ok(Outcome {
        messages: sent,
        report: prepared.report,
        events,
        warnings,
    })
}

fn summary_model(
    name: &str,
) -> Result<Arc<dyn ChatModel>, Box<dyn std::error::Error + Send + Sync>> {
    Ok(keel_replay::models::model_by_name(name)?)
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

/// Plain-text rendering of an outcome.
pub fn render_plain(o: &Outcome) -> String {
    let r = &o.report;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "request ({} messages, {} tokens):",
        o.messages.len(),
        r.tokens_after
    );
    for m in &o.messages {
        let calls: Vec<&str> = m.tool_calls().iter().map(|c| c.name.as_str()).collect();
        let calls = if calls.is_empty() {
            String::new()
        } else {
            format!(" -> {}", calls.join(", "))
        };
        let tag = if m.name() == Some(keel_summarization::SUMMARY_NAME) {
            " [summary]"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:<9} {}{tag}: {}{calls}",
            m.role().as_str(),
            clean(m.id()),
            clean(&one_line(&m.text(), 100))
        );
    }
    let action = serde_json::to_value(r.action)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let source = r
        .source
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .map(|s| format!(" (summary: {s})"))
        .unwrap_or_default();
    let _ = writeln!(out, "report:");
    let _ = writeln!(out, "  action:     {action}{source}");
    let _ = writeln!(
        out,
        "  tokens:     {} -> {}",
        r.tokens_before, r.tokens_after
    );
    let _ = writeln!(
        out,
        "  messages:   {} -> {}",
        r.messages_before, r.messages_after
    );
    let _ = writeln!(
        out,
        "  summarized: {} {}",
        r.summarized_ids.len(),
        clean(&r.summarized_ids.join(" "))
    );
    let _ = writeln!(
        out,
        "  rescued:    {} {}",
        r.rescued_ids.len(),
        clean(&r.rescued_ids.join(" "))
    );
    let _ = writeln!(
        out,
        "  kept:       {} {}",
        r.kept_ids.len(),
        clean(&r.kept_ids.join(" "))
    );
    if let Some(e) = &r.error {
        let _ = writeln!(out, "  error:      {}", clean(e));
    }
    let _ = writeln!(out, "  events:     {}", o.events.len());
    for e in &o.events {
        let _ = writeln!(out, "    {}", clean_json(e.to_string()));
    }
    out
}

/// The `--json` object.
pub fn render_json(o: &Outcome) -> Result<String, serde_json::Error> {
    let mut report = serde_json::to_value(&o.report)?;
    if let Value::Object(map) = &mut report {
        map.insert("events".into(), Value::Array(o.events.clone()));
        map.insert("warnings".into(), json!(o.warnings));
    }
    let request = json!({"messages": o.messages});
    // By hand so that `request` comes first (serde_json sorts keys).
    Ok(clean_json(format!(
        "{{\"request\":{request},\"report\":{report}}}\n"
    )))
}

/// Runs the command.
pub fn run(args: Args, caps: &Caps) -> CommandResult {
    let transcript = Transcript::read(&args.file, caps.limits())?;
    let mut warnings = transcript_warnings(&args.file, &transcript);
    let (config, config_warnings) = load_summarization(
        &args.config,
        args.max_input_tokens,
        args.summary_model.as_deref(),
        Some(caps.max_config_bytes),
    )?;
    warnings.extend(config_warnings);
    for w in &warnings {
        warn(w);
    }
    let messages = transcript.into_all_messages();
    let model = args
        .summary_model
        .as_deref()
        .map(summary_model)
        .transpose()?;
    let thread = args
        .file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "compact".into());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(compact(
        messages,
        config,
        warnings,
        model,
        args.max_input_tokens,
        args.system,
        &thread,
    ))?;
    let text = if args.json {
        render_json(&outcome)?
    } else {
        render_plain(&outcome)
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::ToolCall;

    fn thread() -> Vec<Message> {
        let mut m = vec![Message::human("Please fix the failing build.").with_id("u0")];
        for i in 0..30 {
            m.push(
                Message::ai("")
                    .with_tool_calls(vec![ToolCall::new(
                        format!("c{i}"),
                        "bash",
                        json!({"cmd": "make"}),
                    )])
                    .with_id(format!("a{i}")),
            );
            m.push(
                Message::tool(format!("c{i}"), "error: missing symbol ".repeat(20))
                    .with_id(format!("t{i}")),
            );
        }
        m
    }

    fn config() -> SummarizationConfig {
        SummarizationConfig::from_yaml_str("enabled: true\ntrigger: {type: messages, value: 40}\nkeep: {type: messages, value: 6}\n").unwrap().config
    }

    #[tokio::test]
    async fn compacts_offline_and_reports_ids() {
        let o = compact(thread(), config(), vec![], None, None, None, "t")
            .await
            .unwrap();
        assert_eq!(o.messages[0].name(), Some("summary"));
        assert_eq!(o.messages[1].id(), "u0", "the task is rescued");
        assert_eq!(o.report.rescued_ids, vec!["u0"]);
        assert_eq!(
            o.report.kept_ids.len() + o.report.rescued_ids.len() + 1,
            o.messages.len()
        );
        assert_eq!(o.report.kept, o.report.kept_ids.len());
        assert!(o.report.tokens_after < o.report.tokens_before);
        assert_eq!(
            o.events.len(),
            1,
            "extractive: no compacting toast, one completion event"
        );
        let v: Value = serde_json::from_str(&render_json(&o).unwrap()).unwrap();
        assert_eq!(v["request"]["messages"][1]["id"], "u0");
        assert_eq!(v["report"]["action"], "compacted");
        assert_eq!(v["report"]["events"][0]["type"], "context_compacted");
        let plain = render_plain(&o);
        assert!(
            plain.contains("action:     compacted (summary: extractive)"),
            "{plain}"
        );
    }

    #[tokio::test]
    async fn summary_model_path_calls_an_openai_compatible_server() {
        use wiremock::matchers::{method, path};
        use wiremock::{Mock, MockServer, ResponseTemplate};
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "id": "cmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": "small",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "- the build fails on a missing symbol"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            })))
            .expect(1)
            .mount(&server)
            .await;
        let model = keel_openai::OpenAiConfig::new("small")
            .with_base_url(format!("{}/v1", server.uri()))
            .with_api_key("test")
            .build()
            .unwrap();
        let o = compact(
            thread(),
            config(),
            vec![],
            Some(Arc::new(model)),
            None,
            None,
            "t",
        )
        .await
        .unwrap();
        assert_eq!(
            o.report.source,
            Some(keel_summarization::events::SummarySource::Model)
        );
        assert!(
            o.messages[0]
                .text()
                .ends_with("- the build fails on a missing symbol")
        );
        let types: Vec<_> = o
            .events
            .iter()
            .map(|e| e["type"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(types, ["context_compacting", "context_compacted"]);
        let body: Value =
            serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
        let prompt = body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            prompt.contains("<new_messages>") && prompt.contains("error: missing symbol"),
            "{prompt}"
        );
    }

    #[tokio::test]
    async fn deterministic_and_untouched_under_the_trigger() {
        let a = compact(thread(), config(), vec![], None, None, None, "t")
            .await
            .unwrap();
        let b = compact(thread(), config(), vec![], None, None, None, "t")
            .await
            .unwrap();
        assert_eq!(render_json(&a).unwrap(), render_json(&b).unwrap());
        let short = thread()[..5].to_vec();
        let o = compact(short.clone(), config(), vec![], None, None, None, "t")
            .await
            .unwrap();
        assert_eq!(o.messages, short);
        assert!(o.events.is_empty());
    }
}
