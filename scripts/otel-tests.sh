#!/usr/bin/env bash
# End to end test of the OpenTelemetry export against Arize Phoenix, on loopback.
#
#   scripts/otel-tests.sh              # a `keel run` exported to Phoenix, read back and checked
#   scripts/otel-tests.sh screenshot   # the same, then the trace in Phoenix's UI in headless
#                                      # Chromium, saved as docs/phoenix-trace.png
#
# What it installs, idempotently: a Python venv under target/pyenv-phoenix with
# arize-phoenix from PyPI (installed with uv, also from PyPI); for `screenshot`,
# chromium and pngquant (apt-get, when missing) and playwright-core (npm) under
# target/otel-tests/js. Phoenix runs with its telemetry and
# external resources off, its database under target/otel-tests/, and is stopped by PID
# on exit.
#
# The run (crates/keel-otel/tests/e2e/): a PII redaction, a compaction with a summary
# call, a failed model call and its retry, a tool call and the answer, through the
# scripted model of `keel run`. crates/keel-otel/tests/e2e/check_phoenix.py reads the
# spans back through Phoenix's REST API and checks the tree and the attributes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="$ROOT/target/otel-tests"
E2E="$ROOT/crates/keel-otel/tests/e2e"
PHOENIX_VERSION="20.26.1"
PLAYWRIGHT_VERSION="1.65.1"
UV_VERSION="0.13.9"
PROJECT="keel-e2e"
mkdir -p "$WORK"

PIDS=()
cleanup() {
    for pid in "${PIDS[@]:-}"; do
        [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

phoenix_env() {
    local venv="${PHOENIX_PYENV:-$ROOT/target/pyenv-phoenix}"
    if [[ ! -x "$venv/bin/phoenix" ]] ||
        ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('arize-phoenix') != '$PHOENIX_VERSION')" 2>/dev/null; then
        python3 -m venv "$venv"
        # uv downloads in parallel: about 25 s for Phoenix's ~150 packages, where pip
        # alone took over 5 minutes on the same machine.
        "$venv/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
        "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" "arize-phoenix==$PHOENIX_VERSION"
    fi
    PHOENIX_PY="$venv/bin/python"
    PHOENIX_BIN="$venv/bin/phoenix"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_phoenix() {
    local port grpc_port
    port="$(free_port)"
    grpc_port="$(free_port)"
    rm -rf "$WORK/phoenix"
    mkdir -p "$WORK/phoenix"
    PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$port" PHOENIX_GRPC_PORT="$grpc_port" \
        PHOENIX_WORKING_DIR="$WORK/phoenix" PHOENIX_TELEMETRY_ENABLED=false \
        PHOENIX_ALLOW_EXTERNAL_RESOURCES=false \
        "$PHOENIX_BIN" serve >"$WORK/phoenix.log" 2>&1 &
    PIDS+=("$!")
    PHOENIX_URL="http://127.0.0.1:$port"
    for _ in $(seq 1 240); do
        if curl -sf "$PHOENIX_URL/healthz" >/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    echo "otel-tests: Phoenix did not start:" >&2
    cat "$WORK/phoenix.log" >&2
    return 1
}

run_export() {
    # The default build, as a user builds it: export is on without a feature flag.
    cargo build -q -p keel-cli
    phoenix_env
    start_phoenix
    OTEL_EXPORTER_OTLP_ENDPOINT="$PHOENIX_URL" OTEL_METRICS_EXPORTER=none \
        OTEL_SERVICE_NAME=keel-e2e OTEL_RESOURCE_ATTRIBUTES="openinference.project.name=$PROJECT" \
        "$ROOT/target/debug/keel" run --config "$E2E/stack.yaml" \
        --transcript "$E2E/thread.jsonl" --script "$E2E/answers.jsonl" --json >"$WORK/run.json"
    "$PHOENIX_PY" "$E2E/check_phoenix.py" "$PHOENIX_URL" "$PROJECT"
}

run_screenshot() {
    if ! command -v chromium >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    fi
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
    fi
    local dir="$WORK/js"
    mkdir -p "$dir"
    if [[ ! -f "$dir/node_modules/playwright-core/package.json" ]] ||
        ! grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$dir/node_modules/playwright-core/package.json"; then
        (cd "$dir" && npm install --silent --no-audit --no-fund "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null)
    fi
    cp "$E2E/screenshot.mjs" "$dir/"
    CHROMIUM="$(command -v chromium)" node "$dir/screenshot.mjs" "$PHOENIX_URL" "$PROJECT" \
        "$WORK/phoenix-trace.png"
    # A palette PNG, small enough for the repository (about 50 KB instead of 140 KB).
    if ! command -v pngquant >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pngquant >/dev/null
    fi
    pngquant --quality 60-90 --force --output "$ROOT/docs/phoenix-trace.png" "$WORK/phoenix-trace.png"
    echo "screenshot: docs/phoenix-trace.png"
}

case "${1:-export}" in
export) run_export ;;
screenshot)
    run_export
    run_screenshot
    ;;
*)
    echo "usage: scripts/otel-tests.sh [export|screenshot]" >&2
    exit 2
    ;;
esac
