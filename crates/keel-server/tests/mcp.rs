//! `/mcp` with rmcp's own client (streamable HTTP): the assistant is a tool, a call
//! runs the agent and answers with its final message, and API keys scope threads to
//! their owner as on the rest of the server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::collections::HashMap;
use std::sync::Arc;

use keel_agent::Agent;
use keel_agent::offline::OfflineModel;
use keel_server::ApiKeys;
use keel_server::{ServerOptions, router_with};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

/// Serves an offline agent named `support` with two keys; returns its base URL.
async fn serve() -> String {
    let agent = Agent::builder()
        .model(Arc::new(OfflineModel::new()))
        .build()
        .unwrap();
    let options = ServerOptions {
        graph_id: "support".into(),
        description: Some("Answers questions about the platform.".into()),
        api_keys: ApiKeys::parse("alice-key-1=alice,bob-key-22=bob").unwrap(),
        ..ServerOptions::default()
    };
    let app = router_with(agent, options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn client(
    url: &str,
    bearer: Option<&str>,
    headers: &[(&'static str, &str)],
) -> Result<RunningService<RoleClient, ClientConfig>, rmcp::service::ClientInitializeError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp"));
    if let Some(token) = bearer {
        config = config.auth_header(token);
    }
    let headers: HashMap<_, _> = headers
        .iter()
        .map(|(k, v)| {
            (
                http::HeaderName::from_static(k),
                http::HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect();
    let transport = StreamableHttpClientTransport::from_config(config.custom_headers(headers));
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("keel-test", "1"),
    )
    .serve(transport)
    .await
}

async fn ask(
    client: &RunningService<RoleClient, ClientConfig>,
    args: Value,
) -> rmcp::model::CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    client
        .peer()
        .call_tool(CallToolRequestParams::new("support").with_arguments(args))
        .await
        .unwrap()
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test]
async fn the_assistant_is_a_tool_scoped_to_the_key_owner() {
    let url = serve().await;
    let alice = client(&url, Some("alice-key-1"), &[]).await.unwrap();
    let tools = alice.peer().list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "support");
    assert!(
        tools[0]
            .description
            .as_deref()
            .unwrap()
            .contains("Answers questions about the platform.")
    );
    assert_eq!(tools[0].input_schema["required"], json!(["message"]));

    // A one-off question: the offline model's answer, as text and structured content.
    let once = ask(&alice, json!({"message": "Our cluster is EU-west."})).await;
    assert_eq!(once.is_error, Some(false));
    assert_eq!(
        text(&once),
        "Noted: \"Our cluster is EU-west.\" (1 messages in my context)"
    );
    assert_eq!(
        once.structured_content.as_ref().unwrap()["answer"],
        text(&once).as_str()
    );

    // A conversation: the second call sees the first on the same thread.
    ask(
        &alice,
        json!({"message": "Our cluster is EU-west.", "thread_id": "t1"}),
    )
    .await;
    let second = ask(
        &alice,
        json!({"message": "Which cluster?", "thread_id": "t1"}),
    )
    .await;
    assert_eq!(
        text(&second),
        "From our conversation: \"Our cluster is EU-west.\" (3 messages in my context)"
    );

    // Bob's `t1` is his own: nothing of Alice's is in it. He sends the key as x-api-key.
    let bob = client(&url, None, &[("x-api-key", "bob-key-22")])
        .await
        .unwrap();
    let his = ask(
        &bob,
        json!({"message": "Which cluster?", "thread_id": "t1"}),
    )
    .await;
    assert_eq!(
        text(&his),
        "Noted: \"Which cluster?\" (1 messages in my context)"
    );

    // Bad arguments are the protocol's invalid-params error, naming what is allowed.
    let Value::Object(bad) = json!({"messgae": "x"}) else {
        unreachable!()
    };
    let err = alice
        .peer()
        .call_tool(CallToolRequestParams::new("support").with_arguments(bad))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("message is required"), "{err}");
    let Value::Object(extra) = json!({"message": "x", "thread": "t"}) else {
        unreachable!()
    };
    let err = alice
        .peer()
        .call_tool(CallToolRequestParams::new("support").with_arguments(extra))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("allowed: message, thread_id"),
        "{err}"
    );
    let Value::Object(control) = json!({"message": "x", "thread_id": "a\u{1}b"}) else {
        unreachable!()
    };
    let refused = alice
        .peer()
        .call_tool(CallToolRequestParams::new("support").with_arguments(control))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text(&refused).contains("control character"),
        "{}",
        text(&refused)
    );
}

#[tokio::test]
async fn without_a_valid_key_there_is_no_session() {
    let url = serve().await;
    assert!(client(&url, None, &[]).await.is_err());
    assert!(client(&url, Some("wrong-key-123"), &[]).await.is_err());
    // The Bearer form is for /mcp only; the Agent Server API keeps x-api-key.
    let status = reqwest_status(&url, "/threads/search", "Bearer alice-key-1").await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn without_keys_a_foreign_host_is_refused_as_everywhere() {
    // DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not reach the
    // tools. The router's guard checks Host for /mcp as for every path.
    let agent = Agent::builder()
        .model(Arc::new(OfflineModel::new()))
        .build()
        .unwrap();
    let app = router_with(agent, ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let status = raw_post(&url, "/mcp", "evil.example:80", "", init).await;
    assert_eq!(status, 403);
    let addr = url.trim_start_matches("http://").to_owned();
    let status = raw_post(&url, "/mcp", &addr, "", init).await;
    assert_eq!(status, 200);
}

/// POSTs `{}` to `path` with an Authorization header, over a raw TCP connection.
async fn reqwest_status(url: &str, path: &str, authorization: &str) -> u16 {
    let addr = url.trim_start_matches("http://").to_owned();
    let header = format!("Authorization: {authorization}\r\n");
    raw_post(url, path, &addr, &header, "{}").await
}

/// POSTs `body` to `path` with `host` and extra header lines, over raw TCP; the status.
async fn raw_post(url: &str, path: &str, host: &str, headers: &str, body: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap()
}
