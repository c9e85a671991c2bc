//! [`run`]: what `keel serve` does — load a keel.yaml, open the store, build the agent,
//! listen, and stop cleanly on Ctrl-C or SIGTERM: in-flight responses and runs get until
//! a deadline to finish, then the runs are cancelled and recorded as interrupted.
//!
//! [`serve_app`] is the accept loop: a client that sends its request's headers or body
//! too slowly is cut off ([`ConnectionLimits`]), and at most so many connections are
//! served at once (more wait in the listen backlog), so half-sent requests cannot hold
//! every file descriptor.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use keel_store::Store;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::app::{ServerOptions, router_parts};
use crate::auth::ApiKeys;
use crate::config::{KeelYamlError, StackConfig};
use crate::lease::Leases;
use crate::registry::Registry;
use crate::runs::RunManager;
use crate::store_api::ItemStore;

/// What `keel serve` needs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The keel.yaml.
    pub config: PathBuf,
    /// The address to bind (127.0.0.1 by default: not reachable from other machines).
    pub host: String,
    /// The port (0 picks a free one; the address is printed).
    pub port: u16,
    /// `sqlite://keel.db` (created on first use), or `postgres://...`.
    pub database: String,
    /// API keys; empty for an open server.
    pub api_keys: ApiKeys,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The most messages one run input may carry.
    pub max_input_messages: usize,
    /// Origins and host names served besides loopback ones.
    pub origins: crate::origin::OriginPolicy,
    /// Timeouts, the connection cap and the shutdown deadline.
    pub connections: ConnectionLimits,
}

/// How long a client may take to send a request, how many connections are served at
/// once, and how long a stop waits for responses and runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time for a request's headers to arrive, counted from the end of the previous
    /// response on the connection (or from its opening): an idle or half-sent
    /// connection is closed after it.
    pub header_read_timeout: Duration,
    /// Time for a request's body to arrive in full, counted once its headers have; a
    /// slower body fails the request with 400.
    pub body_read_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog until one closes.
    /// [`run`] lowers it to what the open-file limit allows.
    pub max_connections: usize,
    /// After Ctrl-C or SIGTERM: how long open responses and runs may take to finish
    /// before the runs are cancelled (recorded as interrupted) and the server exits.
    pub shutdown_deadline: Duration,
    /// How long a write to a client may wait for the client to read: a connection whose
    /// client stopped reading is closed after it (the run it streamed goes on).
    pub write_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 4096,
            shutdown_deadline: Duration::from_secs(10),
            write_timeout: Duration::from_secs(60),
        }
    }
}

/// File descriptors kept back from the connection cap for the database, the listener,
/// logs and outgoing model calls.
pub const RESERVED_FDS: u64 = 256;

/// How long the responses of runs cancelled by a stop get to send their last events.
pub const LAST_EVENTS_GRACE: Duration = Duration::from_secs(1);

/// How long cancelled runs get to record their end once the shutdown deadline passed.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The agent file is wrong; the message names the file as given.
    #[error("{}", source.in_file(path))]
    Config {
        /// The file, as given on the command line.
        path: std::path::PathBuf,
        /// What is wrong, with its key and line.
        source: KeelYamlError,
    },
    /// The database could not be opened.
    #[error("cannot open the database {url}: {message}")]
    Database {
        /// The URL, password removed.
        url: String,
        /// Why.
        message: String,
    },
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// host:port.
        address: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// Builds the agent and serves it until Ctrl-C or SIGTERM. Prints one line with the
/// address once it listens.
pub async fn run(options: ServeOptions) -> Result<(), ServeError> {
    let in_file = |source| ServeError::Config {
        path: options.config.clone(),
        source,
    };
    let stack = StackConfig::from_file(&options.config).map_err(in_file)?;
    let (store, records) = open_records(&options.database).await?;
    let agent = stack
        .build_connected(Arc::new(store))
        .await
        .map_err(in_file)?;
    let model = agent.model_profile().name.clone();
    let connections = within_fd_limit(options.connections.clone());
    let server = ServerOptions {
        graph_id: stack.name.clone(),
        description: stack.description.clone(),
        api_keys: options.api_keys.clone(),
        max_body_bytes: options.max_body_bytes,
        max_input_messages: options.max_input_messages,
        origins: options.origins.clone(),
        registry: Some(Arc::new(records.registry)),
        items: Some(Arc::new(records.items)),
        leases: records.leases,
        ..ServerOptions::default()
    };
    let address = format!("{}:{}", options.host, options.port);
    let listener = bind(&address).await.map_err(|source| ServeError::Bind {
        address: address.clone(),
        source,
    })?;
    let local: SocketAddr = listener.local_addr()?;
    println!(
        "keel serve: listening on http://{local} (assistant {:?}, model {model}, database {}, auth {})",
        stack.name,
        redact(&options.database),
        if options.api_keys.enabled() {
            "x-api-key"
        } else {
            "off"
        },
    );
    let (app, manager) = router_parts(agent, server);
    serve_app(listener, app, Some(manager), &connections, shutdown()).await;
    Ok(())
}

/// What the server keeps in the database besides the agent's checkpoints.
struct Records {
    registry: Registry,
    items: ItemStore,
    leases: Leases,
}

/// Opens the database, its thread and run records, its item store and the thread
/// leases (PostgreSQL's advisory locks when several processes share it). A SQLite
/// database belongs to one process, so the runs its last server left running are
/// marked as failed.
async fn open_records(database: &str) -> Result<(Store, Records), ServeError> {
    let failed = |e: &dyn std::fmt::Display| ServeError::Database {
        url: redact(database),
        message: e.to_string(),
    };
    let store = Store::connect(database).await.map_err(|e| failed(&e))?;
    let registry = Registry::for_store(&store).await.map_err(|e| failed(&e))?;
    let items = ItemStore::for_store(&store).await.map_err(|e| failed(&e))?;
    if !registry.is_shared() {
        match registry.recover_after_restart().await {
            Ok(0) => {}
            Ok(n) => {
                tracing::warn!("{n} run(s) left unfinished by the last server marked as failed")
            }
            Err(e) => tracing::error!("could not close the last server's runs: {e}"),
        }
    }
    let leases = match &store {
        #[cfg(feature = "postgres")]
        Store::Postgres(_) => Leases::postgres(database).await.map_err(|e| failed(&e))?,
        _ => Leases::Local,
    };
    Ok((
        store,
        Records {
            registry,
            items,
            leases,
        },
    ))
}

/// The connection limits, with `max_connections` lowered to what the open-file limit
/// (raised to its hard limit first) leaves after [`RESERVED_FDS`].
fn within_fd_limit(mut connections: ConnectionLimits) -> ConnectionLimits {
    if let Some(limit) = raise_fd_limit() {
        let allowed =
            usize::try_from(limit.saturating_sub(RESERVED_FDS).max(1)).unwrap_or(usize::MAX);
        if connections.max_connections > allowed {
            tracing::warn!(
                "--max-connections {} lowered to {allowed}: the open-file limit is {limit}, {RESERVED_FDS} kept for the rest",
                connections.max_connections
            );
            connections.max_connections = allowed;
        }
    }
    connections
}

/// Serves `app` on `listener` until `stop` completes, within `limits`; then stops
/// accepting, lets open responses and `runs` finish until the shutdown deadline, and
/// cancels what is left of the runs.
pub async fn serve_app(
    listener: TcpListener,
    app: Router,
    runs: Option<Arc<RunManager>>,
    limits: &ConnectionLimits,
    stop: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let body_timeout = limits.body_read_timeout;
    let mut stop = std::pin::pin!(stop);
    loop {
        // Over the cap, the next connection waits in the kernel's backlog.
        let permit = tokio::select! {
            () = &mut stop => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {e}");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let request =
                request.map(|body| axum::body::Body::new(DeadlineBody::new(body, body_timeout)));
            app.clone().oneshot(request)
        });
        let connection = graceful.watch(http.serve_connection(
            TokioIo::new(WriteDeadline::new(stream, limits.write_timeout)),
            service,
        ));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    drain(graceful, runs, limits).await;
}

/// After the stop: lets open responses and `runs` finish until the shutdown deadline,
/// cancels what is left of the runs, and gives their last events a moment to go out.
async fn drain(
    graceful: GracefulShutdown,
    runs: Option<Arc<RunManager>>,
    limits: &ConnectionLimits,
) {
    let deadline = tokio::time::Instant::now() + limits.shutdown_deadline;
    let mut drained = std::pin::pin!(graceful.shutdown());
    let mut connections_closed = false;
    let settled = async {
        (&mut drained).await;
        connections_closed = true;
        if let Some(runs) = &runs {
            runs.wait_idle().await;
        }
    };
    if tokio::time::timeout_at(deadline, settled).await.is_err() {
        tracing::warn!(
            "still busy {:?} after the stop: cancelling what is left",
            limits.shutdown_deadline
        );
    }
    if let Some(runs) = &runs {
        let stopped = runs.shutdown(CANCEL_GRACE).await;
        if stopped > 0 {
            tracing::warn!("{stopped} run(s) cancelled by the stop");
        }
    }
    // The cancelled runs' streams end now: give their last events a moment to go out.
    if !connections_closed {
        let _ = tokio::time::timeout(LAST_EVENTS_GRACE, drained).await;
    }
}

/// An accept that failed: a connection reset before it was accepted is skipped; out of
/// file descriptors (or memory), the loop pauses so that connections can close.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!("accepting a connection: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Raises the open-file soft limit to the hard limit (where the system allows it), and
/// returns the soft limit in force; `None` where it cannot be read.
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let current = limit.current?;
        let Some(maximum) = limit.maximum else {
            return Some(current);
        };
        if maximum <= current {
            return Some(current);
        }
        let raised = rustix::process::Rlimit {
            current: Some(maximum),
            maximum: Some(maximum),
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => Some(maximum),
            Err(e) => {
                tracing::warn!("cannot raise the open-file limit from {current} to {maximum}: {e}");
                Some(current)
            }
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The request body was not received within the body read timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimeout(pub Duration);

/// A request body that fails once its deadline passes without the body having ended.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl DeadlineBody {
    fn new(inner: Incoming, limit: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(limit)),
            limit,
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = hyper::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout(self.limit).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Connections the kernel queues before the server accepts them. The standard library's
/// 128 overflows when a few hundred clients connect at once (the dropped SYNs come back
/// a second later), so a burst of runs starting together needs more.
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds `host:port` (the first address it resolves to) with [`LISTEN_BACKLOG`].
pub async fn bind(address: &str) -> std::io::Result<TcpListener> {
    let addr = tokio::net::lookup_host(address)
        .await?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address"))?;
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// `postgres://user:secret@host/db` without the secret.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let auth = &url[scheme + 3..at];
            match auth.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

async fn shutdown() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn the_open_file_soft_limit_is_raised_to_the_hard_limit() {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let before = getrlimit(Resource::Nofile);
        let (Some(soft), Some(hard)) = (before.current, before.maximum) else {
            return; // unlimited: nothing to raise
        };
        // Lowering the soft limit is always allowed; the test then raises it back.
        let lowered = soft.min(hard).saturating_sub(1).max(64).min(hard);
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(lowered),
                maximum: Some(hard),
            },
        )
        .unwrap();
        assert_eq!(raise_fd_limit(), Some(hard));
        assert_eq!(getrlimit(Resource::Nofile).current, Some(hard));
    }

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("sqlite://keel.db"), "sqlite://keel.db");
    }
}

/// A connection whose writes fail with `TimedOut` once one has waited `limit` for the
/// client to take data: a client that stops reading (its TCP window full) would
/// otherwise hold the connection, and the buffers of what it was sent, for ever.
struct WriteDeadline<T> {
    io: T,
    limit: Duration,
    /// Set while a write is waiting; reset by every write that makes progress.
    waiting: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    fn new(io: T, limit: Duration) -> Self {
        WriteDeadline {
            io,
            limit,
            waiting: None,
        }
    }

    /// `Pending` from the inner writer starts (or keeps) the clock; past the limit the
    /// write fails. Anything else stops the clock.
    fn watch<R>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        polled: std::task::Poll<std::io::Result<R>>,
    ) -> std::task::Poll<std::io::Result<R>> {
        use std::task::Poll;
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let limit = self.limit;
        let timer = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client took nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod write_deadline_tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A client that never reads: writes fill the pipe, then fail after the limit
    /// instead of waiting for ever.
    #[tokio::test]
    async fn a_write_the_client_never_takes_fails_after_the_limit() {
        let (client, server) = tokio::io::duplex(1024);
        let mut server = WriteDeadline::new(server, Duration::from_millis(100));
        let chunk = vec![b'x'; 4096];
        let written = tokio::time::timeout(Duration::from_secs(10), server.write_all(&chunk)).await;
        let err = written
            .expect("the write must end by itself, well before 10 s")
            .expect_err("nothing reads the pipe");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        drop(client);
    }

    /// A client that reads, however slowly, keeps the connection: the clock restarts
    /// at every write that makes progress.
    #[tokio::test]
    async fn a_slow_reader_is_not_cut_off() {
        use tokio::io::AsyncReadExt;
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = WriteDeadline::new(server, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                match client.read(&mut buf).await {
                    Ok(0) | Err(_) => return got.len(),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        server
            .write_all(&vec![b'y'; 1024])
            .await
            .expect("a reading client takes it all");
        server.shutdown().await.expect("shutdown");
        drop(server);
        assert_eq!(reader.await.expect("reader"), 1024);
    }
}
