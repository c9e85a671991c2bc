"""Reads one `keel run` trace back from Arize Phoenix's REST API
(GET /v1/projects/{project}/spans) and checks its tree and attributes.

Usage: check_phoenix.py BASE_URL PROJECT

The run is crates/keel-otel/tests/e2e/{stack.yaml,thread.jsonl,answers.jsonl}: a
compaction whose summary call is its child, a failed model call and its retry, a tool
call, then the answer. Exits non-zero with the reason on the first mismatch.
"""

import json
import sys
import time
import urllib.request

BASE, PROJECT = sys.argv[1], sys.argv[2]
EXPECTED_SPANS = 9


def fetch():
    url = f"{BASE}/v1/projects/{PROJECT}/spans?limit=100&sort=start_time&order=asc"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)["data"]
    except urllib.error.HTTPError as e:
        if e.code == 404:  # the project appears with its first span
            return []
        raise


def fail(message, spans):
    print(f"check_phoenix: {message}", file=sys.stderr)
    for s in spans:
        print(f"  {s['name']} {s['span_kind']} parent={s['parent_id']}", file=sys.stderr)
    sys.exit(1)


# Phoenix writes spans to its database in batches: wait for the whole trace.
deadline = time.monotonic() + 30
spans = fetch()
while len(spans) < EXPECTED_SPANS and time.monotonic() < deadline:
    time.sleep(0.5)
    spans = fetch()
if len(spans) != EXPECTED_SPANS:
    fail(f"expected {EXPECTED_SPANS} spans, Phoenix has {len(spans)}", spans)

roots = [s for s in spans if s["parent_id"] is None]
if len(roots) != 1:
    fail(f"expected one root span, got {len(roots)}", spans)
root = roots[0]
if len({s["context"]["trace_id"] for s in spans}) != 1:
    fail("the spans are not one trace", spans)


def expect(span, key, value):
    got = span["attributes"].get(key)
    if got != value:
        fail(f"{span['name']}: {key} = {got!r}, expected {value!r}", spans)


def children(parent):
    return [s for s in spans if s["parent_id"] == parent["context"]["span_id"]]


expect(root, "gen_ai.operation.name", "invoke_agent")
expect(root, "gen_ai.conversation.id", "keel-run")
if root["span_kind"] != "AGENT" or root["name"] != "invoke_agent keel":
    fail(f"root: {root['name']} {root['span_kind']}", spans)

kids = children(root)
names = [s["name"] for s in kids]
want = [
    "compaction",
    "chat weather-model",
    "compaction",
    "chat weather-model",
    "execute_tool echo",
    "compaction",
    "chat weather-model",
]
if names != want:
    fail(f"children of the run: {names}, expected {want}", spans)

first = kids[0]
for key, value in {
    "keel.compaction.action": "compacted",
    "keel.compaction.reason": "messages",
    "keel.compaction.trigger": 6,
    "keel.compaction.cache": "miss",
    "keel.compaction.messages_before": 7,
    "keel.compaction.kept_messages": 2,
    "keel.compaction.headroom_reachable": True,
    "keel.compaction.summary_source": "model",
}.items():
    expect(first, key, value)
a = first["attributes"]
if not a["keel.compaction.tokens_after"] < a["keel.compaction.tokens_before"]:
    fail("compaction: tokens_after is not below tokens_before", spans)
if first["span_kind"] != "CHAIN":
    fail(f"compaction kind {first['span_kind']}", spans)

summary = children(first)
if [s["name"] for s in summary] != ["chat weather-model"]:
    fail("the summary call is not the compaction's only child", spans)
expect(summary[0], "keel.call.purpose", "summary")
expect(summary[0], "gen_ai.usage.input_tokens", 40)

failed = kids[1]
if failed["status_code"] != "ERROR":
    fail(f"the failed call's status is {failed['status_code']}", spans)
expect(failed, "error.type", "server")

expect(kids[2], "keel.compaction.cache", "hit")
expect(kids[2], "keel.compaction.action", "cache_reused")

call = kids[3]
for key, value in {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "weather-model",
    "gen_ai.usage.input_tokens": 50,
    "gen_ai.usage.output_tokens": 5,
    "gen_ai.response.finish_reasons": ["tool_calls"],
    "keel.call.purpose": "agent",
}.items():
    expect(call, key, value)
if call["span_kind"] != "LLM":
    fail(f"chat kind {call['span_kind']}", spans)
if "gen_ai.input.messages" in call["attributes"]:
    fail("message content was exported without being enabled", spans)

tool = kids[4]
expect(tool, "gen_ai.operation.name", "execute_tool")
expect(tool, "gen_ai.tool.name", "echo")
expect(tool, "gen_ai.tool.call.id", "call_1")
if tool["span_kind"] != "TOOL":
    fail(f"tool kind {tool['span_kind']}", spans)

expect(kids[6], "gen_ai.response.finish_reasons", ["stop"])
expect(kids[6], "gen_ai.usage.output_tokens", 7)

events = [e["attributes"].get("counter") for e in root["events"]]
if "redactions" not in events or "retries" not in events:
    fail(f"the run's span events: {events}", spans)

print(f"check_phoenix: {len(spans)} spans in one trace, tree and attributes as expected")
