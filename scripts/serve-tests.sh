#!/usr/bin/env bash
# Tests of `keel serve` with real clients, against servers on loopback.
#
#   scripts/serve-tests.sh python     # the official Python client, langgraph-sdk (PyPI)
#   scripts/serve-tests.sh js         # the official JS client, @langchain/langgraph-sdk (npm)
#   scripts/serve-tests.sh browser    # the chat page in headless Chromium; screenshot under target/
#   scripts/serve-tests.sh load [N]   # N concurrent streaming runs (default 200)
#   scripts/serve-tests.sh postgres   # two server processes on one PostgreSQL
#   scripts/serve-tests.sh adversarial [N]  # tenant matrix, bad inputs (N rounds), kill -9
#   scripts/serve-tests.sh usestream  # a React page on the SDK's useStream hook in headless Chromium
#   scripts/serve-tests.sh diff [--only a,b]  # langgraph-api (PyPI) as the oracle: same
#                                     # scenarios through both SDKs, compared
#   scripts/serve-tests.sh speed [N]  # keel serve and langgraph dev side by side: N concurrent
#                                     # runs each, then 30 turns on one thread (PROFILE=release)
#   scripts/serve-tests.sh all        # python, js, browser, load 50
#
# Everything a test needs is installed by this script, idempotently, under
# target/serve-tests/ (a Python venv, node_modules) or with apt-get (nodejs, npm,
# chromium) when missing. Servers are the scripted one (examples/keel.yaml's middleware
# around keel-testkit's ScriptedModel: crates/keel-server/examples/scripted_server.rs)
# and `keel serve` itself; each is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="$ROOT/target/serve-tests"
mkdir -p "$WORK"

SDK_PY_VERSION="0.4.14"
SDK_JS_VERSION="1.15.0"
PLAYWRIGHT_VERSION="1.65.1"
# The oracle of the differential suite: the real Agent Server (Elastic-2.0, installed from
# PyPI at test time, never vendored) and the LangChain its graph is built with.
# The useStream page: React and esbuild, from npm.
REACT_VERSION="19.3.1"
ESBUILD_VERSION="0.28.2"
REACT_V2_VERSION="1.1.0"
LANGCHAIN_CORE_JS_VERSION="1.4.0"
LANGGRAPH_CLI_VERSION="0.4.40"
LANGGRAPH_API_VERSION="0.16.7"
LANGCHAIN_VERSION="1.5.2"

PIDS=()
cleanup() {
    for pid in "${PIDS[@]:-}"; do
        [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

build() {
    # SERVE_TESTS_NO_BUILD=1 runs the binaries already under target/debug/ as they are.
    [[ "${SERVE_TESTS_NO_BUILD:-}" == 1 ]] && return 0
    # With PostgreSQL support, as keel-cli builds keel-server: one build serves all tests.
    cargo build -q -p keel-server --features postgres --example scripted_server
    cargo build -q -p keel-cli
}

# start_server LOGNAME CMD ARGS... — starts a server printing "listening on http://ADDR",
# sets URL to that address.
start_server() {
    local name="$1"
    shift
    local log="$WORK/$name.log"
    : >"$log"
    "$@" >"$log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 1 200); do
        if URL="$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1)" && [[ -n "$URL" ]]; then
            return 0
        fi
        sleep 0.1
    done
    echo "serve-tests: $name did not start:" >&2
    cat "$log" >&2
    return 1
}

python_env() {
    local venv="$WORK/venv"
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c "import langgraph_sdk, httpx; assert langgraph_sdk.__version__ == '$SDK_PY_VERSION'" 2>/dev/null; then
        "$venv/bin/pip" install -q "langgraph-sdk==$SDK_PY_VERSION" httpx
    fi
    PY="$venv/bin/python"
}

node_env() {
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
    fi
    local dir="$WORK/js"
    mkdir -p "$dir"
    if [[ ! -f "$dir/package.json" ]]; then
        echo '{"private": true, "type": "module"}' >"$dir/package.json"
    fi
    if [[ ! -f "$dir/node_modules/@langchain/langgraph-sdk/package.json" ]] ||
        ! grep -q "\"version\": \"$SDK_JS_VERSION\"" "$dir/node_modules/@langchain/langgraph-sdk/package.json"; then
        (cd "$dir" && npm install --silent --no-audit --no-fund "@langchain/langgraph-sdk@$SDK_JS_VERSION" >/dev/null)
    fi
}

chromium_env() {
    if ! command -v chromium >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    fi
    node_env
    local dir="$WORK/js"
    if [[ ! -f "$dir/node_modules/playwright-core/package.json" ]] ||
        ! grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$dir/node_modules/playwright-core/package.json"; then
        (cd "$dir" && npm install --silent --no-audit --no-fund "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null)
    fi
}

run_browser() {
    build
    chromium_env
    rm -f "$WORK/browser.db"*
    # The page's toast is for a compaction the user waits for; examples/keel.yaml writes
    # summaries ahead (precompute_at), which the user never waits for, so this server
    # compacts on crossing to show the toast.
    sed 's/^\( *\)precompute_at: .*/\1precompute_at: null/' examples/keel.yaml >"$WORK/keel-blocking.yaml"
    grep -q "precompute_at: null" "$WORK/keel-blocking.yaml"
    start_server browser "$ROOT/target/debug/keel" serve --config "$WORK/keel-blocking.yaml" --port 0 \
        --database "sqlite://$WORK/browser.db"
    local plain="$URL"
    rm -f "$WORK/browser-review.db"*
    start_server browser-review "$ROOT/target/debug/keel" serve --config examples/keel-review.yaml \
        --port 0 --database "sqlite://$WORK/browser-review.db"
    cp crates/keel-server/tests/browser/chat_page_test.mjs "$WORK/js/"
    CHROMIUM="$(command -v chromium)" node "$WORK/js/chat_page_test.mjs" "$plain" "$WORK" "$URL"
    echo "screenshots: $WORK/chat-page.png, $WORK/chat-page-toast.png, $WORK/chat-page-review.png"
}

# The load test: N concurrent streaming runs against one scripted server. CI runs 50
# on a debug build; docs/benchmarks.md has 200 on a release build (PROFILE=release).
# PACE_MS sets the model's time per word (default 5).
run_load() {
    local runs="${1:-200}" profile="${PROFILE:-debug}"
    local flags=()
    [[ "$profile" == release ]] && flags=(--release)
    cargo build -q "${flags[@]}" -p keel-server --features postgres --example scripted_server --example load
    local pace="${PACE_MS:-5}"
    start_server load-server "$ROOT/target/$profile/examples/scripted_server" --port 0 \
        --pace-ms "$pace"
    local pid="${PIDS[-1]}"
    "$ROOT/target/$profile/examples/load" --url "$URL" --runs "$runs" --server-pid "$pid" \
        --pace-ms "$pace"
}

# Two server processes on one PostgreSQL (scripts/postgres.sh provisions a throwaway
# one unless KEEL_TEST_POSTGRES_URL names one).
run_postgres() {
    build
    python_env
    # shellcheck source=postgres.sh
    source "$ROOT/scripts/postgres.sh"
    start_server pg-a "$ROOT/target/debug/examples/scripted_server" --port 0 --pace-ms 10 \
        --database "$KEEL_TEST_POSTGRES_URL"
    local a="$URL"
    start_server pg-b "$ROOT/target/debug/examples/scripted_server" --port 0 --pace-ms 10 \
        --database "$KEEL_TEST_POSTGRES_URL"
    "$PY" crates/keel-server/tests/sdk/two_process_test.py "$a" "$URL"
    # Owners and deletion across the two processes: a deleted thread leaves none of its
    # text in any table, and its id re-created by anyone starts empty.
    start_server pg-keys-a "$ROOT/target/debug/examples/scripted_server" --port 0 \
        --database "$KEEL_TEST_POSTGRES_URL" --api-keys "alice-key-1=alice,bob-key-22=bob"
    a="$URL"
    start_server pg-keys-b "$ROOT/target/debug/examples/scripted_server" --port 0 \
        --database "$KEEL_TEST_POSTGRES_URL" --api-keys "alice-key-1=alice,bob-key-22=bob"
    "$PY" crates/keel-server/tests/sdk/tenancy_test.py "$a" "$URL"
    local left
    left="$(pg_dump --data-only "$KEEL_TEST_POSTGRES_URL" | grep -c TENANT-SECRET-5521 || true)"
    if [[ "$left" != 0 ]]; then
        echo "serve-tests: $left database rows still hold a deleted thread's text" >&2
        pg_dump --data-only "$KEEL_TEST_POSTGRES_URL" | grep TENANT-SECRET-5521 | cut -c1-200 | head >&2
        return 1
    fi
    echo "ok   no row of the database holds the deleted thread's text (pg_dump)"
}

# The useStream page's packages, in their own folder (React is a peer of the SDK's
# react entry point); reinstalled when a pinned version changes.
ui_env() {
    if ! command -v chromium >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    fi
    node_env
    local dir="$WORK/ui"
    local want="react@$REACT_VERSION react-dom@$REACT_VERSION esbuild@$ESBUILD_VERSION @langchain/langgraph-sdk@$SDK_JS_VERSION playwright-core@$PLAYWRIGHT_VERSION @langchain/react@$REACT_V2_VERSION @langchain/core@$LANGCHAIN_CORE_JS_VERSION"
    mkdir -p "$dir"
    if [[ "$(cat "$dir/installed" 2>/dev/null)" != "$want" ]]; then
        echo '{"private": true, "type": "module"}' >"$dir/package.json"
        # shellcheck disable=SC2086
        (cd "$dir" && npm install --silent --no-audit --no-fund $want >/dev/null)
        echo "$want" >"$dir/installed"
    fi
}

# The useStream page (crates/keel-server/tests/browser/usestream/), bundled with esbuild
# and driven in headless Chromium against a scripted server and a reviewing one.
# Regenerate and edit fork the thread; their answers say how many messages the model got.
run_usestream() {
    build
    ui_env
    local dir="$WORK/ui"
    cp crates/keel-server/tests/browser/usestream/app.jsx \
        crates/keel-server/tests/browser/usestream/usestream_test.mjs "$dir/"
    (cd "$dir" && node_modules/.bin/esbuild app.jsx --bundle --format=esm --jsx=automatic \
        --define:process.env.NODE_ENV='"production"' --outfile=app.js --log-level=warning)
    start_server usestream "$ROOT/target/debug/examples/scripted_server" --port 0 --pace-ms 5
    local plain="$URL"
    start_server usestream-review "$ROOT/target/debug/examples/scripted_server" --port 0 \
        --pace-ms 5 --config examples/keel-review.yaml
    CHROMIUM="$(command -v chromium)" node "$dir/usestream_test.mjs" "$plain" "$URL" "$dir"
    echo "screenshot: $dir/usestream.png"
    # @langchain/react's useStream, on the thread-centric protocol.
    local v2="$WORK/ui-react-v2"
    mkdir -p "$v2"
    cp crates/keel-server/tests/browser/react-v2/app.jsx \
        crates/keel-server/tests/browser/react-v2/react_v2_test.mjs "$v2/"
    ln -sfn "$dir/node_modules" "$v2/node_modules"
    (cd "$v2" && node_modules/.bin/esbuild app.jsx --bundle --format=esm --jsx=automatic \
        --define:process.env.NODE_ENV='"production"' --outfile=app.js --log-level=warning)
    CHROMIUM="$(command -v chromium)" node "$v2/react_v2_test.mjs" "$plain" "$v2"
    echo "screenshot: $v2/react-v2.png"
}

oracle_env() {
    local venv="$WORK/oracle-venv"
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv"
    fi
    if ! "$venv/bin/python" - "$LANGGRAPH_API_VERSION" "$LANGCHAIN_VERSION" "$SDK_PY_VERSION" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
assert [version(p) for p in ("langgraph-api", "langchain", "langgraph-sdk")] == sys.argv[1:]
PY
    then
        "$venv/bin/pip" install -q "langgraph-cli[inmem]==$LANGGRAPH_CLI_VERSION" \
            "langgraph-api==$LANGGRAPH_API_VERSION" "langchain==$LANGCHAIN_VERSION" \
            "langgraph-sdk==$SDK_PY_VERSION" httpx
    fi
    ORACLE_PY="$venv/bin/python"
}

# start_oracle NAME [ENV=VALUE...] — langgraph-api's dev server (in memory, offline: no
# browser, reload, analytics or tracing) on crates/keel-server/tests/sdk/oracle/, copied
# under target/ so its persistence folder starts empty; sets URL. It moves off a busy
# port without failing, so the port is read back from its log.
start_oracle() {
    local name="$1"
    shift
    local dir="$WORK/$name" log="$WORK/$name.log" port
    rm -rf "$dir"
    cp -r crates/keel-server/tests/sdk/oracle "$dir"
    port="$("$ORACLE_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    : >"$log"
    (cd "$dir" && exec env "$@" LANGGRAPH_CLI_NO_ANALYTICS=1 LANGSMITH_TRACING=false \
        LANGCHAIN_TRACING_V2=false LANGSMITH_API_KEY= \
        "$WORK/oracle-venv/bin/langgraph" dev --no-browser --no-reload --port "$port" \
        --config langgraph.json ${ORACLE_DEV_ARGS:-}) >"$log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 1 300); do
        URL="$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -o 'API: http://127.0.0.1:[0-9]*' | head -1 | cut -c6- || true)"
        if [[ -n "$URL" ]] && curl -sf "$URL/ok" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    echo "serve-tests: $name did not start:" >&2
    cat "$log" >&2
    return 1
}

# Keel and langgraph-api side by side, in one run: N concurrent streaming runs against
# each (throughput, time to first event, CPU per run, memory), then 30 turns one after
# the other on one thread of each (bytes, time and CPU per turn as the thread grows).
run_speed() {
    local runs="${1:-200}" profile="${PROFILE:-debug}"
    local flags=()
    [[ "$profile" == release ]] && flags=(--release)
    cargo build -q "${flags[@]}" -p keel-server --features postgres --example scripted_server --example load
    oracle_env
    local pace="${PACE_MS:-5}" load="$ROOT/target/$profile/examples/load"
    start_server speed-keel "$ROOT/target/$profile/examples/scripted_server" --port 0 --pace-ms "$pace"
    local keel="$URL" keel_pid="${PIDS[-1]}"
    # As many runs at once as Keel takes (langgraph dev runs 10 by default).
    ORACLE_DEV_ARGS="--n-jobs-per-worker $runs" start_oracle oracle-speed ORACLE_PACE_MS="$pace"
    local oracle="$URL" oracle_pid="${PIDS[-1]}"
    echo "== $runs concurrent streaming runs: keel serve ($profile)"
    "$load" --url "$keel" --runs "$runs" --server-pid "$keel_pid" --pace-ms "$pace" --no-baseline
    echo "== $runs concurrent streaming runs: langgraph dev"
    "$load" --url "$oracle" --runs "$runs" --server-pid "$oracle_pid" --pace-ms "$pace" --no-baseline
    echo "== 30 turns on one thread: keel serve"
    "$load" --url "$keel" --turns 30 --server-pid "$keel_pid"
    echo "== 30 turns on one thread: langgraph dev"
    "$load" --url "$oracle" --turns 30 --server-pid "$oracle_pid"
}

# The differential suite: the scenarios of crates/keel-server/tests/sdk/diff_test.py
# (through langgraph-sdk) and then diff_test.mjs (through @langchain/langgraph-sdk)
# against langgraph-api (the oracle) and the scripted server, compared field by field;
# known differences are in crates/keel-server/tests/sdk/oracle/allowlist.json, shared by
# both halves. `diff --only a,b` runs those scenarios in each half that has them.
run_diff() {
    build
    oracle_env
    local pace=20
    start_oracle oracle-plain ORACLE_PACE_MS="$pace"
    local oracle="$URL"
    start_oracle oracle-review ORACLE_PACE_MS="$pace" ORACLE_AGENT=review
    local oracle_review="$URL"
    start_server diff-keel "$ROOT/target/debug/examples/scripted_server" --port 0 --pace-ms "$pace"
    local keel="$URL"
    start_server diff-keel-review "$ROOT/target/debug/examples/scripted_server" --port 0 \
        --pace-ms "$pace" --config examples/keel-review.yaml
    local keel_review="$URL"
    # `--only a,b` goes to both halves; a `js-` scenario exists only in the JS half.
    local args=() py_args=() only="" py_only="" name
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --only) only="$2"; shift 2 ;;
            --only=*) only="${1#--only=}"; shift ;;
            *) args+=("$1"); shift ;;
        esac
    done
    py_args=("${args[@]}")
    if [[ -n "$only" ]]; then
        for name in ${only//,/ }; do
            [[ "$name" == js-* ]] || py_only="${py_only:+$py_only,}$name"
        done
        args+=(--only "$only")
        [[ -n "$py_only" ]] && py_args+=(--only "$py_only")
    fi
    local servers=(--oracle "$oracle" --oracle-review "$oracle_review" --keel "$keel"
        --keel-review "$keel_review" --allowlist crates/keel-server/tests/sdk/oracle/allowlist.json)
    local py_rc=0 js_rc=0
    if [[ -z "$only" || -n "$py_only" ]]; then
        echo "== diff: the Python client (langgraph-sdk)"
        "$ORACLE_PY" crates/keel-server/tests/sdk/diff_test.py "${servers[@]}" \
            --report "$WORK/diff-report.json" "${py_args[@]}" || py_rc=$?
    fi
    # The same scenarios through the JS client, against the same four servers.
    node_env
    cp crates/keel-server/tests/sdk/diff_test.mjs "$WORK/js/"
    echo "== diff: the JS client (@langchain/langgraph-sdk)"
    node "$WORK/js/diff_test.mjs" "${servers[@]}" --report "$WORK/diff-report-js.json" \
        "${args[@]}" || js_rc=$?
    [[ "$py_rc" == 0 && "$js_rc" == 0 ]]
}

run_python() {
    build
    python_env
    # Records and checkpoints in SQLite for one server, in memory for the other.
    rm -f "$WORK/python.db"*
    start_server python-open "$ROOT/target/debug/examples/scripted_server" --port 0 --pace-ms 5 \
        --database "sqlite://$WORK/python.db"
    local open="$URL"
    start_server python-auth "$ROOT/target/debug/examples/scripted_server" --port 0 \
        --api-keys "alice-key-1=alice,bob-key-22=bob"
    local auth="$URL"
    rm -f "$WORK/serve.db"*
    start_server python-serve "$ROOT/target/debug/keel" serve --config examples/keel.yaml \
        --port 0 --database "sqlite://$WORK/serve.db"
    local serve="$URL"
    rm -f "$WORK/review.db"*
    start_server python-review "$ROOT/target/debug/keel" serve --config examples/keel-review.yaml \
        --port 0 --database "sqlite://$WORK/review.db"
    "$PY" crates/keel-server/tests/sdk/python_sdk_test.py "$open" "$auth" "$serve" "$URL"
}

run_js() {
    build
    node_env
    start_server js-open "$ROOT/target/debug/examples/scripted_server" --port 0 --pace-ms 5
    local open="$URL"
    start_server js-review "$ROOT/target/debug/examples/scripted_server" --port 0 --pace-ms 1 \
        --config examples/keel-review.yaml
    cp crates/keel-server/tests/sdk/js_sdk_test.mjs "$WORK/js/"
    node "$WORK/js/js_sdk_test.mjs" "$open" "$URL"
}

# The adversarial suite: tenant matrix, bad-input corpus (sent N times, concurrently
# past 1; the documented full size is 20) and a kill -9 in the middle of a run, over raw
# HTTP against `keel serve` on SQLite.
run_adversarial() {
    build
    python_env
    "$PY" crates/keel-server/tests/sdk/adversarial_test.py "$ROOT/target/debug/keel" \
        examples/keel.yaml "$WORK/adversarial" --repeat "${1:-1}"
}

case "${1:-all}" in
    python) run_python ;;
    js) run_js ;;
    browser) run_browser ;;
    load) run_load "${2:-200}" ;;
    postgres) run_postgres ;;
    adversarial) run_adversarial "${2:-1}" ;;
    diff) run_diff "${@:2}" ;;
    speed) run_speed "${2:-200}" ;;
    usestream) run_usestream ;;
    all)
        run_python
        run_js
        run_browser
        run_load 50
        run_postgres
        run_adversarial 1
        ;;
    *)
        echo "usage: $0 python|js|browser|load [N]|postgres|adversarial [N]|diff [--only a,b]|usestream|all" >&2
        exit 2
        ;;
esac
