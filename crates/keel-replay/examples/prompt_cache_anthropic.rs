//! Anthropic's prompt cache on a replay of the bundled session: every request a stack
//! sends goes through the real Anthropic adapter (keel-anthropic, with its cache
//! breakpoints on the tools, the system prompt, the summary and the last stable
//! message) to a local Messages endpoint that applies Anthropic's documented caching
//! rules (keel-testkit's `PromptCache`: exact prefixes at breakpoints, 20-block
//! look-back, 1,024-token minimum, 5-minute lifetime), and reports the split in
//! `usage`, which the adapter reads into `Usage::cached_input_tokens` and
//! `Usage::cache_creation_input_tokens`.
//!
//! Compared: the whole history every call; the last 100 messages (a sliding window,
//! Langflow's default); and the bundled summarization configuration. The bill counts
//! base input tokens, cache writes at 1.25x and cache reads at 0.1x (Anthropic's
//! prices for the 5-minute lifetime). Tokens are the server's estimate (4 bytes of a
//! block's JSON), the same for every stack; calls are 20 simulated seconds apart.
//!
//! Run: `cargo run -p keel-replay --example prompt_cache_anthropic`

// An example, like a test: a broken setup should stop it loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use keel_core::message::Message;
use keel_core::model::{ChatModel, ChatRequest, ModelSettings};
use keel_replay::{Quiet, ReplayOptions, SentRequest, prepare};
use keel_testkit::anthropic_cache::PromptCache;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// A Messages endpoint with one organization's prompt cache.
struct CachingServer {
    cache: PromptCache,
    calls: AtomicU64,
}

impl Respond for CachingServer {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).expect("a JSON body");
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        match self.cache.apply(&body, Duration::from_secs(20 * n)) {
            Ok(usage) => ResponseTemplate::new(200).set_body_json(json!({
                "id": format!("msg_{n}"), "type": "message", "role": "assistant",
                "model": body["model"], "stop_reason": "end_turn", "stop_sequence": null,
                "content": [{"type": "text", "text": "ok"}],
                "usage": usage.to_json(1),
            })),
            Err(message) => ResponseTemplate::new(400).set_body_json(json!({
                "type": "error", "error": {"type": "invalid_request_error", "message": message}
            })),
        }
    }
}

/// The sums over one stack's calls, as the adapter read them.
#[derive(Default)]
struct Totals {
    prompt: u64,
    read: u64,
    written: u64,
}

async fn send_all(requests: &[(Option<Message>, Vec<Message>)]) -> Totals {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(CachingServer {
            cache: PromptCache::new(),
            calls: AtomicU64::new(0),
        })
        .mount(&server)
        .await;
    let model = keel_anthropic::AnthropicConfig::new("claude-sonnet-4-5")
        .with_base_url(server.uri())
        .with_api_key("not-a-key")
        .build()
        .expect("the adapter");
    let settings = ModelSettings::default();
    let mut totals = Totals::default();
    for (system, messages) in requests {
        let mut request = ChatRequest::new(messages, &settings);
        request.system = system.as_ref();
        let answer = model.invoke(request).await.expect("the server answers");
        let usage = answer.as_ai().and_then(|m| m.usage).expect("usage");
        totals.prompt += usage.input_tokens;
        totals.read += usage.cached_input_tokens;
        totals.written += usage.cache_creation_input_tokens;
    }
    totals
}

fn pairs(requests: &[Option<SentRequest>]) -> Vec<(Option<Message>, Vec<Message>)> {
    requests
        .iter()
        .flatten()
        .map(|r| (r.system.clone(), r.messages.as_ref().clone()))
        .collect()
}

/// The whole history cut to its last `n` messages, without starting on a tool result
/// (which the Messages API would reject without its call).
fn last(messages: &[Message], n: usize) -> Vec<Message> {
    let mut from = messages.len().saturating_sub(n);
    while messages.get(from).is_some_and(Message::is_tool) {
        from += 1;
    }
    messages[from..].to_vec()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let session = root.join("examples/sessions/support-prj123.jsonl");
    let replay = |config: Option<&str>| {
        let session = session.clone();
        let options = ReplayOptions {
            config: config.map(|c| root.join(c)),
            ..ReplayOptions::default()
        };
        async move {
            let prepared = prepare(&session, &options).await.expect("the replay");
            prepared
                .run(&mut Quiet)
                .await
                .expect("the replay runs")
                .requests
        }
    };
    let full = pairs(&replay(None).await);
    let last100: Vec<_> = full
        .iter()
        .map(|(system, messages)| (system.clone(), last(messages, 100)))
        .collect();
    let summarized = pairs(&replay(Some("examples/summarization.yaml")).await);
    println!(
        "| stack | calls | prompt tokens | read from cache | written to cache | read share | billed (writes 1.25x, reads 0.1x) | billed without caching |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, requests) in [
        ("the whole history", &full),
        ("the last 100 messages", &last100),
        ("examples/summarization.yaml", &summarized),
    ] {
        let t = send_all(requests).await;
        let billed =
            (t.prompt - t.read - t.written) as f64 + t.written as f64 * 1.25 + t.read as f64 * 0.1;
        println!(
            "| {name} | {} | {} | {} | {} | {:.1} % | {:.0} | {} |",
            requests.len(),
            t.prompt,
            t.read,
            t.written,
            t.read as f64 * 100.0 / t.prompt.max(1) as f64,
            billed,
            t.prompt,
        );
    }
}
