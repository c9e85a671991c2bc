//! Every shape of request body the adapter builds, in one catalogue: checked here for
//! the invariants the API states (at most four breakpoints, alternating roles, tool
//! results first in their turn), and written to `$KEEL_ANTHROPIC_BODIES` (JSONL) when
//! set, for scripts/anthropic-tests.sh to validate against the official `anthropic`
//! SDK's request types.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;

use keel_anthropic::{AnthropicConfig, CacheTtl, build_body};
use keel_core::message::{
    Content, ContentPart, ImagePart, Message, MessageBody, TextPart, ToolCall,
};
use keel_core::model::{ChatRequest, ModelSettings, ToolChoice};
use keel_core::tool::ToolSpec;
use serde_json::{Value, json};

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_weather",
            "Get the current weather in a given location",
            json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
        ),
        ToolSpec::new("ls", "List files.", json!({"properties": {}})),
    ]
}

fn thread() -> Vec<Message> {
    let thinking = Content::Parts(vec![
        ContentPart::Other(
            json!({"type": "thinking", "thinking": "Let me check.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgx"}),
        ),
        ContentPart::Other(json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"})),
        ContentPart::Text(TextPart::new("Checking.")),
    ]);
    vec![
        Message::human("Summary of the earlier conversation: PRJ-123, EU cluster.")
            .with_name("summary"),
        Message::human(Content::Parts(vec![
            ContentPart::Text(TextPart::new("What does this graph say?")),
            ContentPart::Image(ImagePart {
                image_url: json!({"url": "data:image/png;base64,iVBORw0KGgo="}),
            }),
            ContentPart::Image(ImagePart {
                image_url: json!({"url": "https://example.com/graph.png", "detail": "high"}),
            }),
        ])),
        {
            let mut m = Message::ai("").with_tool_calls(vec![
                ToolCall::new("toolu_1", "get_weather", json!({"location": "Paris"})),
                ToolCall::new("toolu_2", "ls", json!({})),
            ]);
            if let MessageBody::Ai(ai) = m.body_mut() {
                ai.content = thinking;
            }
            m
        },
        Message::tool("toolu_1", "15 degrees"),
        Message::tool_error("toolu_2", "permission denied"),
        Message::system("Reminder: answer briefly."),
        Message::human("And tomorrow?"),
    ]
}

struct Case {
    name: &'static str,
    config: AnthropicConfig,
    stream: bool,
    tool_choice: Option<ToolChoice>,
    settings: ModelSettings,
    with_tools: bool,
    messages: Vec<Message>,
}

fn cases() -> Vec<Case> {
    let base = AnthropicConfig::new("claude-sonnet-4-5");
    let sampling = ModelSettings {
        temperature: Some(0.2),
        top_p: Some(0.9),
        max_tokens: Some(512),
        stop: vec!["\n\nHuman:".into()],
        ..Default::default()
    };
    let mut thinking = ModelSettings {
        max_tokens: Some(4096),
        ..Default::default()
    };
    thinking.extra.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": 2048}),
    );
    thinking
        .extra
        .insert("metadata".into(), json!({"user_id": "u-42"}));
    let mut structured = ModelSettings::default();
    structured.extra.insert(
        "response_format".into(),
        json!({"type": "json_schema", "json_schema": {"name": "summary", "schema": {
            "type": "object", "properties": {"summary": {"type": "string"}},
            "required": ["summary"], "additionalProperties": false}, "strict": false}}),
    );
    vec![
        Case {
            name: "stream, tools auto, sampling",
            config: base.clone(),
            stream: true,
            tool_choice: Some(ToolChoice::Auto),
            settings: sampling,
            with_tools: true,
            messages: thread(),
        },
        Case {
            name: "thinking sent back, extra settings",
            config: base.clone(),
            stream: false,
            tool_choice: None,
            settings: thinking,
            with_tools: true,
            messages: thread(),
        },
        Case {
            name: "tool_choice any",
            config: base.clone(),
            stream: false,
            tool_choice: Some(ToolChoice::Required),
            settings: ModelSettings::default(),
            with_tools: true,
            messages: thread(),
        },
        Case {
            name: "tool_choice named",
            config: base.clone(),
            stream: true,
            tool_choice: Some(ToolChoice::Named("ls".into())),
            settings: ModelSettings::default(),
            with_tools: true,
            messages: thread(),
        },
        Case {
            name: "tool_choice none",
            config: base.clone(),
            stream: false,
            tool_choice: Some(ToolChoice::None),
            settings: ModelSettings::default(),
            with_tools: true,
            messages: thread(),
        },
        Case {
            name: "structured output, 1h cache",
            config: base.clone().with_cache_ttl(Some(CacheTtl::OneHour)),
            stream: false,
            tool_choice: None,
            settings: structured,
            with_tools: false,
            messages: vec![Message::human("Summarize: ...")],
        },
        Case {
            name: "no caching, no system",
            config: base.with_cache_ttl(None),
            stream: false,
            tool_choice: None,
            settings: ModelSettings::default(),
            with_tools: false,
            messages: vec![
                Message::human("hi"),
                Message::ai("hello"),
                Message::human("bye"),
            ],
        },
    ]
}

#[test]
fn every_shape_keeps_the_api_s_rules_and_is_written_for_the_sdk_check() {
    let system = Message::system("You are a weather assistant.");
    let mut out = Vec::new();
    for case in cases() {
        let specs = if case.with_tools { tools() } else { Vec::new() };
        let mut request = ChatRequest::new(&case.messages, &case.settings);
        request.system = Some(&system);
        request.tools = &specs;
        request.tool_choice = case.tool_choice.as_ref();
        let body = build_body(&case.config, &request, case.stream)
            .unwrap()
            .body;
        assert!(body.get("temperature").is_none() && body.get("top_p").is_none());
        let text = body.to_string();
        let breakpoints = text.matches("\"cache_control\"").count();
        assert!(breakpoints <= 4, "{}: {breakpoints} breakpoints", case.name);
        let messages = body["messages"].as_array().unwrap();
        for pair in messages.windows(2) {
            assert_ne!(
                pair[0]["role"], pair[1]["role"],
                "{}: roles alternate",
                case.name
            );
        }
        for m in messages {
            let kinds: Vec<&str> = m["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["type"].as_str().unwrap())
                .collect();
            let first_other = kinds.iter().position(|k| *k != "tool_result");
            if let Some(i) = first_other {
                assert!(
                    !kinds[i..].contains(&"tool_result"),
                    "{}: {kinds:?}",
                    case.name
                );
            }
            for b in m["content"].as_array().unwrap() {
                if matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")) {
                    assert!(b.get("cache_control").is_none(), "{}", case.name);
                }
            }
        }
        out.push(json!({"case": case.name, "body": body}));
    }
    // The thinking blocks go back exactly as they came.
    let thinking_case: &Value = &out[1]["body"]["messages"][1]["content"];
    assert_eq!(
        thinking_case[0],
        json!({"type": "thinking", "thinking": "Let me check.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgx"})
    );
    if let Ok(path) = std::env::var("KEEL_ANTHROPIC_BODIES") {
        let mut f = std::fs::File::create(&path).unwrap();
        for line in &out {
            writeln!(f, "{line}").unwrap();
        }
    }
}
