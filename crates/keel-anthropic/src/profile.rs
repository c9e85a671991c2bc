//! What Keel knows of the Claude model families: context window and output limit, each
//! with the Anthropic page that states it.
//!
//! A name is matched by family, so dated snapshots (`claude-sonnet-4-5-20250929`),
//! aliases (`claude-3-5-sonnet-latest`), gateway routes (`anthropic/claude-3.7-sonnet`),
//! Bedrock ids (`us.anthropic.claude-sonnet-4-20250514-v1:0`) and Vertex ids
//! (`claude-3-5-sonnet-v2@20241022`) all find their family; the longest family that
//! matches wins (`claude-opus-4-1` over `claude-opus-4`).
//!
//! The windows are the standard ones. Sonnet 4 and 4.5 take 1M tokens with the
//! `context-1m-2025-08-07` beta, and Claude 3.7 Sonnet writes up to 128k tokens with
//! `output-128k-2025-02-19`: a configuration enabling those sets its window
//! (`AnthropicConfig::with_context_window`) and `max_tokens` itself.

/// What Keel knows about one Claude family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownModel {
    /// The family as matched (`claude-sonnet-4-5`).
    pub family: &'static str,
    /// The context window in tokens.
    pub context_window: u64,
    /// The most tokens one answer may have.
    pub max_output_tokens: u64,
    /// The Anthropic page the figures come from.
    pub source: &'static str,
}

const MODELS: &str = "https://docs.anthropic.com/en/docs/about-claude/models/overview";
const DEPRECATED: &str = "https://docs.anthropic.com/en/docs/about-claude/model-deprecations";

const fn m(
    family: &'static str,
    context_window: u64,
    max_output_tokens: u64,
    source: &'static str,
) -> KnownModel {
    KnownModel {
        family,
        context_window,
        max_output_tokens,
        source,
    }
}

/// The table: every Claude family of the Messages API, newest first.
#[rustfmt::skip]
pub const KNOWN_MODELS: &[KnownModel] = &[
    m("claude-opus-4-5", 200_000, 64_000, MODELS),
    m("claude-sonnet-4-5", 200_000, 64_000, MODELS),
    m("claude-haiku-4-5", 200_000, 64_000, MODELS),
    m("claude-opus-4-1", 200_000, 32_000, MODELS),
    m("claude-opus-4", 200_000, 32_000, MODELS),
    m("claude-sonnet-4", 200_000, 64_000, MODELS),
    m("claude-3-7-sonnet", 200_000, 64_000, MODELS),
    m("claude-3-5-haiku", 200_000, 8_192, MODELS),
    m("claude-3-5-sonnet", 200_000, 8_192, DEPRECATED),
    m("claude-3-opus", 200_000, 4_096, DEPRECATED),
    m("claude-3-sonnet", 200_000, 4_096, DEPRECATED),
    m("claude-3-haiku", 200_000, 4_096, MODELS),
];

/// The family key a model name is matched with (see the [module docs](self)).
fn normalize(model: &str) -> String {
    let name = model.rsplit('/').next().unwrap_or(model).trim();
    let mut name = name.to_ascii_lowercase();
    if let Some(at) = name.find("anthropic.") {
        name = name[at + "anthropic.".len()..].to_owned();
    }
    name.replace('.', "-")
}

/// What Keel knows about `model`, or `None` for a name the table does not have
/// (configure its window explicitly).
///
/// ```
/// use keel_anthropic::known_model;
/// let m = known_model("claude-sonnet-4-5-20250929").unwrap();
/// assert_eq!((m.family, m.context_window, m.max_output_tokens), ("claude-sonnet-4-5", 200_000, 64_000));
/// assert_eq!(known_model("anthropic/claude-3.5-haiku").unwrap().max_output_tokens, 8_192);
/// assert!(known_model("claude-2.1").is_none());
/// ```
pub fn known_model(model: &str) -> Option<&'static KnownModel> {
    let name = normalize(model);
    KNOWN_MODELS
        .iter()
        .filter(|k| {
            name.strip_prefix(k.family)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', ':', '@', '_']))
        })
        .max_by_key(|k| k.family.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_apis_and_gateways_spell_them() {
        for (name, family) in [
            ("claude-opus-4-5-20251101", "claude-opus-4-5"),
            ("claude-sonnet-4-5", "claude-sonnet-4-5"),
            ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
            ("claude-opus-4-1-20250805", "claude-opus-4-1"),
            ("claude-opus-4-20250514", "claude-opus-4"),
            ("claude-sonnet-4-20250514", "claude-sonnet-4"),
            ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
            ("anthropic/claude-3.7-sonnet", "claude-3-7-sonnet"),
            ("claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"),
            (
                "us.anthropic.claude-sonnet-4-20250514-v1:0",
                "claude-sonnet-4",
            ),
            ("claude-3-haiku-20240307", "claude-3-haiku"),
        ] {
            assert_eq!(known_model(name).map(|k| k.family), Some(family), "{name}");
        }
        for unknown in ["claude-2", "claude-instant-1.2", "gpt-4o", "smollm2", ""] {
            assert!(known_model(unknown).is_none(), "{unknown}");
        }
    }

    #[test]
    fn every_entry_is_sourced_and_sane() {
        let mut seen = std::collections::HashSet::new();
        for k in KNOWN_MODELS {
            assert!(seen.insert(k.family), "{} listed twice", k.family);
            assert!(k.source.starts_with("https://docs.anthropic.com/"));
            assert!(k.max_output_tokens < k.context_window, "{}", k.family);
            assert_eq!(known_model(k.family), Some(k), "{} finds itself", k.family);
        }
    }
}
