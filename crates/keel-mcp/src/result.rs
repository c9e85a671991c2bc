//! An MCP `tools/call` result as a Keel tool message's content.
//!
//! | MCP content (`CallToolResult.content`) | Keel content part |
//! | --- | --- |
//! | `text` | a text part |
//! | `image` | an `image_url` part with a `data:` URL |
//! | `resource` with `text` | a text part: `[resource URI]` and the text |
//! | `resource` with `blob`, `audio` | a text placeholder naming the URI or type, MIME type and size |
//! | `resource_link` | a text part: `[resource link: URI (NAME)]` |
//! | `structuredContent` | a text part of its JSON when `content` has no text (servers send the same data as text beside it, as the specification asks) |
//!
//! One text part and nothing else is plain text content. `isError: true` makes the
//! whole result a failure ([`ToolError::Failed`]) whose message is that text.

use keel_core::message::{Content, ContentPart, ImagePart, TextPart};
use keel_core::tool::ToolError;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// The content of a successful result, or the tool's failure.
pub fn map_result(tool: &str, result: CallToolResult) -> Result<Content, ToolError> {
    let mut parts: Vec<ContentPart> = Vec::new();
    for block in &result.content {
        let value = serde_json::to_value(block).unwrap_or(Value::Null);
        parts.push(map_block(&value));
    }
    if let Some(structured) = &result.structured_content {
        // The specification asks servers to put the same data in a text block for
        // clients that do not read structured content; only a result without one
        // gets the JSON as text.
        if !parts.iter().any(|p| matches!(p, ContentPart::Text(_))) {
            let text = serde_json::to_string(structured).unwrap_or_default();
            parts.push(ContentPart::Text(TextPart::new(text)));
        }
    }
    let content = match parts.as_slice() {
        [] => Content::Text(String::new()),
        [ContentPart::Text(t)] => Content::Text(t.text.clone()),
        _ => Content::Parts(parts),
    };
    if result.is_error == Some(true) {
        let text = content.text();
        let message = if text.is_empty() {
            "the server reported an error without a message".to_owned()
        } else {
            text.into_owned()
        };
        return Err(ToolError::Failed {
            tool: tool.to_owned(),
            message,
        });
    }
    Ok(content)
}

fn text(s: impl Into<String>) -> ContentPart {
    ContentPart::Text(TextPart::new(s))
}

fn map_block(block: &Value) -> ContentPart {
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let mime = |v: &Value| str_of(v, "mimeType").unwrap_or_else(|| "unknown type".into());
    let size = |v: &Value, k: &str| {
        // base64: 4 characters carry 3 bytes.
        str_of(v, k).map_or(0, |d| d.len() / 4 * 3)
    };
    match block.get("type").and_then(Value::as_str) {
        Some("text") => text(str_of(block, "text").unwrap_or_default()),
        Some("image") => {
            let data = str_of(block, "data").unwrap_or_default();
            let url = format!("data:{};base64,{data}", mime(block));
            ContentPart::Image(ImagePart {
                image_url: json!({ "url": url }),
            })
        }
        Some("audio") => text(format!(
            "[audio: {}, {} bytes, not shown]",
            mime(block),
            size(block, "data")
        )),
        Some("resource") => {
            let resource = block.get("resource").cloned().unwrap_or(Value::Null);
            let uri = str_of(&resource, "uri").unwrap_or_default();
            match str_of(&resource, "text") {
                Some(body) => text(format!("[resource {uri}]\n{body}")),
                None => text(format!(
                    "[resource {uri}: {}, {} bytes, not shown]",
                    mime(&resource),
                    size(&resource, "blob")
                )),
            }
        }
        Some("resource_link") => {
            let uri = str_of(block, "uri").unwrap_or_default();
            match str_of(block, "name") {
                Some(name) => text(format!("[resource link: {uri} ({name})]")),
                None => text(format!("[resource link: {uri}]")),
            }
        }
        other => text(format!(
            "[{} content, not shown]",
            other.unwrap_or("untyped")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn maps_each_kind_of_content() {
        let one = map_result(
            "t",
            result(json!({"content": [{"type": "text", "text": "hi"}]})),
        );
        assert_eq!(one.unwrap(), Content::Text("hi".into()));
        let many = map_result(
            "t",
            result(json!({"content": [
                {"type": "text", "text": "a"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///x", "text": "body"}},
                {"type": "resource", "resource": {"uri": "file:///y", "blob": "AAAAAAAA", "mimeType": "application/pdf"}},
                {"type": "resource_link", "uri": "file:///z", "name": "z"},
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}
            ]})),
        )
        .unwrap();
        let Content::Parts(parts) = many else {
            panic!("parts expected")
        };
        assert_eq!(parts[0], text("a"));
        assert_eq!(
            parts[1],
            ContentPart::Image(ImagePart {
                image_url: json!({"url": "data:image/png;base64,AAAA"})
            })
        );
        assert_eq!(parts[2], text("[resource file:///x]\nbody"));
        assert_eq!(
            parts[3],
            text("[resource file:///y: application/pdf, 6 bytes, not shown]")
        );
        assert_eq!(parts[4], text("[resource link: file:///z (z)]"));
        assert_eq!(parts[5], text("[audio: audio/wav, 3 bytes, not shown]"));
    }

    #[test]
    fn structured_content_is_json_when_no_text_says_it() {
        let only = map_result(
            "t",
            result(json!({"content": [], "structuredContent": {"a": 1}})),
        );
        assert_eq!(only.unwrap(), Content::Text("{\"a\":1}".into()));
        let both = map_result(
            "t",
            result(
                json!({"content": [{"type": "text", "text": "a is 1"}], "structuredContent": {"a": 1}}),
            ),
        );
        assert_eq!(both.unwrap(), Content::Text("a is 1".into()));
        let image = map_result(
            "t",
            result(json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}], "structuredContent": [1]})),
        )
        .unwrap();
        assert_eq!(image.text(), "[1]");
    }

    #[test]
    fn is_error_is_a_failure_with_the_text() {
        let err = map_result(
            "t",
            result(json!({"content": [{"type": "text", "text": "boom"}], "isError": true})),
        )
        .unwrap_err();
        assert_eq!(
            err,
            ToolError::Failed {
                tool: "t".into(),
                message: "boom".into()
            }
        );
    }
}
