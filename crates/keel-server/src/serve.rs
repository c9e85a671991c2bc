//! [`run`]: what `keel serve` does — load a keel.yaml, open the store, build the agent,
//! listen, and stop cleanly on Ctrl-C or SIGTERM (in-flight responses finish first).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use keel_store::Store;
use tokio::net::TcpListener;

use crate::app::{ServerOptions, router_with};
use crate::auth::ApiKeys;
use crate::config::{StackConfig, StackError};
use crate::lease::Leases;
use crate::registry::Registry;

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
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The keel.yaml is wrong.
    #[error(transparent)]
    Config(#[from] StackError),
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
    let stack = StackConfig::from_file(&options.config)?;
    let store = Store::connect(&options.database)
        .await
        .map_err(|e| ServeError::Database {
            url: redact(&options.database),
            message: e.to_string(),
        })?;
    let registry = Registry::for_store(&store)
        .await
        .map_err(|e| ServeError::Database {
            url: redact(&options.database),
            message: e.to_string(),
        })?;
    // One process owns a SQLite database: what it left running before is over.
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
        Store::Postgres(_) => {
            Leases::postgres(&options.database)
                .await
                .map_err(|e| ServeError::Database {
                    url: redact(&options.database),
                    message: e.to_string(),
                })?
        }
        _ => Leases::Local,
    };
    let agent = stack.build(Arc::new(store))?;
    let model = agent.model_profile().name.clone();
    let server = ServerOptions {
        graph_id: stack.name.clone(),
        description: stack.description.clone(),
        api_keys: options.api_keys.clone(),
        max_body_bytes: options.max_body_bytes,
        max_input_messages: options.max_input_messages,
        registry: Some(Arc::new(registry)),
        leases,
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
    axum::serve(listener, router_with(agent, server))
        .with_graceful_shutdown(shutdown())
        .await?;
    Ok(())
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

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("sqlite://keel.db"), "sqlite://keel.db");
    }
}
