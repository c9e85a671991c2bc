//! LangChain's usage-metadata scaling, for triggers only.
//!
//! When the provider reported real usage on an AI message, the approximate count of the
//! history up to that message can be compared with it. LangChain's
//! `count_tokens_approximately(..., use_usage_metadata_scaling=True)` multiplies the
//! whole count by `reported total_tokens / approximate count up to the last AI message
//! with usage`, clamped to [1.0, 1.25], and rounds up. It applies only when there is
//! more than one message and every AI message names the same provider
//! (`response_metadata["model_provider"]`; Keel's `provider` key is read when
//! `model_provider` is absent).
//!
//! The factor is for trigger decisions; suffix searches (keep) must use unscaled counts
//! so that they stay monotonic.

use keel_core::message::{Message, MessageBody};
use keel_core::tokens::TokenCounter;
use serde_json::Value;

/// The lower clamp of the scale factor.
pub const MIN_SCALE: f64 = 1.0;
/// The upper clamp of the scale factor.
pub const MAX_SCALE: f64 = 1.25;

/// The provider an AI message names, if any.
fn provider_of(message: &Message) -> Option<&str> {
    let meta = &message.as_ai()?.response_metadata;
    meta.get("model_provider")
        .or_else(|| meta.get("provider"))
        .and_then(Value::as_str)
}

/// The clamped factor LangChain would apply, or `None` when scaling does not apply.
/// `per_message[i]` is the count of `messages[i]`.
pub fn scale_factor(messages: &[Message], per_message: &[u64]) -> Option<f64> {
    factor(0, 0, messages, per_message)
}

/// `base`: tokens counted before the messages (LangChain counts tool schemas first);
/// `leading`: messages counted in `base` (a system message passed separately).
fn factor(base: u64, leading: usize, messages: &[Message], per_message: &[u64]) -> Option<f64> {
    if leading + messages.len() <= 1 {
        return None;
    }
    let mut provider: Option<Option<&str>> = None;
    let mut running: u64 = base;
    let mut at_last: Option<(u64, u64)> = None; // (reported total, approx up to it)
    for (message, &count) in messages.iter().zip(per_message) {
        running += count;
        if let MessageBody::Ai(ai) = message.body() {
            let this = provider_of(message);
            match provider {
                // LangChain keeps "unset" while the provider is None, so an AI message
                // without a provider before one with a provider does not invalidate.
                None | Some(None) => provider = Some(this),
                Some(Some(p)) if this != Some(p) => return None,
                Some(Some(_)) => {}
            }
            if let Some(usage) = ai.usage {
                at_last = Some((usage.total_tokens, running));
            }
        }
    }
    provider.flatten()?;
    let (total, approx) = at_last?;
    if approx == 0 {
        return None;
    }
    Some((total as f64 / approx as f64).clamp(MIN_SCALE, MAX_SCALE))
}

/// Count `messages` with `counter` and apply LangChain's usage scaling when it applies.
pub fn count_with_usage_scaling<C: TokenCounter + ?Sized>(
    counter: &C,
    messages: &[Message],
) -> u64 {
    scaled(0, 0, counter.count_each(messages), messages)
}

/// Count a whole request (tool schemas, system message, messages, in LangChain's order)
/// and apply the usage scaling when it applies.
pub fn count_request_with_usage_scaling<C: TokenCounter + ?Sized>(
    counter: &C,
    system: Option<&Message>,
    messages: &[Message],
    tools: &[keel_core::tool::ToolSpec],
) -> u64 {
    let base = counter.count_tools(tools) + system.map_or(0, |s| counter.count_message(s));
    scaled(
        base,
        usize::from(system.is_some()),
        counter.count_each(messages),
        messages,
    )
}

fn scaled(base: u64, leading: usize, per_message: Vec<u64>, messages: &[Message]) -> u64 {
    let total: u64 = base + per_message.iter().sum::<u64>();
    match factor(base, leading, messages, &per_message) {
        Some(factor) => (total as f64 * factor).ceil() as u64,
        None => total,
    }
}
