//! `mcp_servers:` in an agent file: one entry per MCP server, typed, with documented
//! defaults, checked by [`validate_servers`] before anything is spawned or dialled.
//!
//! ```yaml
//! mcp_servers:
//!   - name: time                       # names the server in errors and logs
//!     command: uvx                     # stdio: the program, its arguments,
//!     args: [mcp-server-time]          #   environment and working directory
//!     env: {TZ: UTC}
//!     cwd: /srv/tools
//!     tools: [get_current_time]        # allow list (default: every tool)
//!     exclude_tools: [convert_time]    # left out even when allowed
//!     timeout_seconds: 30              # per call (default 60)
//!     prefix: time_                    # prepended to each tool name
//!   - name: docs
//!     url: http://127.0.0.1:9000/mcp   # streamable HTTP
//!     headers: {X-Team: support}
//!     bearer_token_env: DOCS_TOKEN     # `Authorization: Bearer $DOCS_TOKEN`
//! ```

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Default `timeout_seconds`: how long one tool call may take.
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 60.0;
/// The largest `timeout_seconds`.
pub const MAX_TIMEOUT_SECONDS: f64 = 3600.0;
/// The longest tool name a model provider takes (OpenAI's limit), prefix included.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// What is wrong with an `mcp_servers` entry: the key, the value, what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McpConfigError {
    /// Not YAML, an unknown key or a value of the wrong type (the parser's message
    /// names the key, the line and the keys allowed).
    #[error("mcp_servers: {0}")]
    Syntax(String),
    /// A value outside what is allowed.
    #[error("{key} = {value}: {problem}; allowed: {allowed}")]
    Invalid {
        /// The key, with its entry (`mcp_servers[1].timeout_seconds`).
        key: String,
        /// The value given, as written back.
        value: String,
        /// What is wrong.
        problem: String,
        /// What is allowed.
        allowed: String,
    },
}

/// One MCP server of an agent, and which of its tools the agent gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Names the server in errors, logs and tool results; unique in the list.
    pub name: String,
    /// stdio: the program to spawn (searched in `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: environment variables set for it (on top of Keel's own environment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP: the endpoint (`http://host:port/mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Streamable HTTP: the environment variable holding a bearer token, sent as
    /// `Authorization: Bearer ...` (read when the server is connected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env: Option<String>,
    /// The server's tools the agent gets, by the server's names (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Tools left out, by the server's names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_tools: Vec<String>,
    /// How long one call may take, in seconds (default [`DEFAULT_TIMEOUT_SECONDS`]).
    #[serde(
        default = "default_timeout",
        skip_serializing_if = "is_default_timeout"
    )]
    pub timeout_seconds: f64,
    /// Prepended to each tool name the model sees (`time_` makes `get_current_time`
    /// `time_get_current_time`), so two servers' tools keep distinct names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

fn default_timeout() -> f64 {
    DEFAULT_TIMEOUT_SECONDS
}

fn is_default_timeout(v: &f64) -> bool {
    *v == DEFAULT_TIMEOUT_SECONDS
}

/// How a server is reached.
#[derive(Clone, Debug, PartialEq)]
pub enum Transport<'a> {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: &'a str,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: &'a str,
    },
}

impl McpServerConfig {
    /// A stdio server: `command` with `args`.
    pub fn stdio(
        name: impl Into<String>,
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        McpServerConfig {
            command: Some(command.into()),
            args: args.into_iter().map(Into::into).collect(),
            ..Self::empty(name.into())
        }
    }

    /// A streamable HTTP server at `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerConfig {
            url: Some(url.into()),
            ..Self::empty(name.into())
        }
    }

    fn empty(name: String) -> Self {
        McpServerConfig {
            name,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            bearer_token_env: None,
            tools: None,
            exclude_tools: Vec::new(),
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            prefix: None,
        }
    }

    /// The transport (after [`validate`](Self::validate), exactly one is set).
    pub fn transport(&self) -> Transport<'_> {
        match (&self.command, &self.url) {
            (Some(command), _) => Transport::Stdio { command },
            (None, Some(url)) => Transport::Http { url },
            (None, None) => Transport::Stdio { command: "" },
        }
    }

    /// The name the model sees for the server's tool `tool`.
    pub fn exposed_name(&self, tool: &str) -> String {
        format!("{}{tool}", self.prefix.as_deref().unwrap_or(""))
    }

    /// Whether the allow list and the exclude list let `tool` (the server's name) in.
    pub fn admits(&self, tool: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|t| t == tool))
            && !self.exclude_tools.iter().any(|t| t == tool)
    }

    /// Checks the entry; `key` names it in errors (`mcp_servers[0]`).
    pub fn validate(&self, key: &str) -> Result<(), McpConfigError> {
        let invalid = |field: &str, value: &dyn std::fmt::Debug, problem: &str, allowed: &str| {
            McpConfigError::Invalid {
                key: format!("{key}.{field}"),
                value: format!("{value:?}"),
                problem: problem.to_owned(),
                allowed: allowed.to_owned(),
            }
        };
        if !is_name(&self.name) {
            return Err(invalid(
                "name",
                &self.name,
                "not a server name",
                "1 to 64 characters from A-Z a-z 0-9 _ -",
            ));
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(invalid(
                    "command",
                    &self.command,
                    &format!(
                        "a server needs exactly one of `command` (stdio) and `url` (streamable HTTP); url is {:?}",
                        self.url
                    ),
                    "`command: PROGRAM` or `url: http://HOST:PORT/PATH`",
                ));
            }
            (Some(command), None) => self.validate_stdio(command, &invalid)?,
            (None, Some(url)) => self.validate_http(url, &invalid)?,
        }
        if !(self.timeout_seconds > 0.0 && self.timeout_seconds <= MAX_TIMEOUT_SECONDS) {
            return Err(invalid(
                "timeout_seconds",
                &self.timeout_seconds,
                "out of range",
                "a number of seconds above 0 and at most 3600",
            ));
        }
        if let Some(prefix) = &self.prefix
            && !(prefix.is_empty() || is_name(prefix))
        {
            return Err(invalid(
                "prefix",
                prefix,
                "tool names may not hold these characters",
                "up to 64 characters from A-Z a-z 0-9 _ -",
            ));
        }
        if let Some(tools) = &self.tools
            && let Some(t) = tools.iter().find(|t| t.is_empty())
        {
            return Err(invalid(
                "tools",
                t,
                "empty tool name",
                "the server's tool names",
            ));
        }
        Ok(())
    }

    /// Checks a stdio server's fields: a non-empty `command`, and none of the fields
    /// only a streamable HTTP server takes.
    fn validate_stdio(&self, command: &str, invalid: Invalid<'_>) -> Result<(), McpConfigError> {
        if command.trim().is_empty() {
            return Err(invalid(
                "command",
                &command,
                "empty",
                "a program name or path",
            ));
        }
        let http_only = [
            ("headers", !self.headers.is_empty()),
            ("bearer_token_env", self.bearer_token_env.is_some()),
        ];
        if let Some((field, _)) = http_only.iter().find(|(_, set)| *set) {
            return Err(invalid(
                field,
                &"(set)",
                "only a streamable HTTP server (`url`) takes it",
                "remove it, or use `url` instead of `command`",
            ));
        }
        Ok(())
    }

    /// Checks a streamable HTTP server's fields: an HTTP `url`, none of the fields only
    /// a stdio server takes, valid header names and values, and a bearer token's
    /// variable name.
    fn validate_http(&self, url: &str, invalid: Invalid<'_>) -> Result<(), McpConfigError> {
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || url.parse::<http::Uri>().is_err()
        {
            return Err(invalid(
                "url",
                &url,
                "not an HTTP URL",
                "http://HOST:PORT/PATH or https://...",
            ));
        }
        let stdio_only = [
            ("args", !self.args.is_empty()),
            ("env", !self.env.is_empty()),
            ("cwd", self.cwd.is_some()),
        ];
        if let Some((field, _)) = stdio_only.iter().find(|(_, set)| *set) {
            return Err(invalid(
                field,
                &"(set)",
                "only a stdio server (`command`) takes it",
                "remove it, or use `command` instead of `url`",
            ));
        }
        for (name, value) in &self.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(invalid(
                    &format!("headers.{name}"),
                    name,
                    "not a header name",
                    "letters, digits and - (an HTTP token)",
                ));
            }
            if http::HeaderValue::from_str(value).is_err() {
                return Err(invalid(
                    &format!("headers.{name}"),
                    value,
                    "not a header value",
                    "visible ASCII characters and spaces",
                ));
            }
        }
        if let Some(var) = &self.bearer_token_env
            && (var.is_empty() || var.contains(['=', '\0']))
        {
            return Err(invalid(
                "bearer_token_env",
                var,
                "not an environment variable name",
                "a name such as DOCS_TOKEN",
            ));
        }
        Ok(())
    }

    /// How long one call may take.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.timeout_seconds.clamp(0.001, MAX_TIMEOUT_SECONDS))
    }
}

/// Builds the error for one field of a server entry: field, value, problem, what is
/// allowed.
type Invalid<'a> = &'a dyn Fn(&str, &dyn std::fmt::Debug, &str, &str) -> McpConfigError;

/// Letters, digits, `_` and `-`, 1 to [`MAX_TOOL_NAME_CHARS`] of them: what model
/// providers accept in a tool name.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TOOL_NAME_CHARS
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks every entry and that no two share a name.
pub fn validate_servers(servers: &[McpServerConfig]) -> Result<(), McpConfigError> {
    let mut names = HashSet::new();
    for (i, server) in servers.iter().enumerate() {
        let key = format!("mcp_servers[{i}]");
        server.validate(&key)?;
        if !names.insert(server.name.as_str()) {
            return Err(McpConfigError::Invalid {
                key: format!("{key}.name"),
                value: format!("{:?}", server.name),
                problem: "another server has this name".into(),
                allowed: "a name of its own for each server".into(),
            });
        }
    }
    Ok(())
}

/// The `mcp_servers` list of an agent file (its other keys are the caller's to read),
/// checked.
pub fn servers_from_yaml(text: &str) -> Result<Vec<McpServerConfig>, McpConfigError> {
    #[derive(Deserialize)]
    struct AgentFile {
        #[serde(default)]
        mcp_servers: Option<Vec<McpServerConfig>>,
    }
    let file: Option<AgentFile> = serde_saphyr::from_str(text).map_err(|e| {
        McpConfigError::Syntax(e.to_string().lines().next().unwrap_or_default().to_owned())
    })?;
    let servers = file.and_then(|f| f.mcp_servers).unwrap_or_default();
    validate_servers(&servers)?;
    Ok(servers)
}

/// The servers of an `mcp_servers:` list already parsed with the file it stands in
/// (a stack file: `keel run` reads it once), checked as
/// [`servers_from_yaml`] checks them; errors name the line.
pub fn servers_from_node(
    list: &keel_config::yaml::Node,
) -> Result<Vec<McpServerConfig>, McpConfigError> {
    let servers: Option<Vec<McpServerConfig>> =
        keel_config::from_node(list).map_err(|e| McpConfigError::Syntax(e.to_string()))?;
    let servers = servers.unwrap_or_default();
    validate_servers(&servers)?;
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_transports_and_ignores_the_other_keys() {
        let servers = servers_from_yaml(
            "model: offline\nmiddleware: []\nmcp_servers:\n  - {name: time, command: uvx, args: [mcp-server-time], prefix: time_, tools: [get_current_time]}\n  - {name: docs, url: 'http://127.0.0.1:9000/mcp', headers: {X-Team: a}, bearer_token_env: DOCS_TOKEN, timeout_seconds: 2.5}\n",
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].transport(), Transport::Stdio { command: "uvx" });
        assert_eq!(
            servers[0].exposed_name("get_current_time"),
            "time_get_current_time"
        );
        assert!(servers[0].admits("get_current_time"));
        assert!(!servers[0].admits("convert_time"));
        assert_eq!(
            servers[1].transport(),
            Transport::Http {
                url: "http://127.0.0.1:9000/mcp"
            }
        );
        assert_eq!(servers[1].timeout(), std::time::Duration::from_millis(2500));
        assert!(servers_from_yaml("model: offline\n").unwrap().is_empty());
        assert!(servers_from_yaml("").unwrap().is_empty());
        let tree = keel_config::yaml::parse(
            "mcp_servers:\n  - {name: time, command: uvx}\n  - {name: docs, cmd: x}\n",
        )
        .unwrap();
        let keel_config::yaml::Yaml::Map(top) = &tree.value else {
            panic!("a mapping")
        };
        let err = servers_from_node(&top[0].2).unwrap_err().to_string();
        assert!(
            err.contains("unknown field `cmd`") && err.ends_with("(line 3)"),
            "{err}"
        );
    }

    #[test]
    fn bad_entries_name_the_key_the_value_and_what_is_allowed() {
        let err = |yaml: &str| servers_from_yaml(yaml).unwrap_err().to_string();
        let e = err("mcp_servers:\n  - {name: t, comand: uvx}\n");
        assert!(e.contains("comand") && e.contains("command"), "{e}");
        let e = err("mcp_servers:\n  - {name: t, command: uvx, timeout_seconds: 0}\n");
        assert!(
            e.contains("mcp_servers[0].timeout_seconds = 0.0") && e.contains("at most 3600"),
            "{e}"
        );
        let e = err("mcp_servers:\n  - {name: t}\n");
        assert!(
            e.contains("mcp_servers[0].command") && e.contains("exactly one"),
            "{e}"
        );
        let e = err("mcp_servers:\n  - {name: t, command: a, url: 'http://x/'}\n");
        assert!(e.contains("exactly one"), "{e}");
        let e = err("mcp_servers:\n  - {name: 'a b', command: a}\n");
        assert!(e.contains("mcp_servers[0].name = \"a b\""), "{e}");
        let e = err("mcp_servers:\n  - {name: t, url: 'ftp://x/'}\n");
        assert!(
            e.contains("mcp_servers[0].url") && e.contains("http://"),
            "{e}"
        );
        let e = err("mcp_servers:\n  - {name: t, command: a, headers: {A: b}}\n");
        assert!(e.contains("mcp_servers[0].headers"), "{e}");
        let e = err("mcp_servers:\n  - {name: t, url: 'http://x/', args: [a]}\n");
        assert!(e.contains("mcp_servers[0].args"), "{e}");
        let e = err("mcp_servers:\n  - {name: t, url: 'http://x/', headers: {'a b': c}}\n");
        assert!(e.contains("headers.a b"), "{e}");
        let e = err("mcp_servers:\n  - {name: t, command: a, prefix: 'x.'}\n");
        assert!(e.contains("mcp_servers[0].prefix = \"x.\""), "{e}");
        let e = err("mcp_servers:\n  - {name: t, command: a}\n  - {name: t, command: b}\n");
        assert!(
            e.contains("mcp_servers[1].name") && e.contains("another server"),
            "{e}"
        );
        let e = err("mcp_servers: {name: t}\n");
        assert!(e.starts_with("mcp_servers:"), "{e}");
    }
}
