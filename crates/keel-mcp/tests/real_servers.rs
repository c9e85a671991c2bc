//! keel-mcp against real MCP servers from the registries: `mcp-server-time` (PyPI) and
//! `@modelcontextprotocol/server-everything` (npm), installed by `scripts/mcp-tests.sh`,
//! which sets the variables below. Without them each test prints why it is skipped.
//!
//! - `KEEL_MCP_TIME`: the `mcp-server-time` console script.
//! - `KEEL_MCP_EVERYTHING`: server-everything's `dist/index.js` (run with `node`).
//! - `KEEL_MCP_PYTHON`: a Python with the `mcp` SDK (for the list-changed server in
//!   keel-testkit's `mcp/`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::sync::Arc;
use std::time::Duration;

use keel_agent::Agent;
use keel_core::message::{Content, ContentPart, Message, MessageBody, ToolCall, ToolStatus};
use keel_core::tool::Toolset;
use keel_mcp::{McpError, McpServerConfig, McpToolset};
use keel_testkit::ScriptedModel;
use serde_json::{Value, json};

fn env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            eprintln!("skipped: {var} is not set (scripts/mcp-tests.sh sets it)");
            None
        }
    }
}

fn everything_stdio(path: &str) -> McpServerConfig {
    let mut c = McpServerConfig::stdio("everything", "node", [path, "stdio"]);
    c.prefix = Some("everything_".into());
    c
}

/// One AI turn calling `name` with `args`, then a final answer.
fn script(calls: Vec<(&str, Value)>) -> Arc<ScriptedModel> {
    let calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| ToolCall::new(format!("call_{i}"), name, args))
        .collect();
    Arc::new(ScriptedModel::new([
        Message::ai("").with_tool_calls(calls),
        Message::ai("done"),
    ]))
}

async fn run(toolset: &McpToolset, model: Arc<ScriptedModel>) -> Vec<Message> {
    let agent = Agent::builder()
        .model(model)
        .toolset(toolset.clone())
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    out.state
        .messages
        .iter()
        .filter(|m| m.is_tool())
        .cloned()
        .collect()
}

fn status(m: &Message) -> ToolStatus {
    match m.body() {
        MessageBody::Tool(t) => t.status,
        _ => panic!("not a tool message: {m:?}"),
    }
}

/// The tools as a raw rmcp client lists them, for comparing schemas.
async fn raw_schemas(command: &str, args: &[&str]) -> Vec<(String, Value)> {
    use rmcp::ServiceExt;
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args);
    let process = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let client = ().serve(process).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    tools
        .into_iter()
        .map(|t| {
            (
                t.name.to_string(),
                Value::Object(t.input_schema.as_ref().clone()),
            )
        })
        .collect()
}

#[tokio::test]
async fn time_server_over_stdio_through_an_agent() {
    let Some(time) = env("KEEL_MCP_TIME") else {
        return;
    };
    let mut config = McpServerConfig::stdio("time", time.clone(), Vec::<String>::new());
    config.prefix = Some("time_".into());
    config.tools = Some(vec!["get_current_time".into(), "convert_time".into()]);
    config.exclude_tools = vec!["convert_time".into()];
    let toolset = McpToolset::connect(vec![config]).await.unwrap();
    assert_eq!(toolset.tool_names(), ["time_get_current_time"]);

    let model = script(vec![
        ("time_get_current_time", json!({"timezone": "UTC"})),
        ("time_get_current_time", json!({"timezone": "Not/AZone"})),
    ]);
    let results = run(&toolset, model.clone()).await;
    // The schema reaches the model as the server wrote it.
    let raw = raw_schemas(&time, &[]).await;
    let (_, schema) = raw.iter().find(|(n, _)| n == "get_current_time").unwrap();
    let offered = &model.requests()[0].tools;
    assert_eq!(offered.len(), 1);
    assert_eq!(&offered[0].parameters, schema);
    assert_eq!(offered[0].name, "time_get_current_time");

    assert_eq!(status(&results[0]), ToolStatus::Success, "{results:?}");
    let answer: Value = serde_json::from_str(&results[0].text()).unwrap();
    assert_eq!(answer["timezone"], "UTC");
    assert!(answer["datetime"].as_str().unwrap().contains('T'));
    // A bad timezone is the server's error, as an error tool result.
    assert_eq!(status(&results[1]), ToolStatus::Error, "{results:?}");
    assert!(
        results[1].text().contains("Not/AZone"),
        "{}",
        results[1].text()
    );
}

#[tokio::test]
async fn everything_over_stdio_maps_every_kind_of_result() {
    let Some(path) = env("KEEL_MCP_EVERYTHING") else {
        return;
    };
    let mut config = everything_stdio(&path);
    config.timeout_seconds = 1.5;
    let toolset = McpToolset::connect(vec![config]).await.unwrap();
    let names = toolset.tool_names();
    for expected in [
        "everything_echo",
        "everything_get-sum",
        "everything_get-structured-content",
        "everything_get-tiny-image",
        "everything_trigger-long-running-operation",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    let model = script(vec![
        ("everything_echo", json!({"message": "hello mcp"})),
        ("everything_get-sum", json!({"a": 2, "b": 40})),
        (
            "everything_get-structured-content",
            json!({"location": "Chicago"}),
        ),
        ("everything_get-tiny-image", json!({})),
        (
            "everything_trigger-long-running-operation",
            json!({"duration": 5, "steps": 2}),
        ),
        ("everything_get-sum", json!({"a": "two", "b": 40})),
    ]);
    let results = run(&toolset, model).await;
    assert_eq!(results.len(), 6);
    assert_eq!(results[0].text(), "Echo: hello mcp");
    assert!(results[1].text().contains("42"), "{}", results[1].text());
    assert!(
        results[2].text().contains("Light rain"),
        "{}",
        results[2].text()
    );
    let Content::Parts(parts) = results[3].content() else {
        panic!("image result as parts: {:?}", results[3]);
    };
    assert!(
        parts.iter().any(|p| matches!(p, ContentPart::Image(i)
            if i.image_url["url"].as_str().unwrap().starts_with("data:image/png;base64,"))),
        "{parts:?}"
    );
    // Longer than timeout_seconds: an error result, and the server keeps serving.
    assert_eq!(status(&results[4]), ToolStatus::Error);
    assert!(
        results[4].text().contains("timeout_seconds"),
        "{}",
        results[4].text()
    );
    // Arguments the server rejects: an error result, not a crash.
    assert_eq!(status(&results[5]), ToolStatus::Error, "{:?}", results[5]);
    for (i, r) in results[..4].iter().enumerate() {
        assert_eq!(status(r), ToolStatus::Success, "result {i}: {r:?}");
    }
    let again = run(
        &toolset,
        script(vec![("everything_echo", json!({"message": "still here"}))]),
    )
    .await;
    assert_eq!(again[0].text(), "Echo: still here");
}

#[tokio::test]
async fn mcp_calls_go_through_the_tool_middleware() {
    let Some(path) = env("KEEL_MCP_EVERYTHING") else {
        return;
    };
    let toolset = McpToolset::connect(vec![everything_stdio(&path)])
        .await
        .unwrap();
    let stack = keel_middleware::stack::Stack::from_yaml_str(
        "middleware:\n  - tool_call_limit: {tool_name: everything_echo, run_limit: 1, exit_behavior: continue}\n",
    )
    .unwrap();
    let model = script(vec![
        ("everything_echo", json!({"message": "one"})),
        ("everything_echo", json!({"message": "two"})),
    ]);
    let m: Arc<dyn keel_core::model::ChatModel> = model.clone();
    let agent = stack
        .agent_builder(m.clone(), Arc::new(move |_: &str| Some(m.clone())))
        .unwrap()
        .toolset(toolset)
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    let result = |id: &str| {
        out.state
            .messages
            .iter()
            .find(|m| m.tool_call_id() == Some(id))
            .cloned()
            .unwrap()
    };
    assert_eq!(result("call_0").text(), "Echo: one");
    let blocked = result("call_1");
    assert_eq!(status(&blocked), ToolStatus::Error);
    assert!(blocked.text().contains("limit"), "{}", blocked.text());
}

#[tokio::test]
async fn human_review_pauses_before_an_mcp_tool_runs() {
    let Some(path) = env("KEEL_MCP_EVERYTHING") else {
        return;
    };
    let toolset = McpToolset::connect(vec![everything_stdio(&path)])
        .await
        .unwrap();
    let stack = keel_middleware::stack::Stack::from_yaml_str(
        "middleware:\n  - human_in_the_loop: {interrupt_on: {everything_echo: true}}\n",
    )
    .unwrap();
    let model = script(vec![(
        "everything_echo",
        json!({"message": "needs review"}),
    )]);
    let m: Arc<dyn keel_core::model::ChatModel> = model.clone();
    let agent = stack
        .agent_builder(m.clone(), Arc::new(move |_: &str| Some(m.clone())))
        .unwrap()
        .toolset(toolset)
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    // Paused with the call pending: the interrupt names the MCP tool, nothing ran.
    let interrupt = out
        .state
        .values
        .get(keel_core::state::INTERRUPT_KEY)
        .unwrap();
    assert!(
        interrupt.to_string().contains("everything_echo"),
        "{interrupt}"
    );
    assert!(!out.state.messages.iter().any(|m| m.is_tool()));
}

#[tokio::test]
async fn a_dead_stdio_server_is_restarted_and_named_meanwhile() {
    let Some(path) = env("KEEL_MCP_EVERYTHING") else {
        return;
    };
    let toolset = McpToolset::connect(vec![everything_stdio(&path)])
        .await
        .unwrap();
    let echo = toolset
        .tools()
        .iter()
        .find(|t| t.spec().name == "everything_echo")
        .cloned()
        .unwrap();
    let pid = toolset.process_id("everything").unwrap();
    assert_eq!(toolset.connections("everything"), Some(1));
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Until it is back, calls fail naming the server.
    let err = echo.call(json!({"message": "x"})).await.unwrap_err();
    assert!(err.to_string().contains("\"everything\""), "{err}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while toolset.connections("everything") < Some(2) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not restarted in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ne!(toolset.process_id("everything"), Some(pid));
    let echo = toolset
        .tools()
        .iter()
        .find(|t| t.spec().name == "everything_echo")
        .cloned()
        .unwrap();
    let back = echo.call(json!({"message": "back"})).await.unwrap();
    assert_eq!(back.text(), "Echo: back");
}

/// Starts server-everything's streamable HTTP transport on a free port; returns the
/// child and the port.
async fn everything_http(path: &str, port: Option<u16>) -> (tokio::process::Child, u16) {
    let port = port.unwrap_or_else(|| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    });
    let child = tokio::process::Command::new("node")
        .args([path, "streamableHttp"])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server-everything did not listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, port)
}

#[tokio::test]
async fn everything_over_streamable_http_with_headers_and_a_restart() {
    let Some(path) = env("KEEL_MCP_EVERYTHING") else {
        return;
    };
    let (mut child, port) = everything_http(&path, None).await;
    let mut config = McpServerConfig::http("web", format!("http://127.0.0.1:{port}/mcp"));
    config.headers.insert("X-Keel-Test".into(), "yes".into());
    config.tools = Some(vec!["echo".into(), "get-sum".into()]);
    let toolset = McpToolset::connect(vec![config]).await.unwrap();
    assert_eq!(toolset.tool_names(), ["echo", "get-sum"]);
    let results = run(
        &toolset,
        script(vec![
            ("echo", json!({"message": "over http"})),
            ("get-sum", json!({"a": 1, "b": 2})),
        ]),
    )
    .await;
    assert_eq!(results[0].text(), "Echo: over http");
    assert!(results[1].text().contains('3'), "{}", results[1].text());

    // The endpoint goes away and comes back on the same port: the toolset reconnects.
    child.kill().await.unwrap();
    let echo = toolset.tools()[0].clone();
    let err = echo.call(json!({"message": "x"})).await.unwrap_err();
    assert!(err.to_string().contains("\"web\""), "{err}");
    let (_back, _) = everything_http(&path, Some(port)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let echo = toolset.tools()[0].clone();
        match echo.call(json!({"message": "again"})).await {
            Ok(c) => {
                assert_eq!(c.text(), "Echo: again");
                break;
            }
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "not reconnected: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert!(toolset.connections("web") >= Some(2));
}

#[tokio::test]
async fn a_server_that_fails_to_start_is_a_typed_error_naming_it() {
    let config = McpServerConfig::stdio("ghost", "/nonexistent/keel-mcp-server", ["x"]);
    let err = McpToolset::connect(vec![config]).await.unwrap_err();
    assert!(
        matches!(&err, McpError::Connect { server, .. } if server == "ghost"),
        "{err}"
    );
    let mut bad = McpServerConfig::stdio("x", "a", ["b"]);
    bad.timeout_seconds = -1.0;
    let err = McpToolset::connect(vec![bad]).await.unwrap_err();
    assert!(
        err.to_string().contains("mcp_servers[0].timeout_seconds"),
        "{err}"
    );
}

#[tokio::test]
async fn list_changed_refreshes_the_tools() {
    let Some(python) = env("KEEL_MCP_PYTHON") else {
        return;
    };
    let script_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../keel-testkit/mcp/list_changed_server.py"
    );
    let config = McpServerConfig::stdio("growing", python, [script_path]);
    let toolset = McpToolset::connect(vec![config]).await.unwrap();
    assert_eq!(toolset.tool_names(), ["add_tool"]);
    let model = script(vec![("add_tool", json!({"name": "fresh"}))]);
    let agent = Agent::builder()
        .model(model.clone())
        .toolset(toolset.clone())
        .build()
        .unwrap();
    model.push(Ok(Message::ai("").with_tool_calls(vec![ToolCall::new(
        "c9",
        "fresh",
        json!({}),
    )])));
    model.push(Ok(Message::ai("done")));
    // The server adds `fresh` and sends notifications/tools/list_changed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let first = agent
        .invoke("t", vec![Message::human("add one")])
        .await
        .unwrap();
    assert_eq!(
        first
            .state
            .messages
            .iter()
            .find(|m| m.is_tool())
            .unwrap()
            .text(),
        "added fresh"
    );
    while !toolset.tool_names().iter().any(|n| n == "fresh") {
        assert!(tokio::time::Instant::now() < deadline, "list not refreshed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = agent
        .invoke("t", vec![Message::human("use it")])
        .await
        .unwrap();
    // The next model call is offered the new tool, and calling it works.
    let offered: Vec<String> = model
        .requests()
        .last()
        .unwrap()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(offered.contains(&"fresh".to_owned()), "{offered:?}");
    let last_tool = second
        .state
        .messages
        .iter()
        .rev()
        .find(|m| m.is_tool())
        .unwrap();
    assert_eq!(last_tool.text(), "fresh tool called");
}

/// `keel serve`'s own `/mcp` as the server, with the key from `bearer_token_env`:
/// `KEEL_MCP_SERVE_URL` is the server (started by scripts/mcp-tests.sh with API keys)
/// and `KEEL_MCP_SERVE_TOKEN` holds a key.
#[tokio::test]
async fn keel_serve_is_an_mcp_server_for_keel_mcp() {
    let Some(url) = env("KEEL_MCP_SERVE_URL") else {
        return;
    };
    if env("KEEL_MCP_SERVE_TOKEN").is_none() {
        return;
    }
    let mut config = McpServerConfig::http("keel", format!("{url}/mcp"));
    config.bearer_token_env = Some("KEEL_MCP_SERVE_TOKEN".into());
    config.prefix = Some("ask_".into());
    let toolset = McpToolset::connect(vec![config]).await.unwrap();
    assert_eq!(toolset.tool_names(), ["ask_agent"]);
    let results = run(
        &toolset,
        script(vec![(
            "ask_agent",
            json!({"message": "Please everything_echo the word ping"}),
        )]),
    )
    .await;
    assert_eq!(status(&results[0]), ToolStatus::Success, "{results:?}");
    assert!(
        results[0]
            .text()
            .contains("everything_echo returned: Echo: Please everything_echo the word ping"),
        "{}",
        results[0].text()
    );
    // Without the key the server refuses the connection.
    let mut anonymous = McpServerConfig::http("keel", format!("{url}/mcp"));
    anonymous.prefix = Some("ask_".into());
    let err = McpToolset::connect(vec![anonymous]).await.unwrap_err();
    assert!(matches!(err, McpError::Connect { .. }), "{err}");
}
