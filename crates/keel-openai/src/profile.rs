//! Known context windows and output limits of the models users name.
//!
//! One table, [`KNOWN_MODELS`], each entry with the page of the provider (or the model
//! card) its figures come from. A name is matched against the families in the table
//! after normalizing what gateways and servers add around it:
//!
//! - a route prefix up to the last `/` (`openai/gpt-4o`, `anthropic/claude-3.5-sonnet`,
//!   `meta-llama/Llama-3.1-8B-Instruct`, `models/gemini-2.5-pro`);
//! - Bedrock's region and vendor prefixes (`us.anthropic.claude-sonnet-4-20250514-v1:0`);
//! - case, and dotted versions of Claude models (`claude-3.5-sonnet` is `claude-3-5-sonnet`);
//! - a leading `meta-` or `open-` (`meta-llama-3.1-8b-instruct`, `open-mixtral-8x7b`).
//!
//! The longest family that the name equals, or continues with `-`, `.`, `:`, `_` or `@`
//! (dated snapshots `gpt-4o-2024-08-06`, Ollama tags `llama3.1:8b`, Vertex versions
//! `claude-3-5-sonnet-v2@20241022`), wins: `gpt-4o-mini` is not read as `gpt-4o`.
//!
//! Open-weight models (Llama, Qwen, Mistral, Mixtral, DeepSeek) run with whatever
//! context the server was started with; the table gives the model card's default
//! (Qwen's YaRN extension is not assumed), and a server started smaller must be
//! configured with its real window (`OpenAiConfig::with_context_window`).

/// What Keel knows about one model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownModel {
    /// The family as matched (`gpt-4o-mini`, `claude-sonnet-4-5`, `llama-3.1`).
    pub family: &'static str,
    /// Who makes it (`openai`, `anthropic`, `google`, `meta`, `qwen`, `mistral`,
    /// `deepseek`).
    pub vendor: &'static str,
    /// The context window in tokens, as the source states it.
    pub context_window: u64,
    /// The most tokens one answer may have, when the source states it.
    pub max_output_tokens: Option<u64>,
    /// The provider's model page (or model card) the figures come from.
    pub source: &'static str,
}

const fn m(
    family: &'static str,
    vendor: &'static str,
    context_window: u64,
    max_output_tokens: Option<u64>,
    source: &'static str,
) -> KnownModel {
    KnownModel {
        family,
        vendor,
        context_window,
        max_output_tokens,
        source,
    }
}

const ANTHROPIC: &str = "https://docs.anthropic.com/en/docs/about-claude/models/overview";
const GEMINI: &str = "https://ai.google.dev/gemini-api/docs/models";
const MISTRAL: &str = "https://docs.mistral.ai/getting-started/models/models_overview/";
const DEEPSEEK_API: &str = "https://api-docs.deepseek.com/quick_start/pricing";
const LLAMA_3: &str = "https://github.com/meta-llama/llama3/blob/main/MODEL_CARD.md";
const LLAMA_3_1: &str =
    "https://github.com/meta-llama/llama-models/blob/main/models/llama3_1/MODEL_CARD.md";
const LLAMA_3_2: &str =
    "https://github.com/meta-llama/llama-models/blob/main/models/llama3_2/MODEL_CARD.md";
const LLAMA_3_3: &str =
    "https://github.com/meta-llama/llama-models/blob/main/models/llama3_3/MODEL_CARD.md";
const MISTRAL_7B: &str = "https://huggingface.co/mistralai/Mistral-7B-Instruct-v0.3";

/// The table: context window and output limit per model family, with its source.
#[rustfmt::skip]
pub const KNOWN_MODELS: &[KnownModel] = &[
    // OpenAI. gpt-5's 400k window holds its 128k of output: 272k of input.
    m("gpt-5", "openai", 400_000, Some(128_000), "https://platform.openai.com/docs/models/gpt-5"),
    m("gpt-5-chat", "openai", 128_000, Some(16_384), "https://platform.openai.com/docs/models/gpt-5-chat-latest"),
    m("gpt-4.5", "openai", 128_000, Some(16_384), "https://platform.openai.com/docs/models/gpt-4.5-preview"),
    m("gpt-4.1", "openai", 1_047_576, Some(32_768), "https://platform.openai.com/docs/models/gpt-4.1"),
    m("gpt-4.1-mini", "openai", 1_047_576, Some(32_768), "https://platform.openai.com/docs/models/gpt-4.1-mini"),
    m("gpt-4.1-nano", "openai", 1_047_576, Some(32_768), "https://platform.openai.com/docs/models/gpt-4.1-nano"),
    m("gpt-4o", "openai", 128_000, Some(16_384), "https://platform.openai.com/docs/models/gpt-4o"),
    m("gpt-4o-mini", "openai", 128_000, Some(16_384), "https://platform.openai.com/docs/models/gpt-4o-mini"),
    m("gpt-4-turbo", "openai", 128_000, Some(4_096), "https://platform.openai.com/docs/models/gpt-4-turbo"),
    m("gpt-4-1106", "openai", 128_000, Some(4_096), "https://platform.openai.com/docs/models/gpt-4-turbo"),
    m("gpt-4-0125", "openai", 128_000, Some(4_096), "https://platform.openai.com/docs/models/gpt-4-turbo"),
    m("gpt-4-32k", "openai", 32_768, None, "https://platform.openai.com/docs/models/gpt-4"),
    m("gpt-4", "openai", 8_192, Some(8_192), "https://platform.openai.com/docs/models/gpt-4"),
    m("gpt-3.5-turbo", "openai", 16_385, Some(4_096), "https://platform.openai.com/docs/models/gpt-3.5-turbo"),
    m("o1", "openai", 200_000, Some(100_000), "https://platform.openai.com/docs/models/o1"),
    m("o1-pro", "openai", 200_000, Some(100_000), "https://platform.openai.com/docs/models/o1-pro"),
    m("o1-mini", "openai", 128_000, Some(65_536), "https://platform.openai.com/docs/models/o1-mini"),
    m("o1-preview", "openai", 128_000, Some(32_768), "https://platform.openai.com/docs/models/o1-preview"),
    m("o3", "openai", 200_000, Some(100_000), "https://platform.openai.com/docs/models/o3"),
    m("o3-pro", "openai", 200_000, Some(100_000), "https://platform.openai.com/docs/models/o3-pro"),
    m("o3-mini", "openai", 200_000, Some(100_000), "https://platform.openai.com/docs/models/o3-mini"),
    m("o4-mini", "openai", 200_000, Some(100_000), "https://platform.openai.com/docs/models/o4-mini"),
    // Anthropic: every model listed has a 200k window; the output limits differ.
    m("claude-3-opus", "anthropic", 200_000, Some(4_096), ANTHROPIC),
    m("claude-3-sonnet", "anthropic", 200_000, Some(4_096), ANTHROPIC),
    m("claude-3-haiku", "anthropic", 200_000, Some(4_096), ANTHROPIC),
    m("claude-3-5-sonnet", "anthropic", 200_000, Some(8_192), ANTHROPIC),
    m("claude-3-5-haiku", "anthropic", 200_000, Some(8_192), ANTHROPIC),
    m("claude-3-7-sonnet", "anthropic", 200_000, Some(64_000), ANTHROPIC),
    m("claude-sonnet-4", "anthropic", 200_000, Some(64_000), ANTHROPIC),
    m("claude-opus-4", "anthropic", 200_000, Some(32_000), ANTHROPIC),
    m("claude-opus-4-1", "anthropic", 200_000, Some(32_000), ANTHROPIC),
    m("claude-sonnet-4-5", "anthropic", 200_000, Some(64_000), ANTHROPIC),
    m("claude-haiku-4-5", "anthropic", 200_000, Some(64_000), ANTHROPIC),
    m("claude-opus-4-5", "anthropic", 200_000, Some(64_000), ANTHROPIC),
    // Google Gemini (input token limit, output token limit).
    m("gemini-1.5-pro", "google", 2_097_152, Some(8_192), GEMINI),
    m("gemini-1.5-flash", "google", 1_048_576, Some(8_192), GEMINI),
    m("gemini-1.5-flash-8b", "google", 1_048_576, Some(8_192), GEMINI),
    m("gemini-2.0-flash", "google", 1_048_576, Some(8_192), GEMINI),
    m("gemini-2.0-flash-lite", "google", 1_048_576, Some(8_192), GEMINI),
    m("gemini-2.5-pro", "google", 1_048_576, Some(65_536), GEMINI),
    m("gemini-2.5-flash", "google", 1_048_576, Some(65_536), GEMINI),
    m("gemini-2.5-flash-lite", "google", 1_048_576, Some(65_536), GEMINI),
    // Meta Llama: the model cards give the context; the output shares it.
    m("llama-3", "meta", 8_192, None, LLAMA_3),
    m("llama3", "meta", 8_192, None, LLAMA_3),
    m("llama-3.1", "meta", 131_072, None, LLAMA_3_1),
    m("llama3.1", "meta", 131_072, None, LLAMA_3_1),
    m("llama-3.2", "meta", 131_072, None, LLAMA_3_2),
    m("llama3.2", "meta", 131_072, None, LLAMA_3_2),
    m("llama-3.3", "meta", 131_072, None, LLAMA_3_3),
    m("llama3.3", "meta", 131_072, None, LLAMA_3_3),
    // Qwen: the served default (YaRN extends it only when the server enables it).
    m("qwen2.5", "qwen", 32_768, Some(8_192), "https://huggingface.co/Qwen/Qwen2.5-7B-Instruct"),
    m("qwen3", "qwen", 32_768, None, "https://huggingface.co/Qwen/Qwen3-8B"),
    m("qwen3-coder", "qwen", 262_144, None, "https://huggingface.co/Qwen/Qwen3-Coder-480B-A35B-Instruct"),
    // Mistral.
    m("mistral-large", "mistral", 131_072, None, MISTRAL),
    m("mistral-medium", "mistral", 131_072, None, MISTRAL),
    m("mistral-small", "mistral", 131_072, None, MISTRAL),
    m("mistral-small-2501", "mistral", 32_768, None, MISTRAL),
    m("mistral-nemo", "mistral", 131_072, None, MISTRAL),
    m("mistral-7b", "mistral", 32_768, None, MISTRAL_7B),
    m("mistral", "mistral", 32_768, None, MISTRAL_7B),
    m("mixtral-8x7b", "mistral", 32_768, None, "https://huggingface.co/mistralai/Mixtral-8x7B-Instruct-v0.1"),
    m("mixtral-8x22b", "mistral", 65_536, None, "https://huggingface.co/mistralai/Mixtral-8x22B-Instruct-v0.1"),
    // DeepSeek: the API's names, then the open weights.
    m("deepseek-chat", "deepseek", 128_000, Some(8_192), DEEPSEEK_API),
    m("deepseek-reasoner", "deepseek", 128_000, Some(65_536), DEEPSEEK_API),
    m("deepseek-v3", "deepseek", 128_000, None, "https://huggingface.co/deepseek-ai/DeepSeek-V3"),
    m("deepseek-r1", "deepseek", 128_000, None, "https://huggingface.co/deepseek-ai/DeepSeek-R1"),
];

/// The family key a model name is matched with (see the [module docs](self)).
fn normalize(model: &str) -> String {
    let name = model.rsplit('/').next().unwrap_or(model).trim();
    let mut name = name.to_ascii_lowercase();
    // Bedrock: `us.anthropic.claude-...`, `anthropic.claude-...`, `meta.llama3-...`.
    for vendor in ["anthropic.", "meta.", "mistral.", "deepseek.", "qwen."] {
        if let Some(at) = name.find(vendor) {
            name = name[at + vendor.len()..].to_owned();
            break;
        }
    }
    for prefix in ["meta-", "open-"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            name = rest.to_owned();
        }
    }
    if name.starts_with("claude") {
        name = name.replace('.', "-");
    }
    name
}

/// What Keel knows about `model`, or `None` for a model the table does not have
/// (configure its window explicitly).
///
/// ```
/// use keel_openai::known_model;
/// let m = known_model("anthropic/claude-3.5-sonnet").unwrap();
/// assert_eq!((m.family, m.context_window, m.max_output_tokens), ("claude-3-5-sonnet", 200_000, Some(8_192)));
/// assert_eq!(known_model("llama3.1:8b").unwrap().context_window, 131_072);
/// assert!(known_model("smollm2").is_none());
/// ```
pub fn known_model(model: &str) -> Option<&'static KnownModel> {
    let name = normalize(model);
    KNOWN_MODELS
        .iter()
        .filter(|k| {
            name.strip_prefix(k.family)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.', ':', '_', '@']))
        })
        .max_by_key(|k| k.family.len())
}

/// The context window of a known model, or `None` for models the table does not know
/// (local models: configure the window explicitly).
///
/// A route prefix such as LiteLLM's `openai/gpt-4o` is ignored.
///
/// ```
/// use keel_openai::known_context_window;
/// assert_eq!(known_context_window("gpt-4o-mini-2024-07-18"), Some(128_000));
/// assert_eq!(known_context_window("gpt-4"), Some(8_192));
/// assert_eq!(known_context_window("smollm2"), None);
/// ```
pub fn known_context_window(model: &str) -> Option<u64> {
    known_model(model).map(|k| k.context_window)
}

/// True for OpenAI reasoning models, which take `max_completion_tokens` and reject
/// `max_tokens`.
pub(crate) fn is_reasoning_model(model: &str) -> bool {
    let name = model.strip_prefix("openai/").unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-') || rest.starts_with('.'))
    }) && !name.starts_with("gpt-5-chat")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_snapshots() {
        for (name, want) in [
            ("gpt-4o", Some(128_000)),
            ("gpt-4o-2024-08-06", Some(128_000)),
            ("gpt-4o-mini", Some(128_000)),
            ("gpt-4.1", Some(1_047_576)),
            ("gpt-4.1-mini-2025-04-14", Some(1_047_576)),
            ("gpt-4.1-nano", Some(1_047_576)),
            ("o1", Some(200_000)),
            ("o1-mini", Some(128_000)),
            ("o3", Some(200_000)),
            ("o3-mini", Some(200_000)),
            ("o4-mini", Some(200_000)),
            ("gpt-5", Some(400_000)),
            ("gpt-5-mini", Some(400_000)),
            ("gpt-5.1", Some(400_000)),
            ("gpt-5-chat-latest", Some(128_000)),
            ("gpt-3.5-turbo", Some(16_385)),
            ("gpt-3.5-turbo-0125", Some(16_385)),
            ("gpt-4", Some(8_192)),
            ("gpt-4-0613", Some(8_192)),
            ("gpt-4-turbo-2024-04-09", Some(128_000)),
            ("openai/gpt-4o", Some(128_000)),
            ("gpt-4oops", None),
            ("o10", None),
            ("llama-3.1-8b", Some(131_072)),
            ("smollm2", None),
            ("", None),
        ] {
            assert_eq!(known_context_window(name), want, "{name}");
        }
    }

    #[test]
    fn names_as_gateways_and_servers_spell_them() {
        for (name, family) in [
            ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
            ("anthropic/claude-3.7-sonnet", "claude-3-7-sonnet"),
            ("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
            ("claude-sonnet-4-20250514", "claude-sonnet-4"),
            ("claude-opus-4-1-20250805", "claude-opus-4-1"),
            (
                "us.anthropic.claude-sonnet-4-20250514-v1:0",
                "claude-sonnet-4",
            ),
            ("claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"),
            ("claude-haiku-4-5", "claude-haiku-4-5"),
            ("gemini/gemini-1.5-pro-002", "gemini-1.5-pro"),
            ("models/gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
            ("google/gemini-2.0-flash-001", "gemini-2.0-flash"),
            ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1"),
            ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3"),
            ("llama3.2:3b", "llama3.2"),
            ("llama3:8b", "llama3"),
            ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5"),
            ("qwen2.5:0.5b", "qwen2.5"),
            ("Qwen/Qwen3-8B", "qwen3"),
            ("qwen3-coder-480b-a35b-instruct", "qwen3-coder"),
            ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
            ("open-mixtral-8x22b", "mixtral-8x22b"),
            ("mistral-large-latest", "mistral-large"),
            ("mistral-small-2501", "mistral-small-2501"),
            ("mistral:7b", "mistral"),
            ("deepseek-chat", "deepseek-chat"),
            ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
            ("deepseek/deepseek-v3-0324", "deepseek-v3"),
        ] {
            assert_eq!(known_model(name).map(|k| k.family), Some(family), "{name}");
        }
        for unknown in ["claude-2", "gemini-pro", "qwen", "mistralish", "phi-4"] {
            assert!(known_model(unknown).is_none(), "{unknown}");
        }
    }

    #[test]
    fn every_entry_is_sourced_and_sane() {
        let mut seen = std::collections::HashSet::new();
        for k in KNOWN_MODELS {
            assert!(seen.insert(k.family), "{} listed twice", k.family);
            assert!(k.source.starts_with("https://"), "{}", k.family);
            assert!(k.context_window >= 4_096, "{}", k.family);
            assert!(
                k.max_output_tokens.is_none_or(|o| o <= k.context_window),
                "{}",
                k.family
            );
            assert_eq!(known_model(k.family), Some(k), "{} finds itself", k.family);
        }
    }

    #[test]
    fn reasoning_models() {
        assert!(is_reasoning_model("o3-mini"));
        assert!(is_reasoning_model("gpt-5"));
        assert!(!is_reasoning_model("gpt-5-chat-latest"));
        assert!(!is_reasoning_model("gpt-4o"));
        assert!(!is_reasoning_model("smollm2"));
    }
}
