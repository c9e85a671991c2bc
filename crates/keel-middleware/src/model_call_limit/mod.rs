//! `ModelCallLimit`: stops a run, or fails it, once a thread or a run has made as many
//! model calls as allowed (LangChain's `ModelCallLimitMiddleware`).
//!
//! Its `model_calls` counter event carries each call's token usage (`input_tokens`,
//! `output_tokens`) when the provider reported it.
//!
//! `before_model` checks the counts: at a limit, exit `end` appends an AI message
//! `Model call limits exceeded: run limit (2/2)` and jumps to the end, exit `error`
//! fails the run with that text. `after_model` counts the call. The thread count is
//! checkpointed with the thread; the run count starts at zero in every run.

use std::sync::Arc;

use keel_core::access::StateAccess;
use keel_core::message::Message;
use keel_core::middleware::{HookOutcome, JumpTarget, Middleware, MiddlewareError, Runtime};
use keel_core::state::{AgentState, StateUpdate};
use serde_json::{Value, json};

use crate::common::{run_count, run_count_value, thread_count};
use crate::error::ConfigError;
use crate::events;
use crate::stack::value::MAX_LIMIT;
use crate::stack::value::{Ready, Settings};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// State key of the thread's model-call count (LangChain's name).
pub const THREAD_KEY: &str = "thread_model_call_count";
/// State key of the run's model-call count (LangChain's name; stored with its run id).
pub const RUN_KEY: &str = "run_model_call_count";

/// What happens at a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModelCallExit {
    /// Append LangChain's closing AI message and end the run (the default).
    #[default]
    End,
    /// Fail the run with a [`MiddlewareError`] carrying the same text.
    Error,
}

/// Limits model calls per thread and per run. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct ModelCallLimit {
    thread_limit: Option<u64>,
    run_limit: Option<u64>,
    exit: ModelCallExit,
}

impl ModelCallLimit {
    /// A limit; at least one of `thread_limit` and `run_limit` is required.
    pub fn new(
        thread_limit: Option<u64>,
        run_limit: Option<u64>,
        exit: ModelCallExit,
    ) -> Result<Self, ConfigError> {
        if thread_limit.is_none() && run_limit.is_none() {
            return Err(ConfigError::new(
                "model_call_limit",
                "thread_limit",
                "null",
                "at least one limit must be set (thread_limit or run_limit)",
                "a whole number >= 0 for thread_limit and/or run_limit",
            ));
        }
        Ok(ModelCallLimit {
            thread_limit,
            run_limit,
            exit,
        })
    }

    /// The text of the closing message and of the error, as LangChain words it.
    fn exceeded(&self, thread: u64, run: u64) -> String {
        let mut parts = Vec::new();
        if let Some(limit) = self.thread_limit.filter(|l| thread >= *l) {
            parts.push(format!("thread limit ({thread}/{limit})"));
        }
        if let Some(limit) = self.run_limit.filter(|l| run >= *l) {
            parts.push(format!("run limit ({run}/{limit})"));
        }
        format!("Model call limits exceeded: {}", parts.join(", "))
    }
}

#[keel_core::middleware]
impl Middleware for ModelCallLimit {
    fn name(&self) -> &str {
        "ModelCallLimitMiddleware"
    }

    fn jump_targets(&self) -> &[JumpTarget] {
        &[JumpTarget::End]
    }

    fn state_access(&self) -> StateAccess {
        StateAccess::default()
            .read(THREAD_KEY)
            .read(RUN_KEY)
            .write(THREAD_KEY)
            .write(RUN_KEY)
    }

    async fn before_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let thread = thread_count(state, THREAD_KEY);
        let run = run_count(state, RUN_KEY, &runtime.run_id);
        let over = self.thread_limit.is_some_and(|l| thread >= l)
            || self.run_limit.is_some_and(|l| run >= l);
        if !over {
            return Ok(HookOutcome::proceed());
        }
        let text = self.exceeded(thread, run);
        events::counter(
            &runtime.writer,
            self.name(),
            "model_call_limit_reached",
            1,
            json!({"thread_count": thread, "run_count": run}),
        );
        match self.exit {
            ModelCallExit::Error => Err(MiddlewareError {
                middleware: self.name().to_owned(),
                hook: "before_model",
                message: text,
            }),
            ModelCallExit::End => Ok(HookOutcome {
                update: StateUpdate::messages([Message::ai(text)]),
                jump: Some(JumpTarget::End),
            }),
        }
    }

    async fn after_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let thread = thread_count(state, THREAD_KEY) + 1;
        let run = run_count(state, RUN_KEY, &runtime.run_id) + 1;
        // The call's token usage, when the provider reported it.
        let usage = crate::common::last_ai_index(&state.messages)
            .and_then(|i| state.messages[i].as_ai())
            .and_then(|ai| ai.usage);
        events::counter(
            &runtime.writer,
            self.name(),
            "model_calls",
            1,
            json!({
                "thread_count": thread,
                "run_count": run,
                "input_tokens": usage.map(|u| u.input_tokens),
                "output_tokens": usage.map(|u| u.output_tokens),
            }),
        );
        let mut update = StateUpdate::value(THREAD_KEY, Value::from(thread));
        update
            .values
            .insert(RUN_KEY.into(), run_count_value(&runtime.run_id, run));
        Ok(HookOutcome::update(update))
    }
}

/// The `model_call_limit` entry of a stack file: LangChain's constructor arguments,
/// read and checked here with the middleware they build.
pub(crate) struct Entry;

impl Entry {
    /// Its settings, in LangChain's names.
    const KEYS: [&'static str; 3] = ["thread_limit", "run_limit", "exit_behavior"];
}

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "model_call_limit"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &Self::KEYS)?;
        let limit = |key: &str| -> Result<Option<u64>, StackError> {
            Ok(args
                .get(key)
                .map(|v| v.opt_count(MAX_LIMIT))
                .transpose()?
                .flatten())
        };
        let exit = match args.get("exit_behavior") {
            Some(v) => match v.choice(&["end", "error"])? {
                "error" => ModelCallExit::Error,
                _ => ModelCallExit::End,
            },
            None => ModelCallExit::End,
        };
        let m = ModelCallLimit::new(limit("thread_limit")?, limit("run_limit")?, exit)
            .map_err(|e| args.refused(e))?;
        Ok(Arc::new(Ready(Arc::new(m))))
    }
}

#[cfg(test)]
mod tests;
