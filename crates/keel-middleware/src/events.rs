//! Counters: every built-in reports what it did as a `custom` stream event and as a
//! `tracing` event with the same fields, so a UI and a metrics exporter see the same
//! numbers.
//!
//! Each payload is a JSON object with `"type": "middleware_counter"`, the middleware's
//! `name`, the `counter` (`model_calls`, `tool_calls`, `retries`, `fallbacks`,
//! `cleared_tool_results`, `redactions`, `blocked_tool_calls`, `todos`, ...), its `value`
//! (the increment, or the running total for `*_total` counters), and counter-specific
//! fields. The tracing event has target `keel_middleware` and the same fields.

use keel_core::stream::StreamWriter;
use keel_core::telemetry::{self, Counter};
use serde_json::{Map, Value, json};

/// The `type` of every counter payload.
pub const COUNTER_EVENT: &str = "middleware_counter";

/// Reports one counter on the custom stream and through `tracing`.
pub fn counter(writer: &StreamWriter, middleware: &str, counter: &str, value: u64, extra: Value) {
    // The ones with an OpenTelemetry counter of their own (`docs/operations.md`).
    match counter {
        "retries" => telemetry::count(Counter::Retries { middleware }, value),
        "redactions" => telemetry::count(Counter::Redactions { middleware }, value),
        _ => {}
    }
    tracing::info!(
        target: "keel_middleware",
        middleware,
        counter,
        value,
        extra = %extra,
        "middleware counter"
    );
    if !writer.is_connected() {
        return;
    }
    let mut payload = Map::new();
    payload.insert("type".into(), json!(COUNTER_EVENT));
    payload.insert("name".into(), json!(middleware));
    payload.insert("counter".into(), json!(counter));
    payload.insert("value".into(), json!(value));
    if let Value::Object(fields) = extra {
        payload.extend(fields);
    }
    writer.custom(Value::Object(payload));
}
