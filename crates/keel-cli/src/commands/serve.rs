//! `keel serve`: an agent described in a keel.yaml, served over the LangGraph Agent
//! Server protocol (so `langgraph-sdk` clients and `agent-chat-ui` can use it), with a
//! chat page at `/`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use keel_server::ApiKeys;
use keel_server::origin::OriginPolicy;
use keel_server::serve::{ConnectionLimits, ServeOptions, run as serve};

use super::CommandResult;

/// Arguments of `keel serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent: a keel.yaml (model, system prompt, middleware); see examples/keel.yaml,
    /// and examples/keel-review.yaml for tool calls that wait for a person's decision.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 2024)]
    pub port: u16,
    /// The address to listen on. The default is reachable from this machine only.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Where threads' checkpoints and session memory live: sqlite://FILE (created on
    /// first use) or postgres://...
    #[arg(long, env = "KEEL_DATABASE_URL", default_value = "sqlite://keel.db")]
    pub database: String,
    /// API keys as KEY=OWNER pairs, separated by commas; each request must then send one
    /// in `x-api-key`, and sees only its owner's threads.
    #[arg(
        long,
        env = "KEEL_API_KEYS",
        value_name = "KEY=OWNER,...",
        hide_env_values = true
    )]
    pub api_keys: Option<String>,
    /// A file of KEY=OWNER lines (instead of --api-keys).
    #[arg(long, value_name = "FILE", conflicts_with = "api_keys")]
    pub api_keys_file: Option<PathBuf>,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = 2 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024..=(1 << 30)))]
    pub max_body_bytes: u64,
    /// The most messages one run's `input.messages` may carry; a longer list is refused
    /// with 422 before any of it is read.
    #[arg(long, default_value_t = keel_server::app::DEFAULT_MAX_INPUT_MESSAGES as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_input_messages: u64,
    /// Origins whose web pages may call the server (comma-separated, `*` for any).
    /// Without API keys only loopback origins (http://localhost:PORT, 127.0.0.1, [::1])
    /// and pages served under --allowed-hosts may; with keys, any origin may unless this
    /// is given.
    #[arg(long, value_name = "ORIGIN,...", value_delimiter = ',')]
    pub cors_origin: Vec<String>,
    /// Host names the server answers to besides loopback ones (comma-separated, `*` for
    /// any). Without API keys a request whose Host header is not one of them is refused
    /// (403), which stops DNS-rebinding pages; with keys every host is served unless
    /// this is given.
    #[arg(long, value_name = "HOST,...", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Seconds a client may take to send a request's headers (an idle or half-sent
    /// connection is closed after that).
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_read_timeout: u64,
    /// Seconds a client may take to send a request's body, once its headers arrived
    /// (slower bodies get 400).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_read_timeout: u64,
    /// Connections served at once; more wait in the listen backlog. Lowered to the
    /// open-file limit (raised to its hard limit at start) less 256.
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Seconds that Ctrl-C or SIGTERM waits for open responses and runs to finish
    /// before cancelling the runs (recorded as interrupted) and exiting.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub shutdown_timeout: u64,
    /// Seconds a response may wait for its client to read before the connection is
    /// closed (a client that stopped reading; the run it streamed goes on).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub write_timeout: u64,
    /// Export the agent's traces (OpenTelemetry GenAI spans: runs, model calls, tool
    /// calls, compactions) and counters to this OTLP/HTTP receiver, such as
    /// http://127.0.0.1:4318; overrides OTEL_EXPORTER_OTLP_ENDPOINT. Needs a keel built
    /// with the `otel` feature.
    #[arg(long, value_name = "ENDPOINT")]
    pub otlp: Option<String>,
}

/// Runs the server until Ctrl-C or SIGTERM.
pub fn run(args: Args) -> CommandResult {
    let keys_text = match (&args.api_keys, &args.api_keys_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        (None, None) => String::new(),
    };
    let api_keys = ApiKeys::parse(&keys_text)?;
    // Failed runs and storage errors go to stderr; RUST_LOG=info (or debug) shows more.
    // Built before the runtime: the exporter's HTTP client must not live inside it.
    let _telemetry = crate::telemetry::init(args.otlp.as_deref(), true)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(ServeOptions {
        config: args.config,
        host: args.host,
        port: args.port,
        database: args.database,
        api_keys,
        max_body_bytes: usize::try_from(args.max_body_bytes).unwrap_or(usize::MAX),
        max_input_messages: usize::try_from(args.max_input_messages).unwrap_or(usize::MAX),
        origins: OriginPolicy {
            cors_origins: trimmed(args.cors_origin),
            allowed_hosts: trimmed(args.allowed_hosts),
        },
        connections: ConnectionLimits {
            header_read_timeout: Duration::from_secs(args.header_read_timeout),
            body_read_timeout: Duration::from_secs(args.body_read_timeout),
            max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
            shutdown_deadline: Duration::from_secs(args.shutdown_timeout),
            write_timeout: Duration::from_secs(args.write_timeout),
        },
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// The non-empty entries of a comma-separated flag, trimmed.
fn trimmed(values: Vec<String>) -> Vec<String> {
    values
        .into_iter()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}
