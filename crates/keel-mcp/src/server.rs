//! One MCP server's connection: started, watched, restarted.
//!
//! ```text
//! connect (spawn or dial, initialize, tools/list) ─▶ ready: tools published, calls served
//!      ▲                                               │ notifications/tools/list_changed
//!      │ backoff 250 ms, doubling, at most 30 s         │   → tools/list again, republished
//!      └── transport closed (process died) or a call ◀──┘
//!          found it broken (HTTP endpoint down)
//!          calls fail meanwhile with McpError::Unavailable naming the server
//! ```

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use keel_core::tool::Tool;
use parking_lot::RwLock;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, watch};

use crate::config::{McpServerConfig, Transport};
use crate::error::McpError;
use crate::tool::McpTool;

/// How long connecting (spawn or dial, `initialize`, the first `tools/list`) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// The first wait before a restart; it doubles on each failed attempt.
pub const RESTART_INITIAL_DELAY: Duration = Duration::from_millis(250);
/// The longest wait between two restart attempts.
pub const RESTART_MAX_DELAY: Duration = Duration::from_secs(30);

/// What the client tells servers about itself, and where their notifications go.
#[derive(Clone)]
pub(crate) struct Handler {
    changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("keel", env!("CARGO_PKG_VERSION")),
        )
        // The newest version with `initialize`, which servers on the SDKs of 2025 and
        // 2026 speak; on it `notifications/tools/list_changed` needs no subscription.
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

type Running = RunningService<RoleClient, Handler>;

/// The server's state as calls see it.
enum Status {
    /// Connected: the peer to call.
    Ready(Peer<RoleClient>),
    /// Not connected (restarting): why.
    Down(String),
}

/// One configured server, shared by its tools and its supervisor task.
pub(crate) struct Server {
    pub(crate) config: McpServerConfig,
    status: RwLock<Status>,
    tools: RwLock<Arc<[Arc<dyn Tool>]>>,
    changed: Arc<Notify>,
    /// Woken by a call that found the transport broken: the supervisor drops the
    /// connection and makes a new one (a streamable HTTP client's session does not
    /// end by itself when its endpoint goes away).
    broken: Notify,
    /// Counts connections made (1 after the first), for tests and logs.
    generation: std::sync::atomic::AtomicU64,
    /// The child process's id (stdio), 0 when none.
    pid: std::sync::atomic::AtomicU32,
}

impl Server {
    /// The peer to call and the connection it belongs to, or why there is none.
    pub(crate) fn peer(&self) -> Result<(Peer<RoleClient>, u64), McpError> {
        match &*self.status.read() {
            Status::Ready(peer) => Ok((peer.clone(), self.generation())),
            Status::Down(reason) => Err(McpError::Unavailable {
                server: self.config.name.clone(),
                reason: reason.clone(),
            }),
        }
    }

    /// The tools as last listed.
    pub(crate) fn tools(&self) -> Arc<[Arc<dyn Tool>]> {
        self.tools.read().clone()
    }

    /// Connections made so far.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The process id of a stdio server's child, while it has one.
    pub(crate) fn process_id(&self) -> Option<u32> {
        let pid = self.pid.load(std::sync::atomic::Ordering::Relaxed);
        (pid != 0 && matches!(self.config.transport(), Transport::Stdio { .. })).then_some(pid)
    }

    /// Marks connection `generation` down (a call on it saw its transport fail) and
    /// has the supervisor reconnect. A call that failed on an older connection changes
    /// nothing.
    pub(crate) fn mark_down(&self, generation: u64, reason: String) {
        let mut status = self.status.write();
        if matches!(*status, Status::Ready(_)) && self.generation() == generation {
            *status = Status::Down(reason);
            self.broken.notify_one();
        }
    }

    fn is_down(&self) -> bool {
        matches!(*self.status.read(), Status::Down(_))
    }
}

/// Connects to the server and starts its supervisor, which lives until `stop` is
/// dropped.
pub(crate) async fn start(
    config: McpServerConfig,
    stop: watch::Receiver<()>,
) -> Result<Arc<Server>, McpError> {
    let changed = Arc::new(Notify::new());
    let server = Arc::new(Server {
        config,
        status: RwLock::new(Status::Down("connecting".into())),
        tools: RwLock::new(Arc::from(Vec::new())),
        changed: changed.clone(),
        broken: Notify::new(),
        generation: Default::default(),
        pid: Default::default(),
    });
    let running = connect(&server).await?;
    tokio::spawn(supervise(server.clone(), running, stop));
    Ok(server)
}

/// Spawns or dials the server, initializes, lists its tools and publishes them.
async fn connect(server: &Arc<Server>) -> Result<Running, McpError> {
    let name = server.config.name.clone();
    let failed = |message: String| McpError::Connect {
        server: name.clone(),
        message,
    };
    let attempt = async {
        let handler = Handler {
            changed: server.changed.clone(),
        };
        let running = match server.config.transport() {
            Transport::Stdio { command } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(&server.config.args).envs(&server.config.env);
                if let Some(dir) = &server.config.cwd {
                    cmd.current_dir(dir);
                }
                let (process, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| failed(format!("cannot start {command:?}: {e}")))?;
                server.pid.store(
                    process.id().unwrap_or(0),
                    std::sync::atomic::Ordering::Relaxed,
                );
                if let Some(stderr) = stderr {
                    forward_stderr(name.clone(), stderr);
                }
                handler
                    .serve(process)
                    .await
                    .map_err(|e| failed(e.to_string()))?
            }
            Transport::Http { url } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
                if let Some(var) = &server.config.bearer_token_env {
                    let token = std::env::var(var).map_err(|_| {
                        failed(format!(
                            "bearer_token_env names {var}, which is not set in the environment"
                        ))
                    })?;
                    config = config.auth_header(token);
                }
                let mut headers = std::collections::HashMap::new();
                for (k, v) in &server.config.headers {
                    let k = http::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| failed(format!("header {k:?}: {e}")))?;
                    let v = http::HeaderValue::from_str(v)
                        .map_err(|e| failed(format!("header {k}: {e}")))?;
                    headers.insert(k, v);
                }
                let transport =
                    StreamableHttpClientTransport::from_config(config.custom_headers(headers));
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| failed(e.to_string()))?
            }
        };
        let peer = running.peer().clone();
        refresh(server, &peer).await?;
        Ok::<_, McpError>(running)
    };
    let running = tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .map_err(|_| failed(format!("no answer within {CONNECT_TIMEOUT:?}")))??;
    {
        let mut status = server.status.write();
        server
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *status = Status::Ready(running.peer().clone());
    }
    tracing::info!(server = %server.config.name, tools = server.tools().len(), "MCP server connected");
    Ok(running)
}

/// Lists the server's tools and publishes the admitted ones.
async fn refresh(server: &Arc<Server>, peer: &Peer<RoleClient>) -> Result<(), McpError> {
    let listed = peer.list_all_tools().await.map_err(|e| McpError::Connect {
        server: server.config.name.clone(),
        message: format!("tools/list failed: {e}"),
    })?;
    // A name in the allow list the server does not offer is most likely a typo.
    for wanted in server.config.tools.iter().flatten() {
        if !listed.iter().any(|t| t.name == wanted.as_str()) {
            tracing::warn!(
                server = %server.config.name,
                "tools lists {wanted:?}, which the server does not offer; it offers: {}",
                listed.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>().join(", ")
            );
        }
    }
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for tool in listed {
        if !server.config.admits(&tool.name) {
            continue;
        }
        let exposed = server.config.exposed_name(&tool.name);
        if !crate::config::is_name(&exposed) {
            tracing::warn!(
                server = %server.config.name,
                "tool {exposed:?} left out: a tool name is 1 to 64 characters from A-Z a-z 0-9 _ -"
            );
            continue;
        }
        tools.push(Arc::new(McpTool::new(server, &tool, exposed)));
    }
    *server.tools.write() = Arc::from(tools);
    Ok(())
}

/// Copies the server's stderr to the log, a line at a time.
fn forward_stderr(name: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server = %name, "{line}");
        }
    });
}

/// Watches the connection: relists on `list_changed`, restarts with backoff when the
/// transport closes, stops when `stop`'s sender is dropped.
async fn supervise(server: Arc<Server>, running: Running, mut stop: watch::Receiver<()>) {
    let mut running = Some(running);
    let mut delay = RESTART_INITIAL_DELAY;
    loop {
        if let Some(service) = running.take() {
            let peer = service.peer().clone();
            let closed = service.waiting();
            tokio::pin!(closed);
            loop {
                tokio::select! {
                    _ = &mut closed => break,
                    // A wake-up left from an earlier connection finds this one up.
                    _ = server.broken.notified() => if server.is_down() { break },
                    _ = server.changed.notified() => {
                        if let Err(e) = refresh(&server, &peer).await {
                            tracing::warn!(server = %server.config.name, "{e}");
                        }
                    }
                    _ = stop.changed() => return,
                }
            }
            *server.status.write() = Status::Down("the connection closed; restarting".into());
            tracing::warn!(server = %server.config.name, "MCP server connection closed; restarting");
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return,
        }
        match connect(&server).await {
            Ok(service) => {
                running = Some(service);
                delay = RESTART_INITIAL_DELAY;
            }
            Err(e) => {
                *server.status.write() = Status::Down(e.to_string());
                tracing::warn!(server = %server.config.name, "restart failed: {e}");
                delay = (delay * 2).min(RESTART_MAX_DELAY);
            }
        }
    }
}
