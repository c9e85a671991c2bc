//! Known context windows of common OpenAI models.

/// Input-token windows by model family, longest prefix first so `gpt-4o-mini` is not
/// read as `gpt-4o` and `gpt-4-turbo` not as `gpt-4`. A name matches a prefix when it
/// equals it or continues with `-` (dated snapshots: `gpt-4o-2024-08-06`) or `.`.
const KNOWN: &[(&str, u64)] = &[
    ("gpt-5-chat", 128_000),
    ("gpt-4.1-nano", 1_047_576),
    ("gpt-4.1-mini", 1_047_576),
    ("gpt-4o-mini", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-1106", 128_000),
    ("gpt-4-0125", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-3.5-turbo", 16_385),
    ("o1-preview", 128_000),
    ("o1-mini", 128_000),
    ("o3-mini", 200_000),
    ("o4-mini", 200_000),
    ("gpt-4.5", 128_000),
    ("gpt-4.1", 1_047_576),
    // gpt-5 has a 400k window of which 128k are reserved for output.
    ("gpt-5", 272_000),
    ("gpt-4o", 128_000),
    ("gpt-4", 8_192),
    ("o1", 200_000),
    ("o3", 200_000),
];

/// The context window (input tokens) of a known OpenAI model, or `None` for models this
/// table does not know (local models: configure the window explicitly).
///
/// A provider prefix such as LiteLLM's `openai/gpt-4o` is ignored.
///
/// ```
/// use keel_openai::known_context_window;
/// assert_eq!(known_context_window("gpt-4o-mini-2024-07-18"), Some(128_000));
/// assert_eq!(known_context_window("gpt-4"), Some(8_192));
/// assert_eq!(known_context_window("smollm2"), None);
/// ```
pub fn known_context_window(model: &str) -> Option<u64> {
    let name = model.strip_prefix("openai/").unwrap_or(model);
    KNOWN.iter().find_map(|(prefix, window)| {
        let rest = name.strip_prefix(prefix)?;
        (rest.is_empty() || rest.starts_with('-') || rest.starts_with('.')).then_some(*window)
    })
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
            ("gpt-5", Some(272_000)),
            ("gpt-5-mini", Some(272_000)),
            ("gpt-5.1", Some(272_000)),
            ("gpt-5-chat-latest", Some(128_000)),
            ("gpt-3.5-turbo", Some(16_385)),
            ("gpt-3.5-turbo-0125", Some(16_385)),
            ("gpt-4", Some(8_192)),
            ("gpt-4-0613", Some(8_192)),
            ("gpt-4-turbo-2024-04-09", Some(128_000)),
            ("openai/gpt-4o", Some(128_000)),
            ("gpt-4oops", None),
            ("o10", None),
            ("llama-3.1-8b", None),
            ("", None),
        ] {
            assert_eq!(known_context_window(name), want, "{name}");
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
