//! `ModelRefusal`: turns a model's refusal into a typed error, when asked (LangChain's
//! `ModelRefusalMiddleware`).
//!
//! Providers report a refusal as a successful answer (OpenAI's `refusal` field, which
//! keel-openai keeps in `response_metadata.refusal`; a `refusal` content part; Anthropic's
//! `stop_reason: refusal`), so without this middleware the refusal is an ordinary AI
//! message. With it, the model call fails with [`ModelErrorKind::Refused`] and
//! LangChain's message: `Model refused to produce the requested output: <text>`.

use std::sync::Arc;

use keel_core::message::{Content, ContentPart, Message};
use keel_core::middleware::{Middleware, ModelRequest, ModelResponse, Next};
use keel_core::model::{ModelError, ModelErrorKind};
use serde_json::{Value, json};

use crate::events;
use crate::stack::value::{Ready, Settings};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// Fails model calls that answered with a refusal. See the [module docs](self).
#[derive(Clone, Copy, Debug, Default)]
pub struct ModelRefusal;

/// The refusal in an answer, if any: its text (possibly empty) and category.
pub fn refusal_of(message: &Message) -> Option<(String, Option<String>)> {
    let ai = message.as_ai()?;
    let meta = &ai.response_metadata;
    if let Some(text) = meta
        .get("refusal")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        return Some((text.to_owned(), None));
    }
    if let Content::Parts(parts) = &ai.content {
        for part in parts {
            if let ContentPart::Other(Value::Object(o)) = part
                && o.get("type").and_then(Value::as_str) == Some("refusal")
            {
                let text = o.get("refusal").and_then(Value::as_str).unwrap_or_default();
                let category = o
                    .get("extras")
                    .and_then(|e| e.get("category"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                return Some((text.to_owned(), category));
            }
        }
    }
    let stopped = ["finish_reason", "stop_reason"]
        .iter()
        .any(|k| meta.get(*k).and_then(Value::as_str) == Some("refusal"));
    stopped.then(|| (message.text().into_owned(), None))
}

/// LangChain's wording of a refusal error.
pub fn refusal_message(text: &str, category: Option<&str>) -> String {
    let mut out = "Model refused to produce the requested output".to_owned();
    if let Some(c) = category {
        out.push_str(&format!(" (category='{c}')"));
    }
    if !text.is_empty() {
        out.push_str(": ");
        out.push_str(text);
    }
    out
}

#[keel_core::middleware]
impl Middleware for ModelRefusal {
    fn name(&self) -> &str {
        "ModelRefusalMiddleware"
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let writer = request.runtime.writer.clone();
        let response = next.run(request).await?;
        let Some((text, category)) = refusal_of(&response.message) else {
            return Ok(response);
        };
        events::counter(
            &writer,
            self.name(),
            "refusals",
            1,
            json!({"category": category}),
        );
        Err(ModelError::new(
            ModelErrorKind::Refused,
            refusal_message(&text, category.as_deref()),
        )
        .with_raw(text))
    }
}

/// The `model_refusal` entry of a stack file: LangChain's constructor arguments, read
/// and checked here with the middleware they build.
pub(crate) struct Entry;

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "model_refusal"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        // It takes no settings: any key is unknown.
        Settings::read(source, &[])?;
        Ok(Arc::new(Ready(Arc::new(ModelRefusal))))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use keel_agent::AgentError;
    use keel_core::message::{AiMessage, Message};
    use keel_testkit::ScriptedModel;
    use serde_json::json;

    use super::*;
    use crate::test_support::agent;

    #[tokio::test]
    async fn a_refusal_is_a_typed_error_and_an_answer_passes() {
        let mut meta = serde_json::Map::new();
        meta.insert("refusal".into(), json!("I can't help with that."));
        let refused = Message::from(AiMessage {
            response_metadata: meta,
            ..Default::default()
        });
        let model = Arc::new(ScriptedModel::new([refused]));
        let err = agent(&model, vec![Arc::new(ModelRefusal)])
            .invoke("t", vec![Message::human("x")])
            .await
            .unwrap_err();
        let AgentError::Model { source, .. } = err else {
            panic!("a model error expected")
        };
        assert_eq!(source.kind, ModelErrorKind::Refused);
        assert_eq!(
            source.message,
            "Model refused to produce the requested output: I can't help with that."
        );

        let model = Arc::new(ScriptedModel::new([Message::ai("sure")]));
        let out = agent(&model, vec![Arc::new(ModelRefusal)])
            .invoke("t", vec![Message::human("x")])
            .await
            .unwrap();
        assert_eq!(out.last_message().unwrap().text(), "sure");
    }

    #[test]
    fn refusal_parts_and_stop_reasons_are_found() {
        let part = Message::from(AiMessage {
            content: Content::Parts(vec![ContentPart::Other(
                json!({"type": "refusal", "refusal": "no", "extras": {"category": "cyber"}}),
            )]),
            ..Default::default()
        });
        let (text, category) = refusal_of(&part).unwrap();
        assert_eq!(
            refusal_message(&text, category.as_deref()),
            "Model refused to produce the requested output (category='cyber'): no"
        );
        let mut meta = serde_json::Map::new();
        meta.insert("stop_reason".into(), json!("refusal"));
        let stopped = Message::from(AiMessage {
            response_metadata: meta,
            ..Default::default()
        });
        assert_eq!(refusal_of(&stopped), Some((String::new(), None)));
        assert_eq!(refusal_of(&Message::ai("fine")), None);
    }
}
