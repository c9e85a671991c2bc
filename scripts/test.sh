#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, lints, then all tests.
# Later steps provision what the tests need (see scripts/ for each service).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
# keel-store's PostgreSQL backend is an opt-in feature: lint it too.
cargo clippy -p keel-store --all-features --all-targets -- -D warnings

# Every feature combination a user can pick. The workspace run above unifies features
# (keel-cli turns on tiktoken, keel-replay both databases), so the paths without them
# are only built package by package. The facade's code is re-exports, gated by one
# feature each or by any() of two, so each feature alone, none, and all of them cover
# every cfg of every crate: dependencies come in the same variants as under
# `cargo hack --feature-powerset`, without its 128 runs (docs/architecture.md).
echo "== feature combinations"
facade_features=(agent summarization tiktoken memory sqlite postgres openai anthropic recall mcp)
cargo clippy -p keel --no-default-features -- -D warnings
for feature in "${facade_features[@]}"; do
    cargo clippy -p keel --no-default-features --features "$feature" -- -D warnings
done
cargo clippy -p keel --no-default-features --features summarization,tiktoken -- -D warnings
# All of them, with the examples (postgres_sessions needs `postgres`) and tests.
cargo clippy -p keel --all-features --all-targets -- -D warnings
cargo clippy -p keel-store --no-default-features --all-targets -- -D warnings
cargo clippy -p keel-store --no-default-features --features postgres --all-targets -- -D warnings
cargo clippy -p keel-tokens --no-default-features --all-targets -- -D warnings
cargo clippy -p keel-summarization --all-targets -- -D warnings

# A throwaway PostgreSQL unless KEEL_TEST_POSTGRES_URL names one; stopped on exit.
echo "== PostgreSQL"
source scripts/postgres.sh

echo "== cargo test"
# The PostgreSQL tests (keel-store's conformance suite, migrations and cross-pool tests;
# keel-memory, keel-recall and keel-server on PostgreSQL) are listed as ignored in a plain
# `cargo test --workspace`, which needs no database; these features run them, against
# the server provisioned above (they fail, never skip, without KEEL_TEST_POSTGRES_URL).
postgres_tests=keel-store/postgres-tests,keel-memory/postgres-tests,keel-recall/postgres-tests,keel-server/postgres-tests
cargo test --workspace --all-targets --features "$postgres_tests"
cargo test --workspace --doc --features "$postgres_tests"

# The top-level examples run as a user would run them (`cargo test` above built the
# ones the default features allow).
echo "== examples"
cargo run -q --example custom_middleware >/dev/null
yaml_agent_output="$(cargo run -q --example yaml_agent)"
grep -q "Compacting conversation context" <<<"$yaml_agent_output"
cargo run -q --features postgres --example postgres_sessions -- "$KEEL_TEST_POSTGRES_URL"
# Exact token counts in a summarization.yaml reach `keel replay` (the tiktoken feature).
o200k_config="$(mktemp)"
sed 's/^  token_counter: approximate$/  token_counter: o200k_base/' examples/summarization.yaml >"$o200k_config"
grep -q "token_counter: o200k_base" "$o200k_config"
cargo run -q -p keel-cli -- replay examples/sessions/support-prj123.jsonl --config "$o200k_config" >/dev/null
rm -f "$o200k_config"
# `keel eval` on the bundled session and its probes, as docs/memory-eval.md runs it.
cargo run -q -p keel-cli -- eval examples/sessions/support-prj123.jsonl \
    --probes examples/sessions/support-prj123.probes.jsonl --config examples/summarization.yaml >/dev/null

# --- cost that grows with the work ---
# The same work at size N and 4N for the replay with the bundled config, the replay with
# session memory on SQLite and recall's search on SQLite: fails when the larger costs
# more than 4.6x the CPU time of the smaller (scripts/scaling.sh, which also has the
# served conversation's check, failing and left out of this stage until its per-turn
# growth is fixed; docs/benchmarks.md has the ratios).
echo "== scaling"
scripts/scaling.sh

# --- built-in middleware ---
# keel-middleware's behaviour against LangChain 1.5 itself: a fresh LangChain from PyPI
# runs the shared scenarios (scripts/compare/middleware_diff.py) and the Rust test
# compares Keel's messages, requests, todos, interrupts and errors with its output. The committed
# expected.json (what `cargo test` compares with offline) must say the same.
echo "== built-in middleware"
cargo clippy -p keel-middleware -p keel-cli -p keel --all-targets --all-features -- -D warnings
cargo clippy -p keel --no-default-features --features middleware -- -D warnings
middleware_pyenv="${PYENV:-$PWD/target/pyenv-langchain}"
if [ ! -x "$middleware_pyenv/bin/python" ]; then
    python3 -m venv "$middleware_pyenv"
    "$middleware_pyenv/bin/pip" install --quiet 'langchain==1.5.*' 'langchain-core>=1.8,<2'
fi
middleware_expected="$PWD/target/langchain-middleware/expected.json"
"$middleware_pyenv/bin/python" scripts/compare/middleware_diff.py --out "$middleware_expected"
KEEL_LANGCHAIN_EXPECTED="$middleware_expected" cargo test -p keel-middleware --test langchain_diff
"$middleware_pyenv/bin/python" - "$middleware_expected" crates/keel-middleware/tests/fixtures/langchain/expected.json <<'PY'
import json, sys
fresh, committed = (json.load(open(p)) for p in sys.argv[1:])
for doc in (fresh, committed):
    doc.pop("langchain")
if fresh != committed:
    sys.exit("crates/keel-middleware/tests/fixtures/langchain/expected.json is stale: rerun scripts/compare/middleware_diff.py")
PY
# `keel run` on the example stack, and the example that loads it.
cargo run -q -p keel-cli -- run --config examples/stack/support.yaml \
    --transcript examples/stack/thread.jsonl --script examples/stack/answers.jsonl --json >/dev/null
cargo run -q --features middleware --example middleware_stack >/dev/null
# --- durable runtime ---
# The agent-run tests (64 concurrent runs per multitask strategy on memory and SQLite,
# the kill-and-resume child process, session deletion) ran with `cargo test` above;
# the PostgreSQL ones (every strategy, two writer processes on one thread) ran with
# keel-store's `--test postgres`. The soak example at CI size on every backend: it
# exits non-zero if a message was lost or duplicated. Full size (1,000 threads of 200
# messages, 64 at a time) is in docs/benchmarks.md.
echo "== soak"
soak_dir="$(mktemp -d)"
cargo run -q --example soak -- --threads 100 --messages 60 --concurrency 16
cargo run -q --example soak -- --threads 100 --messages 60 --concurrency 16 --db "sqlite://$soak_dir/soak.db"
cargo run -q --features postgres --example soak -- --threads 100 --messages 60 --concurrency 16 --db "$KEEL_TEST_POSTGRES_URL"
rm -rf "$soak_dir"
# --- tracing ---
# keel-otel's span-tree tests (in-memory exporters) ran with `cargo test` above. The
# CLI's `otel` feature, then a `keel run` exported over OTLP/HTTP to Arize Phoenix (from
# PyPI, on loopback) and read back through Phoenix's REST API: about 45 s on a fresh
# machine (Phoenix installed with uv), 15 s once its venv exists, besides building
# keel-cli with the feature.
echo "== tracing (OpenTelemetry, Phoenix)"
# The exporter is in the CLI's default build; lint the build without it too.
cargo clippy -p keel-cli --no-default-features --all-targets -- -D warnings
scripts/otel-tests.sh
# --- keel serve ---
# The server with the official Python and JavaScript SDKs, the chat page in headless
# Chromium (screenshots under target/serve-tests/), and a small load test (50
# concurrent streaming runs; docs/benchmarks.md has 200 on a release build). The
# script installs what it needs (venv, npm packages, chromium) under target/.
echo "== keel serve"
cargo clippy -p keel-server --all-features --all-targets -- -D warnings
scripts/serve-tests.sh python
scripts/serve-tests.sh js
scripts/serve-tests.sh browser
scripts/serve-tests.sh load 50
# Two server processes on the PostgreSQL provisioned above (with owners and deletion).
scripts/serve-tests.sh postgres
# The adversarial suite at CI size (one round of the bad-input corpus; full size 20).
scripts/serve-tests.sh adversarial 1
# langgraph-api (from PyPI) as the oracle: the same scenarios against both servers,
# through the Python and then the JS SDK (about 45 s each on 2 cores), compared field by
# field; differences not in tests/sdk/oracle/allowlist.json fail. docs/serving.md lists
# the same differences: its tables must be what the allowlist says.
python3 crates/keel-server/tests/sdk/oracle/tables.py --check
scripts/serve-tests.sh diff
# The SDK's React hook, useStream, on a page in headless Chromium (agent-chat-ui's wiring).
scripts/serve-tests.sh usestream
# --- MCP ---
# keel-mcp with real servers from PyPI and npm (stdio and streamable HTTP, list_changed,
# restarts), `keel run` calling MCP tools through the stack, and `keel serve`'s /mcp
# endpoint with the official TypeScript SDK client and with keel-mcp. The script
# installs the servers and the SDK under target/mcp-tests/.
echo "== MCP"
scripts/mcp-tests.sh
# --- a Rust developer's first agent ---
# A crate outside the workspace made from the README's dependency block (path form) and
# examples/first_agent.rs, built and run against a local OpenAI-compatible server (a
# Python stub, standard library only): it must print a context_compacting event. Then
# every Rust snippet of README.md and docs/*.md compiled as doc tests of such a crate.
# Shares the workspace's target dir and Cargo.lock.
echo "== first agent (outside the workspace)"
scripts/first-agent-tests.sh

# Claude through Anthropic's Messages API: keel-anthropic's request bodies against the
# official `anthropic` SDK's types, and `keel run` / `keel serve` through LiteLLM's proxy
# (/v1/messages) in front of a recording OpenAI-compatible stub. Installs under
# target/anthropic-tests/.
echo "== Anthropic Messages API (LiteLLM)"
scripts/anthropic-tests.sh
