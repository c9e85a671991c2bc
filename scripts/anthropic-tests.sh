#!/usr/bin/env bash
# Keel's Anthropic adapter (crates/keel-anthropic) against a real implementation of the
# Messages API: LiteLLM's proxy (PyPI `litellm[proxy]`) serving /v1/messages in front of
# an OpenAI-compatible backend, here a recording stub
# (crates/keel-testkit/anthropic/openai_stub.py). In order:
#
#   1. every request shape the adapter builds (crates/keel-anthropic/tests/request_shapes.rs)
#      is checked against the official `anthropic` SDK's MessageCreateParams
#      (scripts/anthropic/validate_requests.py);
#   2. `keel run` without --script answers a turn with the stack file's
#      `model: {provider: anthropic, ...}`: a tool call, its result, the streamed answer,
#      and a summary call (structured output as a forced tool call) when the stack's
#      summarization folds the thread;
#   3. `keel serve` answers a conversation with a tool call, streamed, on the same file
#      as keel.yaml; the same file with `provider: openai` (one key changed) answers too,
#      through LiteLLM's chat-completions endpoint;
#   4. every request body Keel sent to /v1/messages in 2 and 3 (recorded by a
#      pass-through, crates/keel-testkit/anthropic/recording_proxy.py) is checked
#      against the SDK's types as in 1.
#
# Everything is installed idempotently under target/anthropic-tests/ (a Python venv);
# servers started here are stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="$ROOT/target/anthropic-tests"
mkdir -p "$WORK"

LITELLM_VERSION="1.108.7"
ANTHROPIC_SDK_VERSION="2.17.0"

PIDS=()
cleanup() {
    for pid in "${PIDS[@]:-}"; do
        [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

# --- install ---
venv="$WORK/venv"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "
import importlib.metadata as m
assert m.version('litellm') == '$LITELLM_VERSION' and m.version('anthropic') == '$ANTHROPIC_SDK_VERSION'
" 2>/dev/null; then
    "$venv/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION" "anthropic==$ANTHROPIC_SDK_VERSION"
fi
py="$venv/bin/python"

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # URL LOG
    for _ in $(seq 1 240); do
        curl -s -o /dev/null "$1" && return 0
        sleep 0.5
    done
    echo "not up: $1" >&2
    cat "$2" >&2
    return 1
}

# --- 1. the adapter's request shapes against the SDK's types ---
echo "-- request shapes"
bodies="$WORK/shapes.jsonl"
KEEL_ANTHROPIC_BODIES="$bodies" cargo test -q -p keel-anthropic --test request_shapes
"$py" scripts/anthropic/validate_requests.py "$bodies"

# --- servers: stub <- LiteLLM <- recording pass-through ---
stub_port="$(free_port)"
litellm_port="$(free_port)"
proxy_port="$(free_port)"
stub_record="$WORK/stub-requests.jsonl"
sent="$WORK/sent-requests.jsonl"
: >"$stub_record"
: >"$sent"
"$py" crates/keel-testkit/anthropic/openai_stub.py "$stub_port" "$stub_record" >"$WORK/stub.log" 2>&1 &
PIDS+=($!)
cat >"$WORK/litellm.yaml" <<YAML
model_list:
  - model_name: claude-sonnet-4-5
    litellm_params:
      # hosted_vllm/ is called through chat completions (openai/ would use the
      # Responses API).
      model: hosted_vllm/stub-model
      api_base: http://127.0.0.1:$stub_port/v1
      api_key: none
general_settings:
  # The proxy refuses to start without one.
  master_key: sk-keel-test
YAML
LITELLM_LOCAL_MODEL_COST_MAP=True "$venv/bin/litellm" --config "$WORK/litellm.yaml" \
    --host 127.0.0.1 --port "$litellm_port" >"$WORK/litellm.log" 2>&1 &
PIDS+=($!)
"$py" crates/keel-testkit/anthropic/recording_proxy.py "$proxy_port" \
    "http://127.0.0.1:$litellm_port" "$sent" >"$WORK/proxy.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$stub_port/v1/models" "$WORK/stub.log"
wait_http "http://127.0.0.1:$litellm_port/health/liveliness" "$WORK/litellm.log"
wait_http "http://127.0.0.1:$proxy_port/health/liveliness" "$WORK/proxy.log"

cargo build -q -p keel-cli
keel="$ROOT/target/debug/keel"
[[ -n "${CARGO_TARGET_DIR:-}" ]] && keel="$CARGO_TARGET_DIR/debug/keel"
export ANTHROPIC_API_KEY=sk-keel-test OPENAI_API_KEY=sk-keel-test

# --- 2. keel run ---
echo "-- keel run (provider: anthropic, through LiteLLM's /v1/messages)"
cat >"$WORK/stack.yaml" <<YAML
model: {provider: anthropic, model: claude-sonnet-4-5, base_url: "http://127.0.0.1:$proxy_port"}
system_prompt: You are the status assistant. Use the echo tool to check.
middleware:
  - summarization:
      enabled: true
      trigger: [{type: messages, value: 6}]
      keep: {type: messages, value: 2}
YAML
cat >"$WORK/thread.jsonl" <<'JSONL'
{"role": "user", "content": "Hi, I look after the EU cluster."}
{"role": "assistant", "content": "Hello! How can I help with the EU cluster?"}
{"role": "user", "content": "Project PRJ-123 had an outage yesterday."}
{"role": "assistant", "content": "Noted: PRJ-123, outage yesterday."}
{"role": "user", "content": "What is the status now?"}
JSONL
"$keel" run --config "$WORK/stack.yaml" --transcript "$WORK/thread.jsonl" --json >"$WORK/run.json"
"$py" - "$WORK/run.json" "$stub_record" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
msgs = run["messages"]
roles = [m["role"] for m in msgs]
assert any(m["role"] == "assistant" and m.get("tool_calls") for m in msgs), roles
tool = [m for m in msgs if m["role"] == "tool"]
assert tool and "status" in tool[0]["content"], tool
last = msgs[-1]
assert last["role"] == "assistant" and last["content"].startswith("All green."), last
assert last["response_metadata"]["provider"] == "anthropic", last
internal = [r for r in run["requests"] if r.get("internal")]
assert internal, "no summary call was made"
stub = [json.loads(l) for l in open(sys.argv[2])]
forced = [b for b in stub if isinstance(b.get("tool_choice"), dict)]
assert forced, "the summary call did not reach the backend as a forced tool call"
summaries = [m for r in run["requests"] for m in r["messages"] if m.get("name") == "summary"]
assert summaries and "the echo tool said all green" in summaries[-1]["content"], summaries
events = [e["payload"].get("type") for e in run["events"]]
assert "context_compacted" in events, events
print(f"keel run: {len(msgs)} messages, {len(run['requests'])} model calls ({len(internal)} summary), answer {last['content']!r}")
PY

# --- 3. keel serve, then the same file with provider: openai ---
serve_once() { # CONFIG LABEL
    local port db
    port="$(free_port)"
    db="$WORK/serve-$2.db"
    rm -f "$db"
    "$keel" serve --config "$1" --port "$port" --database "sqlite://$db?mode=rwc" >"$WORK/serve-$2.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    wait_http "http://127.0.0.1:$port/ok" "$WORK/serve-$2.log"
    "$py" - "http://127.0.0.1:$port" "$2" <<'PY'
import json, sys, urllib.request
base, label = sys.argv[1], sys.argv[2]
def post(path, body, raw=False):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode() if raw else json.load(r)
thread = post("/threads", {})["thread_id"]
text = post(f"/threads/{thread}/runs/stream", {
    "assistant_id": "agent",
    "input": {"messages": [{"role": "user", "content": "What is the status?"}]},
    "stream_mode": ["messages-tuple", "values"],
}, raw=True)
events = [l[len("event: "):] for l in text.splitlines() if l.startswith("event: ")]
assert any(e.startswith("messages") for e in events), events
values = [json.loads(l[len("data: "):]) for l, n in zip(text.splitlines(), text.splitlines()[1:] + [""])
          if l.startswith("data: ")]
final = [v for v in values if isinstance(v, dict) and "messages" in v][-1]["messages"]
types = [m["type"] for m in final]
assert "tool" in types, types
answer = final[-1]
assert answer["type"] == "ai" and answer["content"].startswith("All green."), answer
print(f"keel serve ({label}): {types}, answer {answer['content']!r}")
PY
    kill "$pid" 2>/dev/null || true
}
cat >"$WORK/keel-anthropic.yaml" <<YAML
name: agent
model: {provider: anthropic, model: claude-sonnet-4-5, base_url: "http://127.0.0.1:$proxy_port/v1"}
system_prompt: You are the status assistant. Use the echo tool to check.
tools: [echo]
YAML
echo "-- keel serve (provider: anthropic)"
serve_once "$WORK/keel-anthropic.yaml" anthropic
sed 's/provider: anthropic/provider: openai/' "$WORK/keel-anthropic.yaml" >"$WORK/keel-openai.yaml"
echo "-- keel serve (the same file, provider: openai)"
serve_once "$WORK/keel-openai.yaml" openai

# --- 4. every body Keel sent, against the SDK's types ---
echo "-- request bodies sent to /v1/messages"
grep -q '"anthropic-version": "2023-06-01"' "$sent"
"$py" scripts/anthropic/validate_requests.py "$sent"
