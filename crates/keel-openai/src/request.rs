//! Building the `/chat/completions` request body from a [`ChatRequest`].
//!
//! The body is built as JSON rather than through async-openai's typed request so that
//! content parts Keel keeps verbatim (audio, files, provider blocks) and provider-specific
//! settings (`extra`) reach the server unchanged.

use keel_core::message::{Message, MessageBody};
use keel_core::model::{ChatRequest, ToolChoice};
use serde_json::{Map, Value, json};

use crate::profile::is_reasoning_model;

/// The JSON body for one chat-completions call.
///
/// `extra` settings are written first, so the fields Keel sets itself (model, messages,
/// tools, sampling settings, stream flags) win over a clashing `extra` key.
pub fn build_body(
    model: &str,
    request: &ChatRequest<'_>,
    stream: bool,
    stream_usage: bool,
) -> Value {
    let settings = request.settings;
    let mut body: Map<String, Value> = settings.extra.clone();
    body.insert("model".into(), Value::String(model.to_owned()));
    let messages: Vec<Value> = request
        .system
        .into_iter()
        .chain(request.messages.iter())
        .map(message_json)
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        // OpenAI rejects tool_choice without tools, so it is only sent alongside them.
        if let Some(choice) = request.tool_choice {
            let choice = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Named(name) => {
                    json!({"type": "function", "function": {"name": name}})
                }
            };
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(t) = settings.temperature {
        body.insert("temperature".into(), f32_json(t));
    }
    if let Some(p) = settings.top_p {
        body.insert("top_p".into(), f32_json(p));
    }
    if let Some(n) = settings.max_tokens {
        // OpenAI's reasoning models reject `max_tokens`; every other server knows it.
        let key = if is_reasoning_model(model) {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(key.into(), json!(n));
    }
    if !settings.stop.is_empty() {
        body.insert("stop".into(), json!(settings.stop));
    }
    body.insert("stream".into(), Value::Bool(stream));
    if stream && stream_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    } else {
        body.remove("stream_options");
    }
    Value::Object(body)
}

/// An `f32` as the decimal the user wrote (`0.9`), not its widened binary value
/// (`0.8999999761581421`), which some servers' validators reject as out of range.
fn f32_json(x: f32) -> Value {
    x.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// One message in the wire shape: Keel's ids, metadata and usage stay home.
fn message_json(message: &Message) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), json!(message.role().as_str()));
    let content = serde_json::to_value(message.content()).unwrap_or(Value::Null);
    match message.body() {
        MessageBody::System(_) | MessageBody::Human(_) => {
            out.insert("content".into(), content);
            if let Some(name) = message.name() {
                out.insert("name".into(), json!(name));
            }
        }
        MessageBody::Ai(ai) => {
            // `content: null` is how the protocol says "only tool calls".
            let content = if ai.content.is_empty() && !ai.tool_calls.is_empty() {
                Value::Null
            } else {
                content
            };
            out.insert("content".into(), content);
            if let Some(name) = message.name() {
                out.insert("name".into(), json!(name));
            }
            if !ai.tool_calls.is_empty() {
                // ToolCall serializes to the wire shape with `arguments` as JSON text.
                out.insert("tool_calls".into(), json!(ai.tool_calls));
            }
        }
        MessageBody::Tool(tool) => {
            out.insert("tool_call_id".into(), json!(tool.tool_call_id));
            out.insert("content".into(), content);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::{ContentPart, ImagePart, TextPart, ToolCall};
    use keel_core::model::ModelSettings;
    use keel_core::tool::ToolSpec;

    #[test]
    fn all_four_kinds_and_settings() {
        let system = Message::system("be brief");
        let messages = vec![
            Message::human(keel_core::message::Content::Parts(vec![
                ContentPart::Text(TextPart::new("what is this?")),
                ContentPart::Image(ImagePart {
                    image_url: json!({"url": "data:image/png;base64,AAAA"}),
                }),
            ]))
            .with_name("ann"),
            Message::ai("").with_tool_calls(vec![ToolCall::new("c1", "look", json!({"q": "x"}))]),
            Message::tool_error("c1", "not found"),
        ];
        let mut settings = ModelSettings {
            temperature: Some(0.5),
            max_tokens: Some(64),
            top_p: Some(0.9),
            stop: vec!["\n\n".into()],
            ..Default::default()
        };
        settings.extra.insert("seed".into(), json!(7));
        settings.extra.insert("model".into(), json!("ignored"));
        let tools = [ToolSpec::new("look", "Looks.", json!({"type": "object"}))];
        let choice = ToolChoice::Named("look".into());
        let req = ChatRequest {
            system: Some(&system),
            messages: &messages,
            tools: &tools,
            tool_choice: Some(&choice),
            settings: &settings,
            internal: false,
        };
        let body = build_body("gpt-4o", &req, true, true);
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "seed": 7,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "name": "ann", "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                    ]},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":\"x\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "not found"}
                ],
                "tools": [{"type": "function", "function": {"name": "look", "description": "Looks.", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "look"}},
                "temperature": 0.5,
                "top_p": 0.9,
                "max_tokens": 64,
                "stop": ["\n\n"],
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn reasoning_models_get_max_completion_tokens_and_no_tool_choice_without_tools() {
        let messages = vec![Message::human("hi")];
        let settings = ModelSettings {
            max_tokens: Some(10),
            ..Default::default()
        };
        let mut req = ChatRequest::new(&messages, &settings);
        req.tool_choice = Some(&ToolChoice::Required);
        let body = build_body("o3-mini", &req, false, true);
        assert_eq!(body["max_completion_tokens"], json!(10));
        assert!(body.get("max_tokens").is_none());
        assert!(body.get("tool_choice").is_none());
        assert!(body.get("stream_options").is_none());
        assert_eq!(body["stream"], json!(false));
    }
}
