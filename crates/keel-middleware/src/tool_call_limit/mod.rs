//! `ToolCallLimit`: caps tool calls per thread and per run, for every tool or for one
//! (LangChain's `ToolCallLimitMiddleware`).
//!
//! In `after_model`, the last AI message's matching calls are admitted in order while
//! they fit both limits; the rest are blocked:
//! - exit `continue` (the default): each blocked call gets an error tool result
//!   (`Tool call limit exceeded. Do not call 'search' again.`); the admitted calls run;
//! - exit `error`: the run fails;
//! - exit `end`: blocked calls get that result, every other call of the message gets
//!   `Execution stopped before this tool call could run ...`, an AI message states which
//!   limit was exceeded, and the run ends. The batch does not count toward the thread.
//!
//! Blocked calls count toward the run (they were attempted), not toward the thread.

use std::sync::Arc;

use keel_core::access::StateAccess;
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::{HookOutcome, JumpTarget, Middleware, MiddlewareError, Runtime};
use keel_core::state::{AgentState, StateUpdate};
use serde_json::{Value, json};

use crate::common::{last_ai_index, run_count, run_count_value, thread_count};
use crate::error::ConfigError;
use crate::events;
use crate::stack::value::MAX_LIMIT;
use crate::stack::value::{Ready, Settings};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// What happens to calls over a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolCallExit {
    /// Answer blocked calls with an error result and go on (the default).
    #[default]
    Continue,
    /// Fail the run.
    Error,
    /// Answer every pending call, add a closing AI message, end the run.
    End,
}

/// Limits tool calls. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct ToolCallLimit {
    tool_name: Option<String>,
    thread_limit: Option<u64>,
    run_limit: Option<u64>,
    exit: ToolCallExit,
    name: String,
    thread_key: String,
    run_key: String,
}

impl ToolCallLimit {
    /// A limit on calls of `tool_name` (every tool when `None`). At least one limit is
    /// required, and the run limit may not exceed the thread limit.
    pub fn new(
        tool_name: Option<String>,
        thread_limit: Option<u64>,
        run_limit: Option<u64>,
        exit: ToolCallExit,
    ) -> Result<Self, ConfigError> {
        if thread_limit.is_none() && run_limit.is_none() {
            return Err(ConfigError::new(
                "tool_call_limit",
                "thread_limit",
                "null",
                "at least one limit must be set (thread_limit or run_limit)",
                "a whole number >= 0 for thread_limit and/or run_limit",
            ));
        }
        if let (Some(thread), Some(run)) = (thread_limit, run_limit)
            && run > thread
        {
            return Err(ConfigError::new(
                "tool_call_limit",
                "run_limit",
                run,
                format!("exceeds thread_limit ({thread})"),
                format!("a whole number in [0, {thread}] (at most thread_limit)"),
            ));
        }
        let key = tool_name.clone().unwrap_or_else(|| "__all__".into());
        Ok(ToolCallLimit {
            name: match &tool_name {
                Some(t) => format!("ToolCallLimitMiddleware[{t}]"),
                None => "ToolCallLimitMiddleware".into(),
            },
            thread_key: format!("thread_tool_call_count.{key}"),
            run_key: format!("run_tool_call_count.{key}"),
            tool_name,
            thread_limit,
            run_limit,
            exit,
        })
    }

    fn would_exceed(&self, thread: u64, run: u64) -> bool {
        self.thread_limit.is_some_and(|l| thread + 1 > l)
            || self.run_limit.is_some_and(|l| run + 1 > l)
    }

    fn blocked_text(&self) -> String {
        match &self.tool_name {
            Some(t) => format!("Tool call limit exceeded. Do not call '{t}' again."),
            None => "Tool call limit exceeded. Do not make additional tool calls.".into(),
        }
    }

    fn final_text(&self, thread: u64, run: u64) -> String {
        let tool = match &self.tool_name {
            Some(t) => format!("'{t}' tool"),
            None => "Tool".into(),
        };
        let mut parts = Vec::new();
        if let Some(l) = self.thread_limit.filter(|l| thread > *l) {
            parts.push(format!("thread limit exceeded ({thread}/{l} calls)"));
        }
        if let Some(l) = self.run_limit.filter(|l| run > *l) {
            parts.push(format!("run limit exceeded ({run}/{l} calls)"));
        }
        format!("{tool} call limit reached: {}.", parts.join(" and "))
    }

    fn counts(&self, thread: u64, run: u64, run_id: &str) -> StateUpdate {
        let mut update = StateUpdate::value(self.thread_key.clone(), Value::from(thread));
        update
            .values
            .insert(self.run_key.clone(), run_count_value(run_id, run));
        update
    }
}

fn error_result(call: &ToolCall, text: &str) -> Message {
    Message::tool_error(call.id.clone(), text).with_name(call.name.clone())
}

#[keel_core::middleware]
impl Middleware for ToolCallLimit {
    fn name(&self) -> &str {
        &self.name
    }

    fn jump_targets(&self) -> &[JumpTarget] {
        &[JumpTarget::End]
    }

    fn state_access(&self) -> StateAccess {
        StateAccess::default()
            .write(self.thread_key.clone())
            .write(self.run_key.clone())
    }

    async fn after_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(i) = last_ai_index(&state.messages) else {
            return Ok(HookOutcome::proceed());
        };
        let all = state.messages[i].tool_calls();
        if all.is_empty() {
            return Ok(HookOutcome::proceed());
        }
        let start_thread = thread_count(state, &self.thread_key);
        let start_run = run_count(state, &self.run_key, &runtime.run_id);
        let (mut thread, mut run) = (start_thread, start_run);
        let mut allowed = 0u64;
        let mut blocked: Vec<&ToolCall> = Vec::new();
        for call in all {
            if self.tool_name.as_ref().is_some_and(|t| *t != call.name) {
                continue;
            }
            if self.would_exceed(thread, run) {
                blocked.push(call);
            } else {
                allowed += 1;
                thread += 1;
                run += 1;
            }
        }
        let run_total = run + blocked.len() as u64;
        if blocked.is_empty() {
            if allowed == 0 {
                return Ok(HookOutcome::proceed());
            }
            events::counter(
                &runtime.writer,
                &self.name,
                "tool_calls",
                allowed,
                json!({"thread_count": thread, "run_count": run_total}),
            );
            return Ok(HookOutcome::update(self.counts(
                thread,
                run_total,
                &runtime.run_id,
            )));
        }
        events::counter(
            &runtime.writer,
            &self.name,
            "blocked_tool_calls",
            blocked.len() as u64,
            json!({"thread_count": thread, "run_count": run_total}),
        );
        let tally = Tally {
            start_thread,
            thread,
            run_total,
        };
        self.over_limit(all, &blocked, tally, &runtime.run_id)
    }
}

/// The counts of one batch of tool calls: the thread's before it, after the allowed
/// calls, and the run's with every call of the batch.
#[derive(Clone, Copy)]
struct Tally {
    start_thread: u64,
    thread: u64,
    run_total: u64,
}

impl ToolCallLimit {
    /// What a batch with `blocked` calls does, as `exit_behavior` says: fail, answer
    /// the blocked calls with an error and go on, or answer every call and end.
    fn over_limit(
        &self,
        all: &[ToolCall],
        blocked: &[&ToolCall],
        tally: Tally,
        run_id: &str,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Tally {
            start_thread,
            thread,
            run_total,
        } = tally;
        let hypothetical_thread = thread + blocked.len() as u64;
        match self.exit {
            ToolCallExit::Error => Err(MiddlewareError {
                middleware: self.name.clone(),
                hook: "after_model",
                message: self.final_text(hypothetical_thread, run_total),
            }),
            ToolCallExit::Continue => {
                let text = self.blocked_text();
                let mut update =
                    StateUpdate::messages(blocked.iter().map(|c| error_result(c, &text)));
                update.merge(self.counts(thread, run_total, run_id));
                Ok(HookOutcome::update(update))
            }
            ToolCallExit::End => {
                let text = self.blocked_text();
                let mut messages: Vec<Message> =
                    blocked.iter().map(|c| error_result(c, &text)).collect();
                let stopped = "Execution stopped before this tool call could run because another tool call in the same batch exceeded the limit.";
                messages.extend(
                    all.iter()
                        .filter(|c| !blocked.iter().any(|b| b.id == c.id))
                        .map(|c| error_result(c, stopped)),
                );
                messages.push(Message::ai(self.final_text(hypothetical_thread, run_total)));
                let mut update = StateUpdate::messages(messages);
                // Nothing of this batch runs: the thread count stays where it was.
                update.merge(self.counts(start_thread, run_total, run_id));
                Ok(HookOutcome {
                    update,
                    jump: Some(JumpTarget::End),
                })
            }
        }
    }
}

/// The `tool_call_limit` entry of a stack file: LangChain's constructor arguments, read
/// and checked here with the middleware they build.
pub(crate) struct Entry;

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "tool_call_limit"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(
            source,
            &["tool_name", "thread_limit", "run_limit", "exit_behavior"],
        )?;
        let limit = |key: &str| -> Result<Option<u64>, StackError> {
            Ok(args
                .get(key)
                .map(|v| v.opt_count(MAX_LIMIT))
                .transpose()?
                .flatten())
        };
        let exit = match args.get("exit_behavior") {
            Some(v) => match v.choice(&["continue", "error", "end"])? {
                "error" => ToolCallExit::Error,
                "end" => ToolCallExit::End,
                _ => ToolCallExit::Continue,
            },
            None => ToolCallExit::Continue,
        };
        let tool = match args.get("tool_name") {
            Some(v) if !v.is_null() => Some(v.string()?),
            _ => None,
        };
        let m = ToolCallLimit::new(tool, limit("thread_limit")?, limit("run_limit")?, exit)
            .map_err(|e| args.refused(e))?;
        Ok(Arc::new(Ready(Arc::new(m))))
    }
}

#[cfg(test)]
mod tests;
