//! `ToolError`: turns selected tool failures into error tool results the model reads
//! (LangChain's `ToolErrorMiddleware`).
//!
//! Keel's agent already answers a failed call with an error result worded by the
//! agent; this middleware chooses the words (a template with `{tool}` and `{error}`, or
//! a function) for the listed tools, and stops the failure from reaching outer layers
//! (an outer [`ToolRetry`](crate::ToolRetry) sees a result, not a failure). A function
//! returning `None` lets the failure through, as LangChain's `on_error` returning `None`
//! re-raises.

use std::sync::Arc;

use keel_core::message::Message;
use keel_core::middleware::{Middleware, ToolCallRequest, ToolNext};
use keel_core::tool::ToolError;
use serde_json::json;

use crate::common::selects;
use crate::events;
use crate::stack::value::{Ready, Settings};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// Makes the result text from a failure, or `None` to let it through.
pub type OnToolError = Arc<dyn Fn(&ToolError, &ToolCallRequest) -> Option<String> + Send + Sync>;

/// The default template.
pub const DEFAULT_TEMPLATE: &str = "Error: {error}";

/// Handles tool failures. See the [module docs](self).
#[derive(Clone)]
pub struct ToolErrorHandler {
    on_error: OnToolError,
    tools: Option<Vec<String>>,
}

impl std::fmt::Debug for ToolErrorHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolErrorHandler")
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

impl ToolErrorHandler {
    /// A handler for `tools` (every tool when `None`) using `on_error`.
    pub fn new(on_error: OnToolError, tools: Option<Vec<String>>) -> Self {
        ToolErrorHandler { on_error, tools }
    }

    /// A handler whose text is `template` with `{tool}` and `{error}` filled in.
    pub fn template(template: impl Into<String>, tools: Option<Vec<String>>) -> Self {
        let template = template.into();
        Self::new(
            Arc::new(move |error, request| {
                let (_, message) = crate::tool_retry::describe(error);
                Some(
                    template
                        .replace("{tool}", &request.call.name)
                        .replace("{error}", &message),
                )
            }),
            tools,
        )
    }
}

#[keel_core::middleware]
impl Middleware for ToolErrorHandler {
    fn name(&self) -> &str {
        "ToolErrorMiddleware"
    }

    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        if !selects(self.tools.as_deref(), &request.call.name) {
            return next.run(request).await;
        }
        let error = match next.run(request.clone()).await {
            Ok(message) => return Ok(message),
            Err(error) => error,
        };
        let Some(text) = (self.on_error)(&error, &request) else {
            return Err(error);
        };
        events::counter(
            &request.runtime.writer,
            self.name(),
            "tool_errors",
            1,
            json!({"tool": request.call.name}),
        );
        Ok(Message::tool_error(request.call.id.clone(), text).with_name(request.call.name.clone()))
    }
}

/// The `tool_error` entry of a stack file: LangChain's constructor arguments, read
/// and checked here with the middleware they build.
pub(crate) struct Entry;

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "tool_error"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &["on_error", "tools"])?;
        let template = match args.get("on_error") {
            Some(v) => v.string()?,
            None => DEFAULT_TEMPLATE.into(),
        };
        let tools = args.get("tools").map(|v| v.strings()).transpose()?;
        Ok(Arc::new(Ready(Arc::new(ToolErrorHandler::template(
            template, tools,
        )))))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use keel_core::message::{Message, ToolStatus};
    use keel_testkit::ScriptedModel;
    use serde_json::json;

    use super::*;
    use crate::test_support::{agent, call};

    #[tokio::test]
    async fn selected_failures_become_worded_error_results() {
        let model = Arc::new(ScriptedModel::new([
            call("c1", "fail", json!({})),
            Message::ai("ok"),
        ]));
        let handler = ToolErrorHandler::template("{tool} broke: {error}. Try another way.", None);
        let out = agent(&model, vec![Arc::new(handler)])
            .invoke("t", vec![Message::human("go")])
            .await
            .unwrap();
        let r = &out.state.messages[2];
        assert_eq!(r.text(), "fail broke: boom. Try another way.");
        assert_eq!(r.as_tool().unwrap().status, ToolStatus::Error);
    }

    #[tokio::test]
    async fn other_tools_and_none_let_the_failure_through() {
        let model = Arc::new(ScriptedModel::new([
            call("c1", "fail", json!({})),
            Message::ai("ok"),
        ]));
        let handler = ToolErrorHandler::template("nope", Some(vec!["search".into()]));
        let out = agent(&model, vec![Arc::new(handler)])
            .invoke("t", vec![Message::human("go")])
            .await
            .unwrap();
        assert_eq!(out.state.messages[2].text(), "fail failed: boom");

        let model = Arc::new(ScriptedModel::new([
            call("c1", "fail", json!({})),
            Message::ai("ok"),
        ]));
        let handler = ToolErrorHandler::new(Arc::new(|_, _| None), None);
        let out = agent(&model, vec![Arc::new(handler)])
            .invoke("t", vec![Message::human("go")])
            .await
            .unwrap();
        assert_eq!(out.state.messages[2].text(), "fail failed: boom");
    }
}
