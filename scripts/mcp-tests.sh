#!/usr/bin/env bash
# Tests of Keel's MCP support with real servers and clients, on loopback:
#
#   - keel-mcp's integration tests (crates/keel-mcp/tests/real_servers.rs) against
#     `mcp-server-time` (PyPI) over stdio and `@modelcontextprotocol/server-everything`
#     (npm) over stdio and streamable HTTP, plus a server on the official Python SDK
#     whose tool list changes (crates/keel-testkit/mcp/list_changed_server.py);
#   - `keel run` on examples/keel-mcp.yaml: a scripted turn calls MCP tools through the
#     middleware stack (PII redaction of a tool result);
#   - `keel serve` on the same file with API keys: its /mcp endpoint with the official
#     TypeScript SDK client (crates/keel-server/tests/mcp_sdk_test.mjs) and with
#     keel-mcp itself (a bearer token from bearer_token_env).
#
# Everything is installed idempotently under target/mcp-tests/ (a Python venv,
# node_modules), with apt-get only when node or npm is missing. Servers started here
# are stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="$ROOT/target/mcp-tests"
mkdir -p "$WORK"

TIME_SERVER_VERSION="2026.10.19"
EVERYTHING_VERSION="2026.8.31"
SDK_JS_VERSION="1.32.2"

PIDS=()
cleanup() {
    for pid in "${PIDS[@]:-}"; do
        [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

# --- install ---
venv="$WORK/venv"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('mcp-server-time') == '$TIME_SERVER_VERSION'" 2>/dev/null; then
    "$venv/bin/pip" install -q "mcp-server-time==$TIME_SERVER_VERSION"
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
js="$WORK/js"
mkdir -p "$js"
[[ -f "$js/package.json" ]] || echo '{"private": true, "type": "module"}' >"$js/package.json"
installed() { grep -q "\"version\": \"$2\"" "$js/node_modules/$1/package.json" 2>/dev/null; }
if ! installed @modelcontextprotocol/server-everything "$EVERYTHING_VERSION" ||
    ! installed @modelcontextprotocol/sdk "$SDK_JS_VERSION"; then
    (cd "$js" && npm install --silent --no-audit --no-fund \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
        "@modelcontextprotocol/sdk@$SDK_JS_VERSION" >/dev/null)
fi
# The example names the servers' commands; they are found on PATH.
export PATH="$venv/bin:$js/node_modules/.bin:$PATH"
export KEEL_MCP_TIME="$venv/bin/mcp-server-time"
export KEEL_MCP_EVERYTHING="$js/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
export KEEL_MCP_PYTHON="$venv/bin/python"

cargo build -q -p keel-cli

# --- keel run: a scripted turn calls MCP tools through the stack ---
echo "== keel run examples/keel-mcp.yaml"
"$ROOT/target/debug/keel" run --config examples/keel-mcp.yaml \
    --transcript examples/mcp/thread.jsonl --script examples/mcp/answers.jsonl --json \
    >"$WORK/run.json"
"$venv/bin/python" - "$WORK/run.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
tools = {m["tool_call_id"]: m for m in doc["messages"] if m["role"] == "tool"}
clock = json.loads(tools["call_1"]["content"])
assert clock["timezone"] == "Asia/Tokyo", clock
# The everything server echoed the address; the PII middleware redacted the result.
assert tools["call_2"]["content"] == "Echo: your address is [REDACTED_EMAIL]", tools["call_2"]
offered = [t["name"] for t in doc["requests"][0]["tools"]]
for name in ["time_get_current_time", "everything_echo", "everything_get-sum"]:
    assert name in offered, offered
print("keel run: MCP tools called through the middleware stack")
PY

# --- keel serve: the agent with MCP tools, and its /mcp endpoint ---
echo "== keel serve examples/keel-mcp.yaml (/mcp)"
log="$WORK/serve.log"
rm -f "$WORK/serve.db"*
"$ROOT/target/debug/keel" serve --config examples/keel-mcp.yaml --port 0 \
    --database "sqlite://$WORK/serve.db" --api-keys "alice-key-1=alice,bob-key-22=bob" \
    >"$log" 2>&1 &
PIDS+=("$!")
URL=""
for _ in $(seq 1 300); do
    URL="$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1 || true)"
    [[ -n "$URL" ]] && break
    sleep 0.1
done
if [[ -z "$URL" ]]; then
    echo "mcp-tests: keel serve did not start:" >&2
    cat "$log" >&2
    exit 1
fi
cp crates/keel-server/tests/mcp_sdk_test.mjs "$js/"
node "$js/mcp_sdk_test.mjs" "$URL" alice-key-1

# --- keel-mcp's integration tests (every variable set: none may skip) ---
echo "== keel-mcp against real servers"
export KEEL_MCP_SERVE_URL="$URL" KEEL_MCP_SERVE_TOKEN="bob-key-22"
cargo test -q -p keel-mcp --test real_servers -- --nocapture 2>&1 | tee "$WORK/tests.log"
if grep -q "^skipped:" "$WORK/tests.log"; then
    echo "mcp-tests: a test was skipped although its variable is set" >&2
    exit 1
fi
