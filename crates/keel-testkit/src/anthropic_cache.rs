//! A prompt cache that follows the rules Anthropic documents for the Messages API
//! (<https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching>), to measure
//! and test where an adapter puts its `cache_control` breakpoints without a paid call.
//!
//! The rules applied:
//!
//! - The prompt is read in order `tools`, `system`, `messages`, block by block; a cache
//!   entry is the exact prefix through one block.
//! - At most 4 breakpoints (`cache_control` on a tool, a system block or a content
//!   block); a request with more is refused, as the API does.
//! - A request reads the longest cached prefix ending at a breakpoint or at one of the
//!   20 block boundaries before it (the API's automatic look-back); then it writes an
//!   entry at each of its breakpoints past what it read.
//! - A prefix shorter than the model's minimum (1,024 tokens; 2,048 for Claude Haiku
//!   3 and 3.5; 4,096 for Claude Haiku 4.5 and Opus 4.5) is neither written nor read.
//! - An entry lives for its `ttl` (`5m` unless `"ttl": "1h"`) after its last read or
//!   write.
//! - The usage splits the prompt as the API does: `cache_read_input_tokens` (the prefix
//!   read), `cache_creation_input_tokens` (from there to the last breakpoint, written),
//!   `input_tokens` (the rest, after the last breakpoint).
//!
//! Tokens are estimated at 4 bytes of the block's JSON (without its `cache_control`)
//! each: the same estimate for every stack compared, not Claude's tokenizer.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};

/// How far before a breakpoint the cache looks for a shorter hit.
pub const LOOKBACK_BLOCKS: usize = 20;
/// The most breakpoints a request may carry.
pub const MAX_BREAKPOINTS: usize = 4;

/// The prompt cache of one organization: every request's prefixes, with their expiry.
#[derive(Default)]
pub struct PromptCache {
    /// Prefix hash -> when it expires.
    entries: Mutex<HashMap<u64, Duration>>,
}

/// One block of the prompt: its running prefix hash, tokens, and whether it carries a
/// breakpoint (with the entry's lifetime).
struct Block {
    prefix: u64,
    tokens: u64,
    ttl: Option<Duration>,
}

/// The usage of one request, as the API reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Tokens after the last breakpoint (or all of them, without one).
    pub input_tokens: u64,
    /// Tokens written to the cache.
    pub cache_creation_input_tokens: u64,
    /// Tokens read from the cache.
    pub cache_read_input_tokens: u64,
}

impl CacheUsage {
    /// The `usage` object of a Messages API answer.
    pub fn to_json(self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "output_tokens": output_tokens,
        })
    }
}

/// The minimum cacheable prompt of a model, in tokens.
pub fn minimum_tokens(model: &str) -> u64 {
    let m = model.to_ascii_lowercase().replace('.', "-");
    if m.contains("haiku-4-5") || m.contains("opus-4-5") {
        4096
    } else if m.contains("3-haiku") || m.contains("3-5-haiku") {
        2048
    } else {
        1024
    }
}

fn ttl_of(marker: &Value) -> Duration {
    match marker.get("ttl").and_then(Value::as_str) {
        Some("1h") => Duration::from_secs(3600),
        _ => Duration::from_secs(300),
    }
}

/// Tokens of a value, estimated.
pub fn tokens_of(v: &Value) -> u64 {
    (v.to_string().len() as u64).div_ceil(4)
}

impl PromptCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `body` (a Messages API request) at time `now`: what it reads, writes and
    /// pays in full. `Err` names a rule the request breaks.
    pub fn apply(&self, body: &Value, now: Duration) -> Result<CacheUsage, String> {
        let blocks = blocks(body)?;
        let marked: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].ttl.is_some())
            .collect();
        if marked.len() > MAX_BREAKPOINTS {
            return Err(format!(
                "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
                marked.len()
            ));
        }
        let min = minimum_tokens(body.get("model").and_then(Value::as_str).unwrap_or(""));
        let mut upto = Vec::with_capacity(blocks.len());
        let mut sum = 0;
        for b in &blocks {
            sum += b.tokens;
            upto.push(sum);
        }
        let mut entries = self.entries.lock();
        entries.retain(|_, expires| *expires > now);
        // The longest cached prefix within the look-back of a breakpoint.
        let mut read: Option<usize> = None;
        for &bp in &marked {
            let lowest = bp.saturating_sub(LOOKBACK_BLOCKS);
            if let Some(hit) = (lowest..=bp)
                .rev()
                .find(|&i| upto[i] >= min && entries.contains_key(&blocks[i].prefix))
            {
                read = read.max(Some(hit));
            }
        }
        let read_tokens = read.map_or(0, |i| upto[i]);
        if let Some(i) = read {
            // A hit refreshes the entry for the lifetime of the breakpoint it serves.
            let ttl = marked
                .iter()
                .find(|&&bp| bp >= i)
                .and_then(|&bp| blocks[bp].ttl)
                .unwrap_or(Duration::from_secs(300));
            entries.insert(blocks[i].prefix, now + ttl);
        }
        let mut written_to = read;
        for &bp in &marked {
            if read.is_some_and(|r| bp <= r) || upto[bp] < min {
                continue;
            }
            let ttl = blocks[bp].ttl.unwrap_or(Duration::from_secs(300));
            entries.insert(blocks[bp].prefix, now + ttl);
            written_to = written_to.max(Some(bp));
        }
        let total = sum;
        let written_tokens = written_to.map_or(0, |i| upto[i]) - read_tokens;
        Ok(CacheUsage {
            input_tokens: total - read_tokens - written_tokens,
            cache_creation_input_tokens: written_tokens,
            cache_read_input_tokens: read_tokens,
        })
    }
}

/// The prompt's blocks in cache order, each with the hash of the prefix it ends.
fn blocks(body: &Value) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut hasher = DefaultHasher::new();
    // Requests for different models never share a cache.
    body.get("model").map(Value::to_string).hash(&mut hasher);
    let mut push = |tag: &str, block: &Value| {
        let mut block = block.clone();
        let marker = block
            .as_object_mut()
            .and_then(|o| o.remove("cache_control"));
        tag.hash(&mut hasher);
        block.to_string().hash(&mut hasher);
        out.push(Block {
            prefix: hasher.finish(),
            tokens: tokens_of(&block),
            ttl: marker.as_ref().map(ttl_of),
        });
    };
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push("tool", tool);
    }
    match body.get("system") {
        Some(Value::String(s)) => push("system", &json!({"type": "text", "text": s})),
        Some(Value::Array(blocks)) => blocks.iter().for_each(|b| push("system", b)),
        _ => {}
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages: Field required")?;
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        match m.get("content") {
            Some(Value::String(s)) => push(role, &json!({"type": "text", "text": s})),
            Some(Value::Array(blocks)) => {
                // The role starts the message: the first block's tag carries it.
                for (j, b) in blocks.iter().enumerate() {
                    push(if j == 0 { role } else { "" }, b);
                }
            }
            _ => return Err(format!("messages.{i}.content: Field required")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize, marked: bool) -> Value {
        let mut b = json!({"type": "text", "text": "x".repeat(n)});
        if marked {
            b["cache_control"] = json!({"type": "ephemeral"});
        }
        b
    }

    fn body(blocks: Vec<Value>) -> Value {
        json!({"model": "claude-sonnet-4-5", "system": [text(8000, true)],
               "messages": [{"role": "user", "content": blocks}]})
    }

    #[test]
    fn writes_then_reads_then_expires() {
        let cache = PromptCache::new();
        let first = body(vec![text(40, true)]);
        let u = cache.apply(&first, Duration::ZERO).unwrap();
        assert_eq!(u.cache_read_input_tokens, 0);
        assert!(u.cache_creation_input_tokens > 2000);
        assert_eq!(u.input_tokens, 0);
        let u2 = cache.apply(&first, Duration::from_secs(60)).unwrap();
        assert_eq!(u2.cache_read_input_tokens, u.cache_creation_input_tokens);
        // Refreshed at 60 s: still there at 350 s, gone 5 minutes after that.
        let u3 = cache.apply(&first, Duration::from_secs(350)).unwrap();
        assert_eq!(u3.cache_read_input_tokens, u.cache_creation_input_tokens);
        let u4 = cache.apply(&first, Duration::from_secs(700)).unwrap();
        assert_eq!(u4.cache_read_input_tokens, 0);
    }

    #[test]
    fn look_back_and_limits() {
        let cache = PromptCache::new();
        let mut blocks: Vec<Value> = (0..5).map(|_| text(40, false)).collect();
        blocks.push(text(40, true));
        cache.apply(&body(blocks.clone()), Duration::ZERO).unwrap();
        // Three blocks later, the breakpoint moved: the look-back finds the old entry.
        blocks
            .last_mut()
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
        blocks.extend((0..2).map(|_| text(40, false)));
        blocks.push(text(40, true));
        let u = cache.apply(&body(blocks.clone()), Duration::ZERO).unwrap();
        assert!(u.cache_read_input_tokens > 2000);
        assert_eq!(
            u.cache_creation_input_tokens,
            3 * tokens_of(&text(40, false))
        );
        // 25 blocks later, it does not (the system breakpoint still reads).
        let system_only = cache
            .apply(&body(vec![text(40, true)]), Duration::ZERO)
            .unwrap();
        blocks
            .last_mut()
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
        blocks.extend((0..25).map(|_| text(40, false)));
        blocks.push(text(40, true));
        let u = cache.apply(&body(blocks.clone()), Duration::ZERO).unwrap();
        assert_eq!(
            u.cache_read_input_tokens,
            system_only.cache_read_input_tokens
        );
        // Five breakpoints are refused; a short prompt caches nothing.
        let five = body((0..4).map(|_| text(1, true)).collect());
        assert!(cache.apply(&five, Duration::ZERO).is_err());
        let short = json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": [text(100, true)]}]});
        let u = cache.apply(&short, Duration::ZERO).unwrap();
        assert_eq!(
            (u.cache_creation_input_tokens, u.input_tokens),
            (0, tokens_of(&text(100, false)))
        );
    }
}
