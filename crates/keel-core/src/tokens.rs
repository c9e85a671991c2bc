//! The token-counting contract. Implementations (exact tiktoken counts, LangChain's
//! approximation, cached and incremental wrappers) live in `keel-tokens`.

use crate::message::Message;
use crate::tool::ToolSpec;

/// Counts tokens the way a model would see them.
pub trait TokenCounter: Send + Sync {
    /// A short name (`o200k_base`, `approximate`).
    fn name(&self) -> &str;

    /// Tokens of one message, framing included.
    fn count_message(&self, message: &Message) -> u64;

    /// Tokens of a plain string.
    fn count_text(&self, text: &str) -> u64;

    /// Tokens of a list of messages. Counters with a cache override this.
    fn count_messages(&self, messages: &[Message]) -> u64 {
        messages.iter().map(|m| self.count_message(m)).sum()
    }

    /// Tokens of each message, in order (for suffix searches and per-message reports).
    /// Counters with a cache override this.
    fn count_each(&self, messages: &[Message]) -> Vec<u64> {
        messages.iter().map(|m| self.count_message(m)).collect()
    }

    /// [`count_messages`](Self::count_messages) for a list whose
    /// [`Lineage`](crate::state::Lineage) is known: a counter that remembers the list
    /// may then trust the part it has seen and count only what was appended. The
    /// default ignores the lineage.
    fn count_messages_in(
        &self,
        messages: &[Message],
        lineage: Option<crate::state::Lineage>,
    ) -> u64 {
        let _ = lineage;
        self.count_messages(messages)
    }

    /// [`count_each`](Self::count_each) for a list whose lineage is known (see
    /// [`count_messages_in`](Self::count_messages_in)).
    fn count_each_in(
        &self,
        messages: &[Message],
        lineage: Option<crate::state::Lineage>,
    ) -> Vec<u64> {
        let _ = lineage;
        self.count_each(messages)
    }

    /// Tokens of tool schemas as sent to the model.
    fn count_tools(&self, tools: &[ToolSpec]) -> u64 {
        tools
            .iter()
            .map(|t| {
                let json = serde_json::json!({
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                });
                self.count_text(&json.to_string())
            })
            .sum()
    }

    /// Tokens a request costs beyond its parts (OpenAI primes every reply with 3).
    fn request_overhead(&self) -> u64 {
        0
    }

    /// Tokens of a whole request: system message, messages, tool schemas and the
    /// [`request_overhead`](Self::request_overhead).
    fn count_request(
        &self,
        system: Option<&Message>,
        messages: &[Message],
        tools: &[ToolSpec],
    ) -> u64 {
        system.map_or(0, |s| self.count_message(s))
            + self.count_messages(messages)
            + self.count_tools(tools)
            + self.request_overhead()
    }
}
