//! The middleware list split per hook, and the node names the run reports.
//!
//! Built once per agent: a middleware appears only in the lists of the hooks it
//! implements, so an unimplemented hook costs nothing per call.

use std::sync::Arc;

use keel_core::middleware::{Hooks, Middleware};

/// Node name of the model step in `updates` events, `messages` events and checkpoints.
pub const MODEL_NODE: &str = "model";
/// Node name of the tools step.
pub const TOOLS_NODE: &str = "tools";
/// Node name of the checkpoint holding a run's input.
pub const INPUT_NODE: &str = "input";
/// The node of the checkpoint that restores the state a rolled-back run started from
/// (multitask strategy `rollback`).
pub const ROLLBACK_NODE: &str = "rollback";

/// A middleware in one hook's list, with its precomputed node name.
pub(crate) struct HookEntry {
    pub(crate) middleware: Arc<dyn Middleware>,
    pub(crate) node: Arc<str>,
}

/// Per-hook middleware lists, in execution order, holding only implementers.
pub(crate) struct Pipeline {
    pub(crate) before_agent: Vec<HookEntry>,
    pub(crate) before_model: Vec<HookEntry>,
    pub(crate) after_model: Vec<HookEntry>,
    pub(crate) after_agent: Vec<HookEntry>,
    pub(crate) wrap_model: Vec<Arc<dyn Middleware>>,
    pub(crate) wrap_tool: Vec<Arc<dyn Middleware>>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum NodeHook {
    BeforeAgent,
    BeforeModel,
    AfterModel,
    AfterAgent,
}

impl NodeHook {
    pub(crate) fn name(self) -> &'static str {
        match self {
            NodeHook::BeforeAgent => "before_agent",
            NodeHook::BeforeModel => "before_model",
            NodeHook::AfterModel => "after_model",
            NodeHook::AfterAgent => "after_agent",
        }
    }

    pub(crate) fn implemented_by(self, hooks: Hooks) -> bool {
        match self {
            NodeHook::BeforeAgent => hooks.before_agent(),
            NodeHook::BeforeModel => hooks.before_model(),
            NodeHook::AfterModel => hooks.after_model(),
            NodeHook::AfterAgent => hooks.after_agent(),
        }
    }
}

impl Pipeline {
    /// Splits the middleware list into one list per hook, keeping only the middleware
    /// that implement it: unimplemented hooks then cost nothing per call.
    pub(crate) fn new(middleware: &[Arc<dyn Middleware>]) -> Self {
        let node = |hook: NodeHook, reverse: bool| {
            let mut list: Vec<_> = middleware
                .iter()
                .filter(|m| hook.implemented_by(m.hooks()))
                .map(|m| HookEntry {
                    node: Arc::from(format!("{}.{}", m.name(), hook.name())),
                    middleware: m.clone(),
                })
                .collect();
            if reverse {
                list.reverse();
            }
            list
        };
        Pipeline {
            before_agent: node(NodeHook::BeforeAgent, false),
            before_model: node(NodeHook::BeforeModel, false),
            after_model: node(NodeHook::AfterModel, true),
            after_agent: node(NodeHook::AfterAgent, true),
            wrap_model: middleware
                .iter()
                .filter(|m| m.hooks().wrap_model_call())
                .cloned()
                .collect(),
            wrap_tool: middleware
                .iter()
                .filter(|m| m.hooks().wrap_tool_call())
                .cloned()
                .collect(),
        }
    }

    /// The list of one node hook, in execution order.
    pub(crate) fn node_hooks(&self, hook: NodeHook) -> &[HookEntry] {
        match hook {
            NodeHook::BeforeAgent => &self.before_agent,
            NodeHook::BeforeModel => &self.before_model,
            NodeHook::AfterModel => &self.after_model,
            NodeHook::AfterAgent => &self.after_agent,
        }
    }
}
