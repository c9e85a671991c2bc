//! `LlmToolEmulator`: a model answers chosen tool calls instead of the tools, for
//! testing agents without their real tools (LangChain's `LLMToolEmulator`).
//!
//! For an emulated call, the emulator model is asked, with LangChain's prompt, to return
//! what the tool would (its name, description and arguments, the arguments in Python's
//! rendering as LangChain shows them); its answer becomes the tool result. The call is
//! internal: its tokens never reach the user's stream. Calls of other tools run.

mod entry;

pub(crate) use entry::Entry;

use std::sync::Arc;

use keel_core::message::Message;
use keel_core::middleware::{Middleware, ToolCallRequest, ToolNext};
use keel_core::model::{ChatModel, ChatRequest, ModelSettings};
use keel_core::telemetry::{self, CallPurpose};
use keel_core::tool::ToolError;
use serde_json::json;

use crate::common::selects;
use crate::events;

/// Emulates tools with a model. See the [module docs](self).
#[derive(Clone)]
pub struct LlmToolEmulator {
    model: Arc<dyn ChatModel>,
    tools: Option<Vec<String>>,
}

impl std::fmt::Debug for LlmToolEmulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmToolEmulator")
            .field("model", &self.model.profile().name)
            .field("tools", &self.tools)
            .finish()
    }
}

impl LlmToolEmulator {
    /// Emulates `tools` (every tool when `None`) with `model`. LangChain's default model
    /// (a hosted Claude) is deprecated there; Keel always asks for one.
    pub fn new(model: Arc<dyn ChatModel>, tools: Option<Vec<String>>) -> Self {
        LlmToolEmulator { model, tools }
    }

    /// The prompt sent for one call (LangChain's words).
    pub fn prompt(request: &ToolCallRequest) -> String {
        let description = request
            .tool
            .as_ref()
            .map_or("No description available".to_owned(), |t| {
                t.spec().description.clone()
            });
        format!(
            "You are emulating a tool call for testing purposes.\n\nTool: {}\nDescription: {description}\nArguments: {}\n\nGenerate a realistic response that this tool would return given these arguments.\nReturn ONLY the tool's output, no explanation or preamble. Introduce variation into your responses.",
            request.call.name,
            keel_tokens::pyrepr::py_repr(&request.call.args)
        )
    }
}

#[keel_core::middleware]
impl Middleware for LlmToolEmulator {
    fn name(&self) -> &str {
        "LLMToolEmulator"
    }

    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        if !selects(self.tools.as_deref(), &request.call.name) {
            return next.run(request).await;
        }
        let prompt = [Message::human(Self::prompt(&request))];
        let settings = ModelSettings {
            temperature: Some(1.0),
            ..ModelSettings::default()
        };
        let mut chat = ChatRequest::new(&prompt, &settings);
        chat.internal = true;
        let answer = telemetry::invoke(&*self.model, chat, CallPurpose::ToolEmulation)
            .await
            .map_err(|e| ToolError::Failed {
                tool: request.call.name.clone(),
                message: format!("the emulator model failed: {e}"),
            })?;
        events::counter(
            &request.runtime.writer,
            self.name(),
            "emulated_tool_calls",
            1,
            json!({"tool": request.call.name}),
        );
        Ok(
            Message::tool(request.call.id.clone(), answer.content().clone())
                .with_name(request.call.name.clone()),
        )
    }
}

#[cfg(test)]
mod tests {
    use keel_core::message::Message;
    use keel_testkit::ScriptedModel;
    use serde_json::json;

    use super::*;
    use crate::test_support::{agent, call};

    #[tokio::test]
    async fn chosen_tools_are_answered_by_the_model_others_run() {
        let emulator = Arc::new(ScriptedModel::new([Message::ai("Sunny, 21°C")]));
        let model = Arc::new(ScriptedModel::new([
            Message::ai("").with_tool_calls(vec![
                keel_core::message::ToolCall::new("w", "get_weather", json!({"city": "Paris"})),
                keel_core::message::ToolCall::new("e", "echo", json!({"x": 1})),
            ]),
            Message::ai("done"),
        ]));
        let mw = LlmToolEmulator::new(emulator.clone(), Some(vec!["get_weather".into()]));
        let out = agent(&model, vec![Arc::new(mw)])
            .invoke("t", vec![Message::human("weather?")])
            .await
            .unwrap();
        let w = out
            .state
            .messages
            .iter()
            .find(|m| m.tool_call_id() == Some("w"))
            .unwrap();
        assert_eq!(w.text(), "Sunny, 21°C");
        assert_eq!(w.name(), Some("get_weather"));
        let e = out
            .state
            .messages
            .iter()
            .find(|m| m.tool_call_id() == Some("e"))
            .unwrap();
        assert_eq!(e.text(), "{\"x\":1}");
        let asked = &emulator.requests()[0];
        assert!(asked.internal, "never streamed to the user");
        assert_eq!(
            asked.messages[0].text(),
            "You are emulating a tool call for testing purposes.\n\nTool: get_weather\nDescription: No description available\nArguments: {'city': 'Paris'}\n\nGenerate a realistic response that this tool would return given these arguments.\nReturn ONLY the tool's output, no explanation or preamble. Introduce variation into your responses."
        );
    }

    #[tokio::test]
    async fn emulating_everything_includes_real_tools_with_their_description() {
        let emulator = Arc::new(ScriptedModel::new([Message::ai("emulated")]));
        let model = Arc::new(ScriptedModel::new([
            call("c", "echo", json!({})),
            Message::ai("ok"),
        ]));
        let out = agent(
            &model,
            vec![Arc::new(LlmToolEmulator::new(emulator.clone(), None))],
        )
        .invoke("t", vec![Message::human("x")])
        .await
        .unwrap();
        assert_eq!(out.state.messages[2].text(), "emulated");
        assert!(
            emulator.requests()[0].messages[0]
                .text()
                .contains("Description: test tool echo")
        );
    }
}
