//! A transcript stored as JSONL (one message per line) round-trips losslessly, for
//! generated messages of all four kinds.

use keel_core::message::{
    AiMessage, Content, ContentPart, HumanMessage, ImagePart, Message, Metadata, SystemMessage,
    TextPart, ToolCall, ToolMessage, ToolStatus, Usage,
};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // JSON has no NaN or infinity; every finite float must survive.
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn metadata() -> impl Strategy<Value = Metadata> {
    prop::collection::btree_map("[a-z_]{1,10}", json(), 0..3)
        .prop_map(|m| m.into_iter().collect::<Map<String, Value>>())
}

fn part() -> impl Strategy<Value = ContentPart> {
    prop_oneof![
        ".{0,20}".prop_map(|text| ContentPart::Text(TextPart::new(text))),
        json().prop_map(|image_url| ContentPart::Image(ImagePart { image_url })),
        // Unknown part types are kept verbatim; "text" and "image_url" would parse as the
        // typed variants, so they are not "other" parts.
        ("input_audio|file|refusal", metadata()).prop_map(|(kind, mut rest)| {
            rest.insert("type".into(), Value::String(kind));
            ContentPart::Other(Value::Object(rest))
        }),
    ]
}

fn content() -> impl Strategy<Value = Content> {
    prop_oneof![
        ".{0,40}".prop_map(Content::Text),
        prop::collection::vec(part(), 0..4).prop_map(Content::Parts),
    ]
}

fn id() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-]{0,16}"
}

fn name() -> impl Strategy<Value = Option<String>> {
    prop::option::of(".{0,10}")
}

fn tool_call() -> impl Strategy<Value = ToolCall> {
    (id(), "[a-z_]{1,12}", json()).prop_map(|(id, name, args)| ToolCall { id, name, args })
}

fn usage() -> impl Strategy<Value = Option<Usage>> {
    prop::option::of(
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(i, o, t, c, w)| Usage {
                input_tokens: i,
                output_tokens: o,
                total_tokens: t,
                cached_input_tokens: c,
                cache_creation_input_tokens: w,
            }),
    )
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (content(), id(), name(), metadata()).prop_map(|(content, id, name, metadata)| {
            Message::from(SystemMessage {
                content,
                id,
                name,
                metadata,
            })
        }),
        (content(), id(), name(), metadata()).prop_map(|(content, id, name, metadata)| {
            Message::from(HumanMessage {
                content,
                id,
                name,
                metadata,
            })
        }),
        (
            content(),
            prop::collection::vec(tool_call(), 0..3),
            id(),
            name(),
            usage(),
            metadata(),
            metadata(),
        )
            .prop_map(
                |(content, tool_calls, id, name, usage, response_metadata, metadata)| {
                    Message::from(AiMessage {
                        content,
                        tool_calls,
                        id,
                        name,
                        usage,
                        response_metadata,
                        metadata,
                    })
                }
            ),
        (content(), id(), id(), name(), any::<bool>(), metadata()).prop_map(
            |(content, tool_call_id, id, name, failed, metadata)| {
                Message::from(ToolMessage {
                    content,
                    tool_call_id,
                    id,
                    name,
                    status: if failed {
                        ToolStatus::Error
                    } else {
                        ToolStatus::Success
                    },
                    metadata,
                })
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn jsonl_transcript_round_trips(messages in prop::collection::vec(message(), 0..8)) {
        let mut jsonl = String::new();
        for m in &messages {
            let line = serde_json::to_string(m).unwrap();
            prop_assert!(!line.contains('\n'), "one message per line");
            jsonl.push_str(&line);
            jsonl.push('\n');
        }
        let back: Vec<Message> = jsonl
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        prop_assert_eq!(&back, &messages);
        for (a, b) in back.iter().zip(&messages) {
            prop_assert_eq!(a.fingerprint(), b.fingerprint());
            // Stable bytes: writing what was read gives the same line again.
            prop_assert_eq!(serde_json::to_string(a).unwrap(), serde_json::to_string(b).unwrap());
        }
    }
}
