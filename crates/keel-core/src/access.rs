//! What each middleware reads and writes in state: the [`StateAccess`] it declares.
//!
//! LangChain merges every middleware's `state_schema` into one graph state and finds
//! conflicts (two middlewares owning one key, a key nobody writes, a jump from a hook
//! that cannot take it) only when a run reaches them. Keel asks each middleware for its
//! [`StateAccess`] and its [`jump_targets`](crate::middleware::Middleware::jump_targets);
//! keel-agent's `AgentBuilder::build` checks the whole stack (`keel_agent::check_stack`)
//! and refuses one with such a mistake, naming the middleware.

/// The named state values a middleware reads and writes (`AgentState::values` keys; the
/// message list is shared by every middleware and is not declared).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateAccess {
    /// Keys it reads and needs some middleware of the same agent (itself included) to
    /// write. A key it merely tolerates being absent need not be listed.
    pub reads: Vec<String>,
    /// Keys it writes. Each key has one writer per agent.
    pub writes: Vec<String>,
}

impl StateAccess {
    /// Adds a key it reads.
    pub fn read(mut self, key: impl Into<String>) -> Self {
        self.reads.push(key.into());
        self
    }

    /// Adds a key it writes.
    pub fn write(mut self, key: impl Into<String>) -> Self {
        self.writes.push(key.into());
        self
    }
}
