//! What goes wrong with an MCP server: starting it, or reaching it later.

/// An MCP server that could not be used. Every variant names the server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The configuration is wrong (the key, the value, what is allowed).
    #[error(transparent)]
    Config(#[from] crate::config::McpConfigError),
    /// The server did not start, or did not answer `initialize` or `tools/list`.
    #[error("MCP server {server:?} could not be connected: {message}")]
    Connect {
        /// The server's `name`.
        server: String,
        /// Why.
        message: String,
    },
    /// The server is down (its process died, its endpoint stopped answering) and is
    /// being restarted; calls fail until it is back.
    #[error(
        "MCP server {server:?} is unavailable ({reason}); it is being restarted, try again shortly"
    )]
    Unavailable {
        /// The server's `name`.
        server: String,
        /// Why it is down.
        reason: String,
    },
    /// Two servers offer a tool under the same name.
    #[error(
        "MCP servers {first:?} and {second:?} both offer a tool named {tool:?}; give one of them a `prefix` or leave the tool out with `exclude_tools`"
    )]
    DuplicateTool {
        /// The tool's name as the model would see it.
        tool: String,
        /// The server listed first.
        first: String,
        /// The other one.
        second: String,
    },
}
