//! Message content on spans, once enabled (its own test binary: the switch is
//! process-wide).

mod common;

use common::{Exported, attr, run_once, text};

#[test]
fn message_content_is_recorded_only_when_enabled() {
    keel_core::telemetry::set_capture_content(true);
    let Exported { spans, .. } = run_once();
    keel_core::telemetry::set_capture_content(false);
    let call = spans
        .iter()
        .find(|s| {
            attr(s, "gen_ai.tool.name").is_none()
                && attr(s, "gen_ai.output.messages").is_some_and(|v| v.as_str().contains("call_1"))
        })
        .expect("the tool-calling answer's span");
    let input = text(call, "gen_ai.input.messages");
    assert!(
        input.contains("[REDACTED_EMAIL]"),
        "the request as sent: {input}"
    );
    assert!(!input.contains("ada@example.com"), "{input}");
    assert!(text(call, "gen_ai.system_instructions").contains("weather questions"));
    assert_eq!(text(call, "input.value"), input);
    let tool = spans
        .iter()
        .find(|s| attr(s, "gen_ai.tool.name").is_some())
        .unwrap();
    assert_eq!(
        text(tool, "gen_ai.tool.call.arguments"),
        r#"{"city":"Paris"}"#
    );
    assert_eq!(text(tool, "gen_ai.tool.call.result"), "sunny, 21 C");
}
