//! The provider's prompt-cache hit rate on a replay of the bundled session: every
//! request a stack sends goes through the real OpenAI adapter to a local server that
//! caches prompt prefixes the way OpenAI documents its automatic prompt caching (a
//! prompt of at least 1,024 tokens; the longest prefix already seen, counted in
//! 128-token steps), and reports the hit in `usage.prompt_tokens_details.cached_tokens`,
//! which Keel reads into `Usage::cached_input_tokens`.
//!
//! Compared: the whole history every call; the last 100 messages (a sliding window,
//! Langflow's default); and the bundled summarization configuration (`[summary,
//! *recent]`, with `precompute_at`). Tokens are the server's estimate (4 bytes of
//! serialized message per token), the same for every stack.
//!
//! Run: `cargo run -p keel-replay --example prompt_cache`

// An example, like a test: a broken setup should stop it loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::path::Path;

use keel_core::message::Message;
use keel_core::model::{ChatModel, ChatRequest, ModelSettings};
use keel_replay::{Quiet, ReplayOptions, SentRequest, prepare};
use parking_lot::Mutex;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// OpenAI's documented minimum prompt for caching, and the step of a cache hit.
const MIN_CACHED_PROMPT: u64 = 1024;
const CACHE_STEP: u64 = 128;

/// A chat-completions endpoint with a prefix cache shared by every request it sees.
#[derive(Default)]
struct PrefixCache {
    /// Hashes of every prefix (tools, then each message) of every request so far.
    seen: Mutex<HashSet<u64>>,
}

fn tokens_of(v: &Value) -> u64 {
    (v.to_string().len() as u64).div_ceil(4)
}

impl Respond for PrefixCache {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).expect("a JSON body");
        // What a provider caches: the tool schemas first, then the messages in order.
        let mut parts = vec![body.get("tools").cloned().unwrap_or(Value::Null)];
        parts.extend(body["messages"].as_array().cloned().unwrap_or_default());
        let mut seen = self.seen.lock();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let (mut total, mut cached, mut hit) = (0, 0, true);
        let mut prefixes = Vec::with_capacity(parts.len());
        for part in &parts {
            part.to_string().hash(&mut hasher);
            let h = hasher.finish();
            prefixes.push(h);
            total += tokens_of(part);
            hit = hit && seen.contains(&h);
            if hit {
                cached = total;
            }
        }
        seen.extend(prefixes);
        let cached = if total < MIN_CACHED_PROMPT {
            0
        } else {
            cached / CACHE_STEP * CACHE_STEP
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-cache", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": total, "completion_tokens": 1, "total_tokens": total + 1,
                      "prompt_tokens_details": {"cached_tokens": cached}},
        }))
    }
}

/// Prompt and cached tokens over `requests`, as the adapter read them.
async fn send_all(requests: &[(Option<Message>, Vec<Message>)]) -> (u64, u64) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(PrefixCache::default())
        .mount(&server)
        .await;
    let model = keel_openai::OpenAiConfig::new("gpt-4o-mini")
        .with_base_url(format!("{}/v1", server.uri()))
        .with_api_key("not-a-key")
        .build()
        .expect("the adapter");
    let settings = ModelSettings::default();
    let (mut prompt, mut cached) = (0, 0);
    for (system, messages) in requests {
        let answer = model
            .invoke(ChatRequest {
                system: system.as_ref(),
                messages,
                tools: &[],
                tool_choice: None,
                settings: &settings,
                internal: false,
            })
            .await
            .expect("the fake server answers");
        let usage = answer.as_ai().and_then(|m| m.usage).expect("usage");
        prompt += usage.input_tokens;
        cached += usage.cached_input_tokens;
    }
    (prompt, cached)
}

fn pairs(requests: &[Option<SentRequest>]) -> Vec<(Option<Message>, Vec<Message>)> {
    requests
        .iter()
        .flatten()
        .map(|r| (r.system.clone(), r.messages.as_ref().clone()))
        .collect()
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
        .map(|(system, messages)| {
            let from = messages.len().saturating_sub(100);
            (system.clone(), messages[from..].to_vec())
        })
        .collect();
    let summarized = pairs(&replay(Some("examples/summarization.yaml")).await);
    println!(
        "| stack | prompt tokens | cached | hit rate | billed at OpenAI's 50 % cache discount |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, requests) in [
        ("the whole history", &full),
        ("the last 100 messages", &last100),
        ("examples/summarization.yaml", &summarized),
    ] {
        let (prompt, cached) = send_all(requests).await;
        println!(
            "| {name} | {prompt} | {cached} | {:.1} % | {} |",
            cached as f64 * 100.0 / prompt.max(1) as f64,
            prompt - cached / 2,
        );
    }
}
