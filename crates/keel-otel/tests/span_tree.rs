//! The span tree, the GenAI attributes and the counters of one run.

mod common;

use common::{Exported, attr, children, int, run_once, text};
use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry::{Array, Value};
use opentelemetry_sdk::trace::SpanData;

#[test]
fn one_run_exports_the_genai_span_tree_and_counters() {
    let Exported { spans, counters } = run_once();

    let roots: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.parent_span_id == SpanId::INVALID)
        .collect();
    assert_eq!(roots.len(), 1, "one trace, rooted at the run: {spans:#?}");
    let root = roots[0];
    assert_eq!(root.name, "invoke_agent keel");
    assert_eq!(text(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(text(root, "gen_ai.conversation.id"), "thread-7");
    assert_eq!(text(root, "gen_ai.request.model"), "weather-model");
    assert_eq!(text(root, "openinference.span.kind"), "AGENT");
    assert_eq!(root.status, Status::Unset);

    // Under the run, in order: compaction (summary call inside), the failed call, the
    // retry's compaction (the cached summary), the tool-calling answer, the tool, then
    // a compaction and the final answer.
    let kids = children(&spans, root);
    let names: Vec<&str> = kids.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "compaction",
            "chat weather-model",
            "compaction",
            "chat weather-model",
            "execute_tool weather",
            "compaction",
            "chat weather-model",
        ],
        "{spans:#?}"
    );

    let first = kids[0];
    assert_eq!(text(first, "keel.compaction.action"), "compacted");
    assert_eq!(text(first, "keel.compaction.reason"), "messages");
    assert_eq!(int(first, "keel.compaction.trigger"), 6);
    assert_eq!(text(first, "keel.compaction.cache"), "miss");
    assert_eq!(int(first, "keel.compaction.messages_before"), 7);
    assert_eq!(int(first, "keel.compaction.kept_messages"), 2);
    assert!(
        int(first, "keel.compaction.tokens_after") < int(first, "keel.compaction.tokens_before")
    );
    assert_eq!(
        attr(first, "keel.compaction.headroom_reachable"),
        Some(&Value::Bool(true))
    );
    assert_eq!(text(first, "openinference.span.kind"), "CHAIN");
    let summary = children(&spans, first);
    assert_eq!(
        summary.len(),
        1,
        "the summary call is inside the compaction"
    );
    assert_eq!(summary[0].name, "chat weather-model");
    assert_eq!(text(summary[0], "keel.call.purpose"), "summary");
    assert_eq!(int(summary[0], "gen_ai.usage.input_tokens"), 40);

    let failed = kids[1];
    assert_eq!(failed.span_kind, SpanKind::Client);
    assert_eq!(text(failed, "error.type"), "server");
    assert!(
        matches!(failed.status, Status::Error { .. }),
        "{:?}",
        failed.status
    );

    assert_eq!(text(kids[2], "keel.compaction.action"), "cache_reused");
    assert_eq!(text(kids[2], "keel.compaction.cache"), "hit");

    let call = kids[3];
    assert_eq!(text(call, "gen_ai.operation.name"), "chat");
    assert_eq!(text(call, "gen_ai.request.model"), "weather-model");
    assert_eq!(text(call, "gen_ai.provider.name"), "scripted");
    assert_eq!(text(call, "keel.call.purpose"), "agent");
    assert_eq!(int(call, "gen_ai.usage.input_tokens"), 50);
    assert_eq!(int(call, "gen_ai.usage.output_tokens"), 5);
    assert_eq!(
        attr(call, "gen_ai.response.finish_reasons"),
        Some(&Value::Array(Array::String(vec!["tool_calls".into()])))
    );
    assert_eq!(int(call, "llm.token_count.total"), 55);
    assert!(
        attr(call, "gen_ai.input.messages").is_none() && attr(call, "input.value").is_none(),
        "no message content unless it is enabled"
    );

    let tool = kids[4];
    assert_eq!(text(tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(text(tool, "gen_ai.tool.name"), "weather");
    assert_eq!(text(tool, "gen_ai.tool.call.id"), "call_1");
    assert_eq!(text(tool, "openinference.span.kind"), "TOOL");
    assert!(attr(tool, "gen_ai.tool.call.arguments").is_none());

    let last = kids[6];
    assert_eq!(
        attr(last, "gen_ai.response.finish_reasons"),
        Some(&Value::Array(Array::String(vec!["stop".into()])))
    );

    // Agent calls: 3 (one failed), summary calls: 1.
    assert_eq!(counters.get("keel.model.calls"), Some(&4), "{counters:?}");
    assert_eq!(
        counters.get("keel.model.tokens"),
        Some(&(40 + 8 + 50 + 5 + 60 + 7))
    );
    assert_eq!(counters.get("keel.retries"), Some(&1));
    assert_eq!(counters.get("keel.pii.redactions"), Some(&1));
    assert!(
        counters
            .get("keel.compaction.cache_hits")
            .is_some_and(|n| *n >= 1)
    );
}
