//! The internal summary model call, shared by compaction and session memory.
//!
//! One [`SummaryCaller::call`] is: for the summary model, then (if it fails) the run's
//! model, up to `max_attempts` attempts each with a timeout, retrying only transient
//! errors ([`ModelError::is_retryable`]) with exponential backoff (a server's
//! `retry_after` is honoured, capped). A context-overflow error from the summarizer gets
//! the rule compaction applies to the run's own calls: the middle of the transcript is
//! cut until the prompt is below three quarters of what was sent (and below the window
//! the provider stated, when it stated one), and it is sent once more. A second
//! overflow, or a prompt that cannot get smaller, ends that model's attempts with
//! [`SummaryCallError::Failed`] carrying the figures ([`OverflowFigures`]). The call is marked
//! [`ChatRequest::internal`], so its tokens never reach the user's stream.
//!
//! Output is validated before anyone can store it: blank text, text longer than the cap,
//! and the placeholder or error strings peers used to store as summaries ("Error
//! generating summary: ...", "Previous conversation was too long to summarize.") are
//! failures, never summaries.
//!
//! A [`CircuitBreaker`] keyed by thread stops calling after `threshold` consecutive
//! failed calls for a cool-down, so a broken summary model does not add latency (and
//! cost) to every model call of a thread. After the cool-down it is half-open: one
//! caller probes, the others keep being refused until the probe reports.
//!
//! Small local servers (llama.cpp and the like on a laptop) are a first-class case:
//! - the whole call has a deadline ([`SummaryCallOptions::deadline`]) across models and
//!   attempts, so one summary never holds a thread's single-flight gate for minutes;
//! - an attempt that timed out is not retried on the same model: the server is most
//!   likely still generating the abandoned answer, and a retry would queue behind it;
//! - the prompt is cut (middle messages first) to fit the model's context window when
//!   the profile knows it, leaving room for the output cap.
//!
//! ```
//! use std::sync::Arc;
//! use keel_core::message::Message;
//! use keel_summary::summary_call::{SummaryCaller, SummaryCallOptions, SummaryModels};
//! use keel_summary::transcript::{SummaryPrompt, TranscriptOptions, DEFAULT_SUMMARY_PROMPT};
//! use keel_testkit::ScriptedModel;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = Arc::new(ScriptedModel::new([Message::ai("- user wants a haiku")]));
//! let caller = SummaryCaller::new(SummaryCallOptions::default());
//! let prompt = SummaryPrompt::new(DEFAULT_SUMMARY_PROMPT, None, &[Message::human("write a haiku")], &TranscriptOptions::default()).unwrap();
//! let out = caller.call("thread-1", &SummaryModels::single(model.clone()), &prompt, None).await.unwrap();
//! assert_eq!(out.text, "- user wants a haiku");
//! assert_eq!(model.internal_calls(), 1);
//! # });
//! ```

use std::sync::Arc;
use std::time::Duration;

use keel_core::message::Message;
use keel_core::model::{
    ChatModel, ChatRequest, ModelError, ModelErrorKind, ModelSettings, OverflowFigures,
};
use keel_core::telemetry::{self, CallPurpose};
use lru::LruCache;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::transcript::SummaryPrompt;

/// Texts peers have stored as "summaries" that carry no information. A model echoing
/// one of them is treated as a failure.
pub const PLACEHOLDER_PREFIXES: &[&str] = &[
    "error generating summary",
    "previous conversation was too long to summarize",
    "no previous conversation history",
];

/// The default output cap of a summary or fold call, in tokens: a 300-word summary
/// with room to spare. Without a cap a small local model can generate until every
/// timeout has passed.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 1024;

/// Characters per token assumed when sizing a prompt to a context window: low, so the
/// estimate errs on the side of cutting.
const CHARS_PER_TOKEN_FLOOR: usize = 3;

/// Bounds of one summary call.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryCallOptions {
    /// Attempts per model for transient errors (at least 1).
    pub max_attempts: u32,
    /// Time allowed for one attempt.
    pub timeout: Duration,
    /// First backoff between attempts; doubled each retry, capped at 8 seconds.
    pub initial_backoff: Duration,
    /// Longest `retry_after` honoured.
    pub max_retry_after: Duration,
    /// Output longer than this many characters is a failure (`0`: no cap).
    pub max_output_chars: usize,
    /// Output token cap sent to the model (`None`: the model's default).
    pub max_output_tokens: Option<u32>,
    /// Time allowed for the whole call: every model and attempt, backoffs included
    /// (`None`: only the per-attempt timeout bounds it).
    pub deadline: Option<Duration>,
}

impl Default for SummaryCallOptions {
    fn default() -> Self {
        SummaryCallOptions {
            max_attempts: 3,
            timeout: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(250),
            max_retry_after: Duration::from_secs(30),
            max_output_chars: 24_000,
            max_output_tokens: Some(DEFAULT_MAX_OUTPUT_TOKENS),
            deadline: Some(Duration::from_secs(90)),
        }
    }
}

/// The models a summary call may use: the configured summary model first, then the
/// run's model as a fallback.
#[derive(Clone)]
pub struct SummaryModels {
    /// Tried first.
    pub primary: Arc<dyn ChatModel>,
    /// Tried when the primary fails (skipped when it is the same model).
    pub fallback: Option<Arc<dyn ChatModel>>,
}

impl SummaryModels {
    /// One model, no fallback.
    pub fn single(model: Arc<dyn ChatModel>) -> Self {
        SummaryModels {
            primary: model,
            fallback: None,
        }
    }

    /// A summary model with the run's model as fallback.
    pub fn with_fallback(primary: Arc<dyn ChatModel>, fallback: Arc<dyn ChatModel>) -> Self {
        let same = Arc::ptr_eq(&primary, &fallback);
        SummaryModels {
            primary,
            fallback: (!same).then_some(fallback),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<dyn ChatModel>> {
        std::iter::once(&self.primary).chain(self.fallback.iter())
    }
}

/// A validated summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryOutput {
    /// The summary text (trimmed, non-blank).
    pub text: String,
    /// The name of the model that wrote it.
    pub model: String,
    /// Attempts made in total (all models).
    pub attempts: u32,
    /// True when the fallback model wrote it.
    pub used_fallback: bool,
}

/// A JSON schema the answer must follow, sent as the OpenAI `response_format`
/// (`{"type": "json_schema", "json_schema": {"name", "schema", "strict": false}}`) to
/// providers that take it: OpenAI, and the OpenAI-compatible servers that constrain
/// decoding with it (llama.cpp's server, vLLM), so a small local model's answer parses;
/// the Anthropic adapter turns it into a forced tool call with the schema as its input.
/// A server that rejects the parameter is remembered and asked again without it, at no
/// extra attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseSchema {
    /// The schema's name (letters, digits, `_` and `-`).
    pub name: &'static str,
    /// The JSON schema.
    pub schema: serde_json::Value,
    /// When set, an answer that is a JSON object with this string field is reduced to
    /// that field (a summary asked for as `{"summary": "..."}` stays plain text for
    /// everyone downstream); any other answer is kept as it is.
    pub unwrap_field: Option<&'static str>,
}

impl ResponseSchema {
    /// `{"summary": "<text>"}`, unwrapped to the text: the compaction summary.
    pub fn summary_text() -> Self {
        ResponseSchema {
            name: "summary",
            schema: serde_json::json!({
                "type": "object",
                "properties": {"summary": {"type": "string"}},
                "required": ["summary"],
                "additionalProperties": false
            }),
            unwrap_field: Some("summary"),
        }
    }

    /// The `response_format` body field.
    pub fn response_format(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "json_schema",
            "json_schema": {"name": self.name, "schema": self.schema, "strict": false}
        })
    }

    /// `text` reduced to [`unwrap_field`](Self::unwrap_field) when it is such an object.
    pub fn unwrap(&self, text: String) -> String {
        let Some(field) = self.unwrap_field else {
            return text;
        };
        match serde_json::from_str::<serde_json::Value>(text.trim()) {
            Ok(serde_json::Value::Object(mut o)) => match o.remove(field) {
                Some(serde_json::Value::String(inner)) => inner,
                _ => text,
            },
            _ => text,
        }
    }
}

/// True for providers whose adapter takes `response_format` with a JSON schema: OpenAI
/// and the OpenAI-compatible servers as the parameter, Anthropic (keel-anthropic) as a
/// forced tool call whose `input_schema` is the schema.
fn takes_response_format(provider: &str) -> bool {
    matches!(provider, "openai" | "openai-compatible" | "anthropic")
}

/// True when `error` is a server refusing the `response_format` parameter itself.
/// llama-cpp-python's server answers a `json_schema` format it does not take with a 500
/// naming the field in a validation error, so a server error counts too when its
/// message says so.
fn refuses_response_format(error: &ModelError) -> bool {
    let message = error.message.to_ascii_lowercase();
    let names_it = message.contains("response_format") || message.contains("json_schema");
    match error.kind {
        ModelErrorKind::Rejected | ModelErrorKind::InvalidRequest => names_it,
        ModelErrorKind::Server => names_it && message.contains("validation error"),
        _ => false,
    }
}

/// Why no summary came back.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SummaryCallError {
    /// The thread's circuit breaker is open; no call was made.
    #[error("summary calls for this thread are paused for {}s after repeated failures", retry_in.as_secs())]
    CircuitOpen {
        /// Time left in the cool-down.
        retry_in: Duration,
    },
    /// Every attempt failed.
    #[error("summary call failed after {attempts} attempt(s): {reason}")]
    Failed {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        reason: String,
        /// The last model error's kind, if the last failure was a model error.
        kind: Option<ModelErrorKind>,
        /// When the last failure was a context overflow that cutting the transcript did
        /// not fix: the tokens sent and the model's window.
        overflow: Option<OverflowFigures>,
    },
}

/// An extra check of the output (session memory checks it parses as JSON). Return the
/// reason on rejection.
pub type OutputCheck<'a> = &'a (dyn Fn(&str) -> Result<(), String> + Send + Sync);

/// Makes summary calls with retries, fallback, validation and a circuit breaker.
pub struct SummaryCaller {
    options: SummaryCallOptions,
    breaker: Arc<CircuitBreaker>,
    /// Models whose server refused `response_format`: asked without it from then on.
    refused_schema: Mutex<std::collections::HashSet<String>>,
}

impl SummaryCaller {
    /// A caller with its own circuit breaker (3 failures, 5 minutes cool-down).
    pub fn new(options: SummaryCallOptions) -> Self {
        Self::with_breaker(options, Arc::new(CircuitBreaker::default()))
    }

    /// A caller sharing `breaker` (use one per process so it survives rebuilt agents).
    pub fn with_breaker(options: SummaryCallOptions, breaker: Arc<CircuitBreaker>) -> Self {
        SummaryCaller {
            options,
            breaker,
            refused_schema: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// The options.
    pub fn options(&self) -> &SummaryCallOptions {
        &self.options
    }

    /// The circuit breaker.
    pub fn breaker(&self) -> &Arc<CircuitBreaker> {
        &self.breaker
    }

    /// Summarizes `prompt` for the thread `key`. See the [module docs](self).
    pub async fn call(
        &self,
        key: &str,
        models: &SummaryModels,
        prompt: &SummaryPrompt,
        check: Option<OutputCheck<'_>>,
    ) -> Result<SummaryOutput, SummaryCallError> {
        self.call_with_cap(key, models, prompt, check, self.options.max_output_tokens)
            .await
    }

    /// [`call`](Self::call) with this output token cap instead of the options' one
    /// (session memory sizes it from its word budget).
    pub async fn call_with_cap(
        &self,
        key: &str,
        models: &SummaryModels,
        prompt: &SummaryPrompt,
        check: Option<OutputCheck<'_>>,
        max_output_tokens: Option<u32>,
    ) -> Result<SummaryOutput, SummaryCallError> {
        self.call_shaped(key, models, prompt, check, max_output_tokens, None)
            .await
    }

    /// [`call_with_cap`](Self::call_with_cap), asking for an answer that follows
    /// `schema` where the provider takes `response_format` (see [`ResponseSchema`]).
    pub async fn call_shaped(
        &self,
        key: &str,
        models: &SummaryModels,
        prompt: &SummaryPrompt,
        check: Option<OutputCheck<'_>>,
        max_output_tokens: Option<u32>,
        schema: Option<&ResponseSchema>,
    ) -> Result<SummaryOutput, SummaryCallError> {
        if let Err(retry_in) = self.breaker.check(key) {
            return Err(SummaryCallError::CircuitOpen { retry_in });
        }
        let ask = Ask {
            key,
            prompt,
            check,
            max_output_tokens,
            schema,
            deadline: self.options.deadline.map(|d| Instant::now() + d),
        };
        let mut failures = Failures {
            attempts: 0,
            last_reason: String::from("no model was tried"),
            last_kind: None,
            last_overflow: None,
        };
        let mut reasons: Vec<String> = Vec::new();
        for (model_index, model) in models.iter().enumerate() {
            match self
                .try_model(model.as_ref(), model_index, &ask, &mut failures)
                .await
            {
                ModelTry::Summarized(output) => return Ok(output),
                // Every model's last failure is reported, not only the fallback's: a
                // fallback that cannot summarize would otherwise hide why the summary
                // model failed.
                ModelTry::Failed => reasons.push(failures.last_reason.clone()),
                ModelTry::OutOfTime => break,
            }
        }
        let Failures {
            attempts,
            last_reason,
            last_kind,
            last_overflow,
        } = failures;
        if reasons.last() != Some(&last_reason) {
            reasons.push(last_reason);
        }
        self.breaker.record_failure(key);
        Err(SummaryCallError::Failed {
            attempts,
            reason: reasons.join("; then "),
            kind: last_kind,
            overflow: last_overflow,
        })
    }

    /// One model's attempts: retries with backoff while the error is retryable, one
    /// more try with the transcript's middle cut after a context overflow, none after a
    /// timeout. A success is recorded with the breaker; every failure in `failures`.
    async fn try_model(
        &self,
        model: &dyn ChatModel,
        model_index: usize,
        ask: &Ask<'_>,
        failures: &mut Failures,
    ) -> ModelTry {
        let mut prompt = fit_to_window(
            ask.prompt,
            model.profile().max_input_tokens,
            ask.max_output_tokens,
        );
        let mut overflow_cut_used = false;
        let mut model_attempts = 0u32;
        let mut backoff = self.options.initial_backoff;
        loop {
            let Some(timeout) = self.attempt_timeout(ask.deadline, failures) else {
                return ModelTry::OutOfTime;
            };
            model_attempts += 1;
            failures.attempts += 1;
            let error = match self
                .attempt(
                    model,
                    &prompt,
                    ask.check,
                    timeout,
                    ask.max_output_tokens,
                    ask.schema,
                )
                .await
            {
                Ok(text) => {
                    self.breaker.record_success(ask.key);
                    return ModelTry::Summarized(SummaryOutput {
                        text,
                        model: model.profile().name.clone(),
                        attempts: failures.attempts,
                        used_fallback: model_index > 0,
                    });
                }
                Err(e) => e,
            };
            tracing::warn!(model = %model.profile().name, attempt = model_attempts, error = %error.message, "summary attempt failed");
            failures.last_reason = format!("{}: {}", model.profile().name, error.message);
            failures.last_kind = Some(error.kind);
            failures.last_overflow = None;
            if error.kind == ModelErrorKind::ContextOverflow {
                let shorter = after_overflow(
                    model,
                    &prompt,
                    &error,
                    overflow_cut_used,
                    ask.max_output_tokens,
                    failures,
                );
                if let Some(shorter) = shorter {
                    prompt = shorter;
                    overflow_cut_used = true;
                    continue;
                }
                return ModelTry::Failed;
            }
            // A timed-out local server is most likely still busy with the abandoned
            // answer: a retry would only queue behind it. Try the next model.
            if error.kind == ModelErrorKind::Timeout {
                return ModelTry::Failed;
            }
            if let Some(wait) = self.retry_wait(&error, model_attempts, backoff, ask.deadline) {
                tokio::time::sleep(wait).await;
                backoff = (backoff * 2).min(Duration::from_secs(8));
                continue;
            }
            return ModelTry::Failed;
        }
    }

    /// How long to wait before retrying after `error` (the `model_attempts`-th attempt
    /// of this model): the server's `retry_after` (capped) or `backoff`, never past the
    /// deadline. `None` when the error is not retried.
    fn retry_wait(
        &self,
        error: &ModelError,
        model_attempts: u32,
        backoff: Duration,
        deadline: Option<Instant>,
    ) -> Option<Duration> {
        if !(error.is_retryable() && model_attempts < self.options.max_attempts.max(1)) {
            return None;
        }
        let mut wait = error
            .retry_after
            .map(|d| d.min(self.options.max_retry_after))
            .unwrap_or(backoff);
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(Instant::now()));
        }
        Some(wait)
    }

    /// The next attempt's timeout: the per-attempt one, capped by what is left of the
    /// call's deadline. `None` when the deadline has passed (recorded in `failures`).
    fn attempt_timeout(
        &self,
        deadline: Option<Instant>,
        failures: &mut Failures,
    ) -> Option<Duration> {
        match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    failures.last_reason = format!(
                        "the summary deadline of {}s passed ({})",
                        self.options.deadline.unwrap_or_default().as_secs_f32(),
                        failures.last_reason
                    );
                    failures.last_kind = Some(ModelErrorKind::Timeout);
                    return None;
                }
                Some(left.min(self.options.timeout))
            }
            None => Some(self.options.timeout),
        }
    }

    async fn attempt(
        &self,
        model: &dyn ChatModel,
        prompt: &SummaryPrompt,
        check: Option<OutputCheck<'_>>,
        timeout: Duration,
        max_output_tokens: Option<u32>,
        schema: Option<&ResponseSchema>,
    ) -> Result<String, ModelError> {
        let messages = [Message::human(prompt.render())];
        let mut settings = ModelSettings {
            max_tokens: max_output_tokens,
            ..ModelSettings::default()
        };
        let profile = model.profile();
        let sent_schema = schema.filter(|_| {
            takes_response_format(&profile.provider)
                && !self.refused_schema.lock().contains(&profile.name)
        });
        if let Some(schema) = sent_schema {
            settings
                .extra
                .insert("response_format".into(), schema.response_format());
        }
        let started = Instant::now();
        let messages = &messages;
        let call = |settings: ModelSettings| async move {
            let mut request = ChatRequest::new(messages, &settings);
            request.internal = true;
            let left = timeout.saturating_sub(started.elapsed());
            let call = telemetry::invoke(model, request, CallPurpose::Summary);
            match tokio::time::timeout(left, call).await {
                Ok(result) => result,
                Err(_) => Err(ModelError::new(
                    ModelErrorKind::Timeout,
                    format!("no summary within {}s", timeout.as_secs_f32()),
                )),
            }
        };
        let answer = match call(settings.clone()).await {
            Err(e) if sent_schema.is_some() && refuses_response_format(&e) => {
                // The server does not take the parameter: remember it, ask plainly.
                tracing::info!(model = %profile.name, error = %e.message, "the summary model refused response_format; asking without it");
                self.refused_schema.lock().insert(profile.name.clone());
                settings.extra.remove("response_format");
                call(settings).await?
            }
            other => other?,
        };
        let mut text = answer.text().into_owned();
        if let Some(schema) = schema {
            text = schema.unwrap(text);
        }
        let text = validate_output(&text, self.options.max_output_chars)
            .map_err(|reason| ModelError::new(ModelErrorKind::MalformedResponse, reason))?;
        if let Some(check) = check {
            check(&text)
                .map_err(|reason| ModelError::new(ModelErrorKind::MalformedResponse, reason))?;
        }
        Ok(text)
    }
}

/// What one summary call asks, shared by all its attempts.
struct Ask<'a> {
    /// The thread the circuit breaker counts for.
    key: &'a str,
    prompt: &'a SummaryPrompt,
    check: Option<OutputCheck<'a>>,
    max_output_tokens: Option<u32>,
    schema: Option<&'a ResponseSchema>,
    /// When the whole call must be over.
    deadline: Option<Instant>,
}

/// The attempts of one summary call so far, and its last failure.
struct Failures {
    attempts: u32,
    last_reason: String,
    last_kind: Option<ModelErrorKind>,
    last_overflow: Option<OverflowFigures>,
}

/// How one model's attempts ended.
enum ModelTry {
    /// It summarized.
    Summarized(SummaryOutput),
    /// It failed; the next model is tried.
    Failed,
    /// The call's deadline passed; no model is tried any more.
    OutOfTime,
}

/// After a context overflow: the prompt with its transcript's middle cut, to send once
/// more, or `None` (the reason and figures recorded in `failures`) when it was cut
/// already or cannot be cut further.
fn after_overflow(
    model: &dyn ChatModel,
    prompt: &SummaryPrompt,
    error: &ModelError,
    overflow_cut_used: bool,
    max_output_tokens: Option<u32>,
    failures: &mut Failures,
) -> Option<SummaryPrompt> {
    let sent_chars = prompt.render().len();
    let figures = error.overflow.unwrap_or_default().or(OverflowFigures {
        sent_tokens: Some((sent_chars / CHARS_PER_TOKEN_FLOOR) as u64),
        window_tokens: model.profile().max_input_tokens,
    });
    let shorter = (!overflow_cut_used)
        .then(|| cut_after_overflow(prompt, figures, max_output_tokens))
        .flatten();
    if let Some(shorter) = shorter {
        tracing::warn!(
            model = %model.profile().name,
            sent_chars,
            cut_chars = shorter.render().len(),
            "summary prompt overflowed the model's context; cutting its middle and sending it once more"
        );
        return Some(shorter);
    }
    failures.last_reason = format!(
        "{}: the summary prompt overflows the context window ({figures}){}: {}",
        model.profile().name,
        if overflow_cut_used {
            " after cutting the middle of its transcript"
        } else {
            " and cannot be cut further"
        },
        error.message
    );
    failures.last_overflow = Some(figures);
    None
}

/// `prompt`, with its middle messages cut until it fits `window` tokens minus the output
/// cap (estimated at three characters a token, on the safe side). Unchanged when the
/// window is unknown or it already fits.
pub fn fit_to_window(
    prompt: &SummaryPrompt,
    window: Option<u64>,
    max_output_tokens: Option<u32>,
) -> SummaryPrompt {
    let Some(window) = window else {
        return prompt.clone();
    };
    let budget = window.saturating_sub(u64::from(max_output_tokens.unwrap_or(0)));
    let budget_chars = usize::try_from(budget)
        .unwrap_or(usize::MAX)
        .saturating_mul(CHARS_PER_TOKEN_FLOOR);
    let mut out = prompt.clone();
    while out.render().len() > budget_chars {
        match out.without_middle() {
            Some(shorter) => out = shorter,
            None => break,
        }
    }
    if out.message_count() < prompt.message_count() {
        tracing::warn!(
            window,
            kept = out.message_count(),
            of = prompt.message_count(),
            "summary prompt cut to fit the summary model's context window"
        );
    }
    out
}

/// `prompt` after the provider said it overflowed: its middle cut until the rendered
/// prompt is under three quarters of what was sent and, when the provider stated the
/// window, under that window less the output cap (three characters a token, on the
/// safe side). `None` when no cut makes it smaller.
fn cut_after_overflow(
    prompt: &SummaryPrompt,
    figures: OverflowFigures,
    max_output_tokens: Option<u32>,
) -> Option<SummaryPrompt> {
    let sent = prompt.render().len();
    let mut budget = sent.saturating_mul(3) / 4;
    if let Some(window) = figures.window_tokens {
        let tokens = window.saturating_sub(u64::from(max_output_tokens.unwrap_or(0)));
        let chars = usize::try_from(tokens)
            .unwrap_or(usize::MAX)
            .saturating_mul(CHARS_PER_TOKEN_FLOOR);
        budget = budget.min(chars);
    }
    let mut out = prompt.without_middle()?;
    while out.render().len() > budget {
        match out.without_middle() {
            Some(shorter) => out = shorter,
            None => break,
        }
    }
    (out.render().len() < sent).then_some(out)
}

/// Checks a model's summary: trimmed, non-blank, not a placeholder or error text, within
/// `max_chars` (`0`: no cap). A leading "Here is a summary of the conversation to date:"
/// echoed by the model is removed so the prefix is never doubled.
pub fn validate_output(text: &str, max_chars: usize) -> Result<String, String> {
    let mut t = text.trim();
    if let Some(rest) = t.strip_prefix(crate::SUMMARY_PREFIX) {
        t = rest.trim();
    }
    if t.is_empty() {
        return Err("the summary model returned blank text".into());
    }
    let lower = t.to_lowercase();
    if PLACEHOLDER_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        return Err(format!(
            "the summary model returned placeholder or error text: {:?}",
            t.chars().take(80).collect::<String>()
        ));
    }
    let n = t.chars().count();
    if max_chars > 0 && n > max_chars {
        return Err(format!(
            "the summary is {n} characters long; the cap is {max_chars}"
        ));
    }
    Ok(t.to_owned())
}

#[derive(Clone, Copy, Debug)]
struct BreakerEntry {
    failures: u32,
    open_until: Option<Instant>,
    /// Half-open: a probe call is in flight until then (a probe that never reports
    /// frees the slot after one more cool-down).
    probe_until: Option<Instant>,
}

/// Stops summary calls for a key (a thread) after `threshold` consecutive failed calls,
/// for `cooldown`. After the cool-down it is half-open: [`check`](Self::check) lets
/// exactly one caller through as a probe and refuses the others; the probe's success
/// closes it, its failure opens it again. Bounded (least recently used keys are
/// forgotten).
pub struct CircuitBreaker {
    threshold: u32,
    cooldown: Duration,
    entries: Mutex<LruCache<String, BreakerEntry>>,
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        Self::new(3, Duration::from_secs(300), 10_000)
    }
}

impl CircuitBreaker {
    /// A breaker opening after `threshold` failures (at least 1) for `cooldown`,
    /// remembering at most `capacity` keys.
    pub fn new(threshold: u32, cooldown: Duration, capacity: usize) -> Self {
        let cap =
            std::num::NonZeroUsize::new(capacity.max(1)).unwrap_or(std::num::NonZeroUsize::MIN);
        CircuitBreaker {
            threshold: threshold.max(1),
            cooldown,
            entries: Mutex::new(LruCache::new(cap)),
        }
    }

    /// `Ok` when a call may be made now, else the time to wait. After the cool-down the
    /// first caller gets `Ok` and becomes the probe; the others wait for its outcome.
    /// Call it right before calling; use [`peek`](Self::peek) to only look.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let mut entries = self.entries.lock();
        let Some(entry) = entries.peek_mut(key) else {
            return Ok(());
        };
        let now = Instant::now();
        match entry.open_until {
            None => Ok(()),
            Some(until) if until > now => Err(until - now),
            Some(_) => match entry.probe_until {
                Some(probe) if probe > now => Err(probe - now),
                _ => {
                    entry.probe_until = Some(now + self.cooldown);
                    Ok(())
                }
            },
        }
    }

    /// Whether [`check`](Self::check) would let a call through, without taking the
    /// probe slot.
    pub fn peek(&self, key: &str) -> Result<(), Duration> {
        let entries = self.entries.lock();
        let Some(entry) = entries.peek(key) else {
            return Ok(());
        };
        let now = Instant::now();
        match (entry.open_until, entry.probe_until) {
            (Some(until), _) if until > now => Err(until - now),
            (Some(_), Some(probe)) if probe > now => Err(probe - now),
            _ => Ok(()),
        }
    }

    /// Records a successful call: the key's failure count resets.
    pub fn record_success(&self, key: &str) {
        self.entries.lock().pop(key);
    }

    /// Records a failed call; opens the breaker at the threshold.
    pub fn record_failure(&self, key: &str) {
        let mut entries = self.entries.lock();
        let entry = entries.get_or_insert_mut(key.to_owned(), || BreakerEntry {
            failures: 0,
            open_until: None,
            probe_until: None,
        });
        entry.failures += 1;
        entry.probe_until = None;
        if entry.failures >= self.threshold {
            entry.open_until = Some(Instant::now() + self.cooldown);
        }
    }

    /// Consecutive failures recorded for `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.entries.lock().peek(key).map_or(0, |e| e.failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama-cpp-python's 500 for a `json_schema` format (recorded from version 0.3.36),
    /// and what must not count as a refusal.
    #[test]
    fn a_refused_response_format_is_recognised_in_the_shapes_servers_send() {
        let llama_cpp_python = ModelError::new(
            ModelErrorKind::Server,
            "HTTP 500: 1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}",
        );
        assert!(refuses_response_format(&llama_cpp_python));
        let openai = ModelError::new(
            ModelErrorKind::InvalidRequest,
            "HTTP 400: Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
        );
        assert!(refuses_response_format(&openai));
        let crash = ModelError::new(ModelErrorKind::Server, "HTTP 500: out of memory");
        assert!(!refuses_response_format(&crash));
        let busy = ModelError::new(ModelErrorKind::RateLimited, "response_format too busy");
        assert!(!refuses_response_format(&busy));
    }

    #[test]
    fn placeholders_and_blank_are_rejected() {
        assert!(validate_output("  \n ", 0).is_err());
        assert!(validate_output("Error generating summary: 500", 0).is_err());
        assert!(validate_output("Previous conversation was too long to summarize.", 0).is_err());
        assert!(validate_output(&"x".repeat(11), 10).is_err());
        assert_eq!(
            validate_output("Here is a summary of the conversation to date:\n\n- a", 0).unwrap(),
            "- a"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn breaker_opens_and_cools_down() {
        let b = CircuitBreaker::new(3, Duration::from_secs(60), 10);
        for _ in 0..2 {
            b.record_failure("t");
        }
        assert!(b.check("t").is_ok());
        b.record_failure("t");
        assert!(b.check("t").is_err());
        assert!(b.check("other").is_ok());
        tokio::time::advance(Duration::from_secs(61)).await;
        // Half-open: one probe, everyone else still waits.
        assert!(b.peek("t").is_ok());
        assert!(b.check("t").is_ok());
        assert!(
            b.check("t").is_err(),
            "a second caller is not a second probe"
        );
        assert!(b.peek("t").is_err());
        // The probe fails: open again for a whole cool-down.
        b.record_failure("t");
        assert!(b.check("t").is_err());
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(b.check("t").is_ok());
        b.record_success("t");
        assert_eq!(b.failures("t"), 0);
        assert!(b.check("t").is_ok() && b.check("t").is_ok(), "closed");
    }

    #[test]
    fn prompts_are_cut_to_the_context_window() {
        let msgs: Vec<Message> = (0..40)
            .map(|i| Message::human(format!("message {i} {}", "x".repeat(200))))
            .collect();
        let p = SummaryPrompt::new(
            "{messages}",
            Some("- old"),
            &msgs,
            &crate::transcript::TranscriptOptions::default(),
        )
        .unwrap();
        assert_eq!(fit_to_window(&p, None, Some(100)), p);
        let cut = fit_to_window(&p, Some(2000), Some(1000));
        assert!(cut.render().len() <= 3000, "{}", cut.render().len());
        assert!(cut.render().contains("- old"), "the previous summary stays");
        assert!(cut.message_count() < 40);
    }
    fn long_prompt() -> SummaryPrompt {
        let msgs: Vec<Message> = (0..40)
            .map(|i| Message::human(format!("message {i} {}", "x".repeat(200))))
            .collect();
        SummaryPrompt::new(
            "{messages}",
            None,
            &msgs,
            &crate::transcript::TranscriptOptions::default(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn an_overflowing_summary_prompt_is_cut_below_three_quarters_and_sent_once_more() {
        let overflow = || {
            ModelError::new(ModelErrorKind::ContextOverflow, "prompt is too long").with_overflow(
                OverflowFigures {
                    sent_tokens: Some(9_000),
                    window_tokens: Some(8_192),
                },
            )
        };
        let model = Arc::new(keel_testkit::ScriptedModel::with_results([
            Err(overflow()),
            Ok(Message::ai("- kept")),
        ]));
        let caller = SummaryCaller::new(SummaryCallOptions::default());
        let prompt = long_prompt();
        let out = caller
            .call("t", &SummaryModels::single(model.clone()), &prompt, None)
            .await
            .unwrap();
        assert_eq!(out.text, "- kept");
        let sent: Vec<usize> = model
            .requests()
            .iter()
            .map(|r| r.messages[0].text().len())
            .collect();
        assert_eq!(sent.len(), 2);
        assert!(sent[1] * 4 <= sent[0] * 3, "{sent:?}");

        // Overflowing twice: one cut, then a typed error with the provider's figures.
        let model = Arc::new(keel_testkit::ScriptedModel::with_results([
            Err(overflow()),
            Err(overflow()),
            Ok(Message::ai("- never asked")),
        ]));
        let err = caller
            .call("t2", &SummaryModels::single(model.clone()), &prompt, None)
            .await
            .unwrap_err();
        assert_eq!(model.calls(), 2, "never loops");
        let SummaryCallError::Failed {
            kind, overflow: f, ..
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!(*kind, Some(ModelErrorKind::ContextOverflow));
        assert_eq!(
            *f,
            Some(OverflowFigures {
                sent_tokens: Some(9_000),
                window_tokens: Some(8_192)
            })
        );
        assert!(
            err.to_string()
                .contains("9000 tokens sent, the model's window is 8192 tokens"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_prompt_that_cannot_be_cut_reports_keel_s_own_figures() {
        let model = Arc::new(
            keel_testkit::ScriptedModel::with_results([Err(ModelError::new(
                ModelErrorKind::ContextOverflow,
                "too long",
            ))])
            .with_profile(
                keel_core::model::ModelProfile::new("tiny", "local").with_max_input_tokens(64),
            ),
        );
        let prompt = SummaryPrompt::new(
            "{messages}",
            None,
            &[Message::human("x".repeat(600))],
            &crate::transcript::TranscriptOptions::default(),
        )
        .unwrap();
        let caller = SummaryCaller::new(SummaryCallOptions::default());
        let err = caller
            .call("t", &SummaryModels::single(model.clone()), &prompt, None)
            .await
            .unwrap_err();
        assert_eq!(model.calls(), 1);
        let SummaryCallError::Failed {
            overflow: Some(f), ..
        } = err
        else {
            panic!("{err}");
        };
        assert_eq!(f.window_tokens, Some(64));
        assert!(f.sent_tokens.is_some_and(|n| n >= 200), "{f:?}");
    }

    /// A model that never answers in time, counting its calls.
    struct Hanging(ModelProfileHolder, std::sync::atomic::AtomicUsize);
    struct ModelProfileHolder(keel_core::model::ModelProfile);

    #[async_trait::async_trait]
    impl ChatModel for Hanging {
        fn profile(&self) -> &keel_core::model::ModelProfile {
            &self.0.0
        }
        async fn invoke(&self, _request: ChatRequest<'_>) -> Result<Message, ModelError> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Message::ai("- too late"))
        }
    }

    fn hanging(name: &str) -> Arc<Hanging> {
        Arc::new(Hanging(
            ModelProfileHolder(keel_core::model::ModelProfile::new(name, "local")),
            std::sync::atomic::AtomicUsize::new(0),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_out_attempt_is_not_retried_into_the_busy_server_and_the_deadline_holds() {
        let (a, b) = (hanging("a"), hanging("b"));
        let caller = SummaryCaller::new(SummaryCallOptions {
            max_attempts: 3,
            timeout: Duration::from_secs(60),
            deadline: Some(Duration::from_secs(90)),
            ..SummaryCallOptions::default()
        });
        let prompt = SummaryPrompt::new(
            "{messages}",
            None,
            &[Message::human("hi")],
            &crate::transcript::TranscriptOptions::default(),
        )
        .unwrap();
        let started = Instant::now();
        let err = caller
            .call(
                "t",
                &SummaryModels::with_fallback(a.clone(), b.clone()),
                &prompt,
                None,
            )
            .await
            .unwrap_err();
        let waited = started.elapsed();
        // One attempt per model (no retry after a timeout); the second gets what is left
        // of the 90 s deadline, not another 60 s.
        assert_eq!(a.1.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(b.1.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(waited <= Duration::from_secs(91), "{waited:?}");
        assert!(
            matches!(err, SummaryCallError::Failed { attempts: 2, .. }),
            "{err:?}"
        );
        // Both models' failures are in the reason, not only the fallback's.
        let text = err.to_string();
        assert!(
            text.contains("a: no summary within") && text.contains("; then b:"),
            "{text}"
        );
    }
}
