//! `Pii`: detects personal data (email, credit card numbers with a Luhn check, IPv4
//! addresses, MAC addresses, URLs, or a custom regex) and blocks, redacts, masks or
//! hashes it (LangChain's `PIIMiddleware`).
//!
//! - `apply_to_input` (default on): the last user message, in `before_model`.
//! - `apply_to_tool_results`: the tool results after the last AI message, in
//!   `before_model`.
//! - `apply_to_output`: the last AI message's text, in `after_model`; and, so that no
//!   stream carries a value the final message redacts, the model's streamed text is
//!   redacted as it streams, holding back the last 128 characters (LangChain's
//!   lookback) until they can no longer be part of a match. With `block`, output
//!   containing a value fails the model call instead (a `Rejected` error, which
//!   fallbacks and retries pass through).
//!
//! The changed messages replace the originals in state (same ids), as in LangChain.

mod detect;
mod strategy;
mod stream;

use std::sync::Arc;

use keel_core::message::{Content, ContentPart, Message, MessageBody};
use keel_core::middleware::{
    HookOutcome, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next, Runtime,
};
use keel_core::model::ModelError;
use keel_core::state::{AgentState, StateUpdate};
use regex::Regex;
use serde_json::{Value, json};

pub use detect::{BUILTIN_TYPES, Detector, PiiMatch, passes_luhn};
pub use strategy::Strategy;

use crate::common::last_ai_index;
use crate::error::ConfigError;
use crate::events;
use crate::stack::value::{Ready, Settings};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// One type of personal data and what to do with it.
#[derive(Clone, Debug)]
pub struct Rule {
    /// The type's name (`email`, or a custom name such as `api_key`).
    pub pii_type: String,
    /// What finds it.
    pub detector: Detector,
    /// What to do with it.
    pub strategy: Strategy,
}

impl Rule {
    /// Every match in `text`.
    pub fn find(&self, text: &str) -> Vec<PiiMatch> {
        self.detector.find(&self.pii_type, text)
    }

    /// The message LangChain's `PIIDetectionError` carries.
    pub fn blocked_message(&self, count: usize) -> String {
        format!(
            "Detected {count} instance(s) of {} in text content",
            self.pii_type
        )
    }

    /// The text with its matches handled, or `Err(count)` under `block`; `Ok(None)` when
    /// nothing matched.
    pub fn process_text(&self, text: &str) -> Result<Option<(String, usize)>, usize> {
        let matches = self.find(text);
        if matches.is_empty() {
            return Ok(None);
        }
        if self.strategy == Strategy::Block {
            return Err(matches.len());
        }
        Ok(Some((
            strategy::apply(text, &matches, self.strategy),
            matches.len(),
        )))
    }

    /// Content with its text handled (text parts of list content too), as
    /// [`process_text`](Self::process_text).
    pub fn process_content(&self, content: &Content) -> Result<Option<(Content, usize)>, usize> {
        match content {
            Content::Text(t) => Ok(self.process_text(t)?.map(|(t, n)| (Content::Text(t), n))),
            Content::Parts(parts) => {
                let mut out = parts.clone();
                let mut total = 0;
                for part in &mut out {
                    match part {
                        ContentPart::Text(t) => {
                            if let Some((new, n)) = self.process_text(&t.text)? {
                                t.text = new;
                                total += n;
                            }
                        }
                        ContentPart::Other(Value::String(s)) => {
                            if let Some((new, n)) = self.process_text(s)? {
                                *s = new;
                                total += n;
                            }
                        }
                        ContentPart::Other(Value::Object(o)) => {
                            if let Some(Value::String(s)) = o.get_mut("text")
                                && let Some((new, n)) = self.process_text(s)?
                            {
                                *s = new;
                                total += n;
                            }
                        }
                        _ => {}
                    }
                }
                Ok((total > 0).then_some((Content::Parts(out), total)))
            }
        }
    }
}

/// Handles one PII type. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Pii {
    rule: Arc<Rule>,
    apply_to_input: bool,
    apply_to_output: bool,
    apply_to_tool_results: bool,
    name: String,
}

impl Pii {
    /// A built-in type (`email`, `credit_card`, `ip`, `mac_address`, `url`), applied to
    /// input only, as LangChain's defaults.
    pub fn builtin(pii_type: &str, strategy: Strategy) -> Result<Self, ConfigError> {
        let detector = Detector::builtin(pii_type).ok_or_else(|| {
            ConfigError::new(
                "pii",
                "pii_type",
                format!("{pii_type:?}"),
                "is not a built-in type and no detector regex is given",
                format!(
                    "one of {}, or any name with a `detector` regex",
                    BUILTIN_TYPES.join(", ")
                ),
            )
        })?;
        Ok(Self::with_detector(pii_type, detector, strategy))
    }

    /// A custom type found by a regex (Rust `regex` syntax, which reads Python's `re`
    /// patterns without look-around or backreferences).
    pub fn regex(pii_type: &str, pattern: &str, strategy: Strategy) -> Result<Self, ConfigError> {
        let re = Regex::new(pattern).map_err(|e| {
            ConfigError::new(
                "pii",
                "detector",
                format!("{pattern:?}"),
                format!(
                    "is not a valid regex: {}",
                    e.to_string().lines().last().unwrap_or("")
                ),
                "a regular expression (regex crate syntax)",
            )
        })?;
        Ok(Self::with_detector(pii_type, Detector::Regex(re), strategy))
    }

    fn with_detector(pii_type: &str, detector: Detector, strategy: Strategy) -> Self {
        Pii {
            rule: Arc::new(Rule {
                pii_type: pii_type.to_owned(),
                detector,
                strategy,
            }),
            apply_to_input: true,
            apply_to_output: false,
            apply_to_tool_results: false,
            name: format!("PIIMiddleware[{pii_type}]"),
        }
    }

    /// Whether the last user message is checked (default true).
    pub fn apply_to_input(mut self, on: bool) -> Self {
        self.apply_to_input = on;
        self
    }

    /// Whether the model's answer is checked, streamed text included (default false).
    pub fn apply_to_output(mut self, on: bool) -> Self {
        self.apply_to_output = on;
        self
    }

    /// Whether tool results are checked (default false).
    pub fn apply_to_tool_results(mut self, on: bool) -> Self {
        self.apply_to_tool_results = on;
        self
    }

    /// The rule.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    fn blocked(&self, hook: &'static str, count: usize) -> MiddlewareError {
        MiddlewareError {
            middleware: self.name.clone(),
            hook,
            message: self.rule.blocked_message(count),
        }
    }

    /// The message with its content handled, or `None` when unchanged.
    fn process(
        &self,
        message: &Message,
        hook: &'static str,
    ) -> Result<Option<(Message, usize)>, MiddlewareError> {
        let Some((content, n)) = self
            .rule
            .process_content(message.content())
            .map_err(|count| self.blocked(hook, count))?
        else {
            return Ok(None);
        };
        let mut out = message.clone();
        match out.body_mut() {
            MessageBody::Human(m) => m.content = content,
            MessageBody::Ai(m) => m.content = content,
            MessageBody::Tool(m) => m.content = content,
            MessageBody::System(m) => m.content = content,
        }
        Ok(Some((out, n)))
    }

    fn report(&self, runtime: &Runtime, count: usize, applied_to: &str) {
        events::counter(
            &runtime.writer,
            &self.name,
            "redactions",
            count as u64,
            json!({"pii_type": self.rule.pii_type, "strategy": self.rule.strategy.as_str(), "applied_to": applied_to}),
        );
    }
}

#[keel_core::middleware]
impl Middleware for Pii {
    fn name(&self) -> &str {
        &self.name
    }

    async fn before_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        if !self.apply_to_input && !self.apply_to_tool_results {
            return Ok(HookOutcome::proceed());
        }
        let messages = &state.messages;
        let mut changed = Vec::new();
        if self.apply_to_input
            && let Some(i) = messages.iter().rposition(Message::is_human)
            && let Some((m, n)) = self.process(&messages[i], "before_model")?
        {
            self.report(runtime, n, "input");
            changed.push(m);
        }
        if self.apply_to_tool_results
            && let Some(ai) = last_ai_index(messages)
        {
            for message in messages[ai + 1..].iter().filter(|m| m.is_tool()) {
                if let Some((m, n)) = self.process(message, "before_model")? {
                    self.report(runtime, n, "tool_results");
                    changed.push(m);
                }
            }
        }
        if changed.is_empty() {
            return Ok(HookOutcome::proceed());
        }
        Ok(HookOutcome::update(StateUpdate::messages(changed)))
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        if !self.apply_to_output {
            return next.run(request).await;
        }
        let this = self.clone();
        let runtime = request.runtime.clone();
        let report: stream::Report = Arc::new(move |n| this.report(&runtime, n, "output"));
        let model = Arc::new(stream::RedactingModel::new(
            request.model.clone(),
            self.rule.clone(),
            report,
        ));
        next.run(request.with_model(model)).await
    }

    async fn after_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        if !self.apply_to_output {
            return Ok(HookOutcome::proceed());
        }
        let Some(i) = last_ai_index(&state.messages) else {
            return Ok(HookOutcome::proceed());
        };
        match self.process(&state.messages[i], "after_model")? {
            Some((m, n)) => {
                self.report(runtime, n, "output");
                Ok(HookOutcome::update(StateUpdate::messages([m])))
            }
            None => Ok(HookOutcome::proceed()),
        }
    }
}

/// The `pii` entry of a stack file: LangChain's constructor arguments, read
/// and checked here with the middleware they build.
pub(crate) struct Entry;

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "pii"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(
            source,
            &[
                "pii_type",
                "strategy",
                "detector",
                "apply_to_input",
                "apply_to_output",
                "apply_to_tool_results",
            ],
        )?;
        let Some(pii_type) = args.get("pii_type") else {
            return Err(args.refused(ConfigError::new(
                "pii",
                "pii_type",
                "(missing)",
                "is required",
                "email, credit_card, ip, mac_address, url, or a name with a `detector` regex",
            )));
        };
        let pii_type = pii_type.string()?;
        let strategy = match args.get("strategy") {
            None => Strategy::Redact,
            Some(v) => match v.choice(&["block", "redact", "mask", "hash"])? {
                "block" => Strategy::Block,
                "mask" => Strategy::Mask,
                "hash" => Strategy::Hash,
                _ => Strategy::Redact,
            },
        };
        let mut m = match args.get("detector") {
            Some(v) if !v.is_null() => Pii::regex(&pii_type, &v.string()?, strategy),
            _ => Pii::builtin(&pii_type, strategy),
        }
        .map_err(|e| args.refused(e))?;
        for (key, set) in [
            (
                "apply_to_input",
                Pii::apply_to_input as fn(Pii, bool) -> Pii,
            ),
            ("apply_to_output", Pii::apply_to_output),
            ("apply_to_tool_results", Pii::apply_to_tool_results),
        ] {
            if let Some(v) = args.get(key) {
                m = set(m, v.bool()?);
            }
        }
        Ok(Arc::new(Ready(Arc::new(m))))
    }
}

#[cfg(test)]
mod tests;
