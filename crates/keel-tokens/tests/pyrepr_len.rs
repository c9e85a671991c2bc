//! The length functions of `pyrepr` (and `tool_calls_repr_len`) against the writers
//! they stand in for: on any JSON value, the measured length is the writer's output
//! length in code points, and the visited characters are exactly the non-ASCII ones of
//! that output. The writers themselves are checked against CPython in
//! `approx_parity.rs`.

use keel_core::message::{Message, ToolCall};
use keel_core::tokens::TokenCounter;
use keel_tokens::ApproximateCounter;
use keel_tokens::approx::{
    tool_calls_repr_len, tool_calls_repr_len_visiting, write_tool_calls_repr,
};
use keel_tokens::pyrepr::{
    float_repr_len, json_dumps_len, json_str_dumps_len, map_repr_len, map_repr_len_visiting,
    py_json_dumps, py_repr, repr_len, repr_len_visiting, str_repr_len, write_float_repr,
    write_map_repr,
};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// Characters that exercise every branch of the escape rules.
fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        8 => proptest::char::range(' ', '~'),
        3 => prop::sample::select(vec!['\'', '"', '\\']),
        2 => proptest::char::range('\u{0}', '\u{1f}'),
        1 => Just('\u{7f}'),
        // Latin-1: C1 controls, the no-break space, the soft hyphen, printable letters.
        2 => proptest::char::range('\u{80}', '\u{ff}'),
        2 => proptest::char::range('\u{4e00}', '\u{9fff}'),
        2 => proptest::char::range('\u{1f300}', '\u{1faff}'),
        1 => proptest::char::range('\u{300}', '\u{36f}'),
        // Format and separator characters: zero-width, bidi controls, BOM, tags.
        2 => prop::sample::select(vec![
            '\u{200b}', '\u{200d}', '\u{2028}', '\u{202e}', '\u{2060}', '\u{2066}',
            '\u{3000}', '\u{feff}', '\u{e0001}', '\u{e0041}', '\u{ad}', '\u{61c}',
        ]),
        // Private use and non-characters.
        1 => prop::sample::select(vec![
            '\u{e000}', '\u{f8ff}', '\u{fdd0}', '\u{fffe}', '\u{ffff}', '\u{1fffe}',
            '\u{f0000}', '\u{10ffff}',
        ]),
        2 => any::<char>(),
    ]
}

fn any_string() -> impl Strategy<Value = String> {
    prop::collection::vec(any_char(), 0..24).prop_map(String::from_iter)
}

fn any_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => any::<f64>(),
        1 => prop::sample::select(vec![
            0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, f64::MAX, f64::MIN,
            1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 0.1 + 0.2, 1e22, 1e-7, 123.456,
        ]),
        2 => (-1_000_000i64..1_000_000, -30i32..30).prop_map(|(m, e)| m as f64 * 10f64.powi(e)),
    ]
    .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
}

fn any_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(vec![i64::MIN, i64::MAX, -1, 0, 9, 10, -10, 99, 100])
            .prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        any_float().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
    ]
}

fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any_number(),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any_string(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn any_tool_calls() -> impl Strategy<Value = Vec<ToolCall>> {
    let call = (any_string(), any_string(), any_value())
        .prop_map(|(id, name, args)| ToolCall::new(id, name, args));
    prop::collection::vec(call, 0..4)
}

fn non_ascii(text: &str) -> String {
    text.chars().filter(|c| !c.is_ascii()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn value_lengths_equal_writer_output(v in any_value()) {
        let repr = py_repr(&v);
        prop_assert_eq!(repr_len(&v), repr.chars().count());
        prop_assert_eq!(json_dumps_len(&v), py_json_dumps(&v).chars().count());

        let mut seen = String::new();
        let len = repr_len_visiting(&v, &mut |c| seen.push(c));
        prop_assert_eq!(len, repr.chars().count());
        prop_assert_eq!(seen, non_ascii(&repr));

        if let Value::Object(map) = &v {
            let mut out = String::new();
            write_map_repr(map, &mut out);
            prop_assert_eq!(map_repr_len(map), out.chars().count());
            let mut seen = String::new();
            map_repr_len_visiting(map, &mut |c| seen.push(c));
            prop_assert_eq!(seen, non_ascii(&out));
        }
    }

    #[test]
    fn string_lengths_equal_writer_output(s in any_string()) {
        let v = Value::String(s.clone());
        prop_assert_eq!(str_repr_len(&s), py_repr(&v).chars().count());
        prop_assert_eq!(json_str_dumps_len(&s), py_json_dumps(&v).chars().count());
    }

    #[test]
    fn float_lengths_equal_writer_output(f in any_float()) {
        let mut out = String::new();
        write_float_repr(f, &mut out);
        prop_assert_eq!(float_repr_len(f), out.chars().count());
    }

    #[test]
    fn tool_call_lengths_equal_writer_output(calls in any_tool_calls()) {
        let mut repr = String::new();
        write_tool_calls_repr(&calls, &mut repr);
        prop_assert_eq!(tool_calls_repr_len(&calls), repr.chars().count());
        let mut seen = String::new();
        tool_calls_repr_len_visiting(&calls, &mut |c| seen.push(c));
        prop_assert_eq!(seen, non_ascii(&repr));
    }

    /// The whole counting path: an AI message with string content and tool calls costs
    /// LangChain's `ceil((len(content) + len(repr(tool_calls)) + len("assistant")) / 4) + 3`.
    #[test]
    fn ai_message_count_uses_the_repr_length(content in any_string(), calls in any_tool_calls()) {
        let mut repr = String::new();
        if !calls.is_empty() {
            write_tool_calls_repr(&calls, &mut repr);
        }
        let chars = content.chars().count() + repr.chars().count() + "assistant".len();
        let message = Message::ai(content).with_tool_calls(calls);
        prop_assert_eq!(
            ApproximateCounter::langchain().count_message(&message),
            chars.div_ceil(4) as u64 + 3
        );
    }
}
