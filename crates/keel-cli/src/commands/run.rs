//! `keel run --config STACK.yaml --transcript THREAD.jsonl --script ANSWERS.jsonl --json`:
//! runs one turn of a middleware stack on a thread, offline, with a scripted model, so a
//! user can see what a stack does to a conversation before deploying it.
//!
//! Without `--script`, the turn runs against the model the stack file describes as a
//! mapping: `model: {provider: openai | anthropic, model: NAME, base_url: URL, ...}`
//! (the keys of keel.yaml's `model`, see `keel serve`); the provider's environment
//! variables (`OPENAI_*`, `ANTHROPIC_*`) fill in what the mapping leaves out.
//!
//! The thread (which ends with the user's message) is the run's input. The model answers
//! with the script's lines in order: one assistant message per line (tool calls
//! allowed), or `{"error": {"kind": "server", "message": "..."}}` for a failed call
//! (kinds as in `keel_core::model::ModelErrorKind`: `rate_limited`, `server`,
//! `timeout`, `connection`, ...). Every model name in the stack (`model`, fallbacks, a
//! summary model) is that scripted model. The tools are a built-in `echo` (answers with
//! its arguments as JSON), the ones the stack's middleware define (`write_todos`), and
//! those of the file's `mcp_servers` (keel-mcp: started for the run, called for real), so
//! a script line calling an MCP tool runs it through the whole middleware stack.
//!
//! With `--json` it prints `{"messages": [...], "requests": [...], "events": [...]}`: the
//! final thread, every request the model received as it was sent (system message first,
//! then the conversation, and the tools offered), and the custom stream events
//! (middleware counters, compaction notices).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use keel_core::message::{Content, Message};
use keel_core::model::{ChatModel, ChatRequest, ModelError, ModelErrorKind, ModelProfile};
use keel_core::stream::{StreamEvent, StreamMode};
use keel_core::tool::{Tool, ToolError, ToolSpec};
use keel_middleware::stack::{ModelRegistry, Stack, StackLoader};
use keel_summarization::stack::SummarizationEntry;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::{Caps, CommandResult, clean_json, print};

/// Arguments of `keel run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stack file (YAML: `model`, `system_prompt`, `middleware`).
    #[arg(long, value_name = "STACK.yaml")]
    pub config: PathBuf,
    /// The thread so far, ending with the user's message (JSONL, one message per line).
    #[arg(long, value_name = "THREAD.jsonl")]
    pub transcript: PathBuf,
    /// The model's answers, in order (JSONL, one assistant message or error per line).
    /// Without it, the stack's `model: {provider: openai | anthropic, ...}` answers.
    #[arg(long, value_name = "ANSWERS.jsonl")]
    pub script: Option<PathBuf>,
    /// Print `{"messages", "requests", "events"}` as JSON (otherwise a short summary).
    #[arg(long)]
    pub json: bool,
}

/// One scripted answer.
type Answer = Result<Message, ModelError>;

/// Takes the requests a run's model recorded.
type TakeRequests = Box<dyn Fn() -> Vec<Value>>;

/// A model answering from the script and recording every request as sent.
struct ScriptModel {
    profile: ModelProfile,
    answers: Mutex<VecDeque<Answer>>,
    requests: Mutex<Vec<Value>>,
}

#[async_trait]
impl ChatModel for ScriptModel {
    fn profile(&self) -> &ModelProfile {
        &self.profile
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        let sent = request_json(&request);
        let n = {
            let mut requests = self.requests.lock();
            requests.push(sent);
            requests.len()
        };
        self.answers.lock().pop_front().unwrap_or_else(|| {
            Err(ModelError::new(
                ModelErrorKind::InvalidRequest,
                format!(
                    "the script has no answer left for model call #{n}; add a line to --script"
                ),
            ))
        })
    }
}

/// A request as `--json` prints it: the system message first, then the conversation,
/// and the tools offered.
fn request_json(request: &ChatRequest<'_>) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    if let Some(system) = request.system {
        messages.push(serde_json::to_value(system).unwrap_or(Value::Null));
    }
    for m in request.messages {
        messages.push(serde_json::to_value(m).unwrap_or(Value::Null));
    }
    let mut sent = json!({"messages": messages, "tools": request.tools});
    if let Some(choice) = request.tool_choice {
        sent["tool_choice"] = serde_json::to_value(choice).unwrap_or(Value::Null);
    }
    if request.internal {
        sent["internal"] = Value::Bool(true);
    }
    sent
}

/// The stack's own model (`model: {provider: ...}`), recording every request as sent.
struct Recorded {
    inner: Arc<dyn ChatModel>,
    requests: Mutex<Vec<Value>>,
}

#[async_trait]
impl ChatModel for Recorded {
    fn profile(&self) -> &ModelProfile {
        self.inner.profile()
    }

    async fn invoke(&self, request: ChatRequest<'_>) -> Result<Message, ModelError> {
        self.requests.lock().push(request_json(&request));
        self.inner.invoke(request).await
    }

    async fn stream(
        &self,
        request: ChatRequest<'_>,
    ) -> Result<keel_core::model::ChatStream, ModelError> {
        self.requests.lock().push(request_json(&request));
        self.inner.stream(request).await
    }
}

/// The built-in `echo` tool.
struct Echo(ToolSpec);

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, args: Value) -> Result<Content, ToolError> {
        Ok(Content::Text(args.to_string()))
    }
}

fn echo() -> Echo {
    Echo(ToolSpec::new(
        "echo",
        "Returns its arguments as JSON text.",
        json!({"type": "object", "additionalProperties": true}),
    ))
}

/// Reads the script: an assistant message or `{"error": {...}}` per line.
fn read_script(path: &Path, caps: &Caps) -> Result<VecDeque<Answer>, String> {
    let mut reader = keel_replay::input::open(path, caps.limits()).map_err(|e| e.to_string())?;
    let mut out = VecDeque::new();
    let where_ = |line: usize| format!("{}:{line}", path.display());
    while let Some(next) = reader.next_line() {
        let (line, text) = match next {
            Ok((_, text)) if text.trim().is_empty() => continue,
            Ok((line, text)) => (line, text.to_owned()),
            Err((line, e)) => return Err(format!("{}: {e:?}", where_(line))),
        };
        let value: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", where_(line)))?;
        if let Some(error) = value.get("error") {
            let kind: ModelErrorKind = serde_json::from_value(error.get("kind").cloned().unwrap_or(Value::Null))
                .map_err(|_| {
                    format!(
                        "{}: error.kind must be one of rate_limited, server, timeout, connection, authentication, invalid_request, context_overflow, malformed_response, rejected",
                        where_(line)
                    )
                })?;
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("scripted failure");
            out.push_back(Err(ModelError::new(kind, message)));
            continue;
        }
        let message = keel_replay::input::parse_message(&text)
            .map_err(|p| format!("{}: {p}", where_(line)))?;
        if !message.is_ai() {
            return Err(format!(
                "{}: a script line is an assistant message (\"role\": \"assistant\") or {{\"error\": ...}}, not a {} message",
                where_(line),
                message.role().as_str()
            ));
        }
        out.push_back(Ok(message));
    }
    Ok(out)
}

/// A command's error.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What `keel run` reads before it starts.
struct Inputs {
    /// The checked stack file.
    stack: Stack,
    /// The thread, ending with the user's message.
    thread: Vec<Message>,
    /// The script's answers, in order (`None`: the stack's own model answers).
    answers: Option<VecDeque<Answer>>,
}

/// Reads the stack, the thread (checking it ends with the user's message) and the
/// script, in that order.
fn read_inputs(args: &Args, caps: &Caps) -> Result<Inputs, BoxError> {
    // Keel's built-in entries and summarization (DeerFlow's schema).
    let stack = StackLoader::builtin()
        .with(SummarizationEntry)
        .load_file(&args.config)
        .map_err(|e| format!("{}: {e}", args.config.display()))?;
    let thread: Vec<Message> = keel_replay::input::read_messages(&args.transcript, caps.limits())?
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    if !thread.last().is_some_and(Message::is_human) {
        return Err(format!(
            "{}: the thread must end with the user's message (the turn to run)",
            args.transcript.display()
        )
        .into());
    }
    let answers = args
        .script
        .as_deref()
        .map(|script| read_script(script, caps))
        .transpose()?;
    Ok(Inputs {
        stack,
        thread,
        answers,
    })
}

/// The scripted model, named as the stack's `model` (or `scripted`).
fn script_model(stack: &Stack, answers: VecDeque<Answer>) -> Arc<ScriptModel> {
    Arc::new(ScriptModel {
        profile: ModelProfile::new(
            stack.model.clone().unwrap_or_else(|| "scripted".into()),
            "scripted",
        ),
        answers: Mutex::new(answers),
        requests: Mutex::new(Vec::new()),
    })
}

/// The model the stack file describes as a mapping, for a run without `--script`.
fn stack_model(stack: &Stack, config: &Path) -> Result<Arc<dyn ChatModel>, BoxError> {
    let spec = stack.model_spec.as_ref().ok_or_else(|| {
        format!(
            "{}: without --script, the stack's `model` must name its provider: \
             model: {{provider: openai | anthropic, model: NAME, base_url: URL}}",
            config.display()
        )
    })?;
    let choice = keel_server::config::ModelChoice::from_node(spec)
        .map_err(|e| format!("{}: {e}", config.display()))?;
    if !choice.is_online() {
        return Err(format!(
            "{}: the offline model cannot run a stack file's turn; give --script or a provider",
            config.display()
        )
        .into());
    }
    Ok(choice
        .build()
        .map_err(|e| format!("{}: {e}", config.display()))?)
}

/// Runs `keel run`.
pub fn run(args: Args, caps: &Caps) -> CommandResult {
    let Inputs {
        stack,
        thread,
        answers,
    } = read_inputs(&args, caps)?;
    // Spans go to OTEL_EXPORTER_OTLP_ENDPOINT when set (the `otel` feature); the guard
    // flushes them when the command ends.
    let _telemetry = crate::telemetry::init(None, false)?;
    // The stack loader leaves `mcp_servers` to the application, parsed with the rest.
    let mcp_servers = match &stack.mcp_servers {
        Some(list) => keel_mcp::servers_from_node(list)
            .map_err(|e| format!("{}: {e}", args.config.display()))?,
        None => Vec::new(),
    };
    let (shared, requests): (Arc<dyn ChatModel>, TakeRequests) = match answers {
        Some(answers) => {
            let model = script_model(&stack, answers);
            let m = model.clone();
            (
                model,
                Box::new(move || std::mem::take(&mut *m.requests.lock())),
            )
        }
        None => {
            let model = Arc::new(Recorded {
                inner: stack_model(&stack, &args.config)?,
                requests: Mutex::new(Vec::new()),
            });
            let m = model.clone();
            (
                model,
                Box::new(move || std::mem::take(&mut *m.requests.lock())),
            )
        }
    };
    let models: Arc<dyn ModelRegistry> = {
        let m = shared.clone();
        Arc::new(move |_: &str| Some(m.clone()))
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut builder = stack.agent_builder(shared, models)?.tool(echo());
    if !mcp_servers.is_empty() {
        let toolset = runtime
            .block_on(keel_mcp::McpToolset::connect(mcp_servers))
            .map_err(|e| format!("{}: {e}", args.config.display()))?;
        builder = builder.toolset(toolset);
    }
    let agent = builder.build()?;
    let (events, outcome) = runtime.block_on(async {
        let mut stream = agent.stream("keel-run", thread, &[StreamMode::Custom]);
        let events = custom_events(&mut stream).await;
        (events, stream.into_result())
    });
    let output = match outcome {
        Some(Ok(output)) => output,
        Some(Err(e)) => return Err(e.into()),
        None => return Err("the run ended without an outcome".into()),
    };
    let requests = requests();
    if args.json {
        print_json(output.state.messages.as_slice(), requests, events)?;
    } else {
        print_summary(output.state.messages.as_slice(), &requests, &events)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The custom events of a run's stream, as `{"node", "payload"}`, until it ends.
async fn custom_events<S: futures::Stream<Item = StreamEvent> + Unpin>(
    stream: &mut S,
) -> Vec<Value> {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        if let StreamEvent::Custom { node, payload } = event {
            events.push(json!({"node": node, "payload": payload}));
        }
    }
    events
}

/// Prints `{"messages", "requests", "events"}`.
fn print_json(
    messages: &[Message],
    requests: Vec<Value>,
    events: Vec<Value>,
) -> Result<(), BoxError> {
    // A struct, not a map, so the keys come in the documented order.
    #[derive(serde::Serialize)]
    struct Output<'a> {
        messages: &'a [Message],
        requests: Vec<Value>,
        events: Vec<Value>,
    }
    let doc = Output {
        messages,
        requests,
        events,
    };
    print(&clean_json(serde_json::to_string_pretty(&doc)?))?;
    print("\n")?;
    Ok(())
}

/// Prints one line per message of the final thread (role, text, tools called), then
/// how many requests and events `--json` would show.
fn print_summary(
    messages: &[Message],
    requests: &[Value],
    events: &[Value],
) -> std::io::Result<()> {
    let mut text = String::new();
    for m in messages {
        let calls = m
            .tool_calls()
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let extra = if calls.is_empty() {
            String::new()
        } else {
            format!(" [calls: {calls}]")
        };
        text.push_str(&format!(
            "{:>9}: {}{extra}\n",
            m.role().as_str(),
            super::clean(&m.text())
        ));
    }
    text.push_str(&format!(
        "{} model request(s), {} custom event(s); --json shows them all\n",
        requests.len(),
        events.len()
    ));
    print(&text)
}
