#!/usr/bin/env bash
# Keel vs LangChain 1.5, in one run, on the same generated thread:
#   1. generate a 12,000-message agent thread (JSONL, Keel wire shape; seeded);
#   2. time LangChain's SummarizationMiddleware.before_model on it (Python, fake model);
#   3. time Keel's SummarizationMiddleware on the same file (criterion, release);
#   4. print both and the ratios (LangChain time / Keel time).
#
# Usage: scripts/compare/run.sh            (from anywhere; ~3-6 minutes on 2 cores)
# Env:   PYENV   virtualenv to use/create  (default target/pyenv-langchain)
#        CALLS   pass-through calls timed on the Python side (default 200)
#        PASSES  compaction passes timed on the Python side (default 10)
#        CARGO_TARGET_DIR                  (default target/compare-bench)
# Output: target/compare/{thread.jsonl,langchain.json,keel.json,summary.txt}
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYENV="${PYENV:-$ROOT/target/pyenv-langchain}"
OUT="$ROOT/target/compare"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/compare-bench}"
# Absolute: criterion resolves a relative CARGO_TARGET_DIR from the bench package's folder,
# so its estimates would land where ratios.py does not look.
case "$CARGO_TARGET_DIR" in /*) ;; *) CARGO_TARGET_DIR="$ROOT/$CARGO_TARGET_DIR" ;; esac
mkdir -p "$OUT"

if [ ! -x "$PYENV/bin/python" ]; then
    echo "== creating $PYENV with LangChain 1.5" >&2
    python3 -m venv "$PYENV"
    "$PYENV/bin/pip" install --quiet 'langchain==1.5.*' 'langchain-core>=1.8,<2'
fi
PY="$PYENV/bin/python"

echo "== generating the shared thread" >&2
"$PY" scripts/compare/langchain_bench.py gen-thread --out "$OUT/thread.jsonl"

echo "== LangChain side" >&2
"$PY" scripts/compare/langchain_bench.py bench --thread "$OUT/thread.jsonl" \
    --calls "${CALLS:-200}" --passes "${PASSES:-10}" --json "$OUT/langchain.json" >/dev/null

echo "== Keel side (release build of the bench only)" >&2
rm -rf "$CARGO_TARGET_DIR/criterion/vs_langchain"
KEEL_BENCH_THREAD="$OUT/thread.jsonl" KEEL_BENCH_JSON="$OUT/keel.json" \
    cargo bench --quiet --manifest-path scripts/compare/keel-bench/Cargo.toml \
    --bench vs_langchain -- --noplot >&2

"$PY" scripts/compare/ratios.py "$OUT/langchain.json" "$OUT/keel.json" \
    "$CARGO_TARGET_DIR/criterion" | tee "$OUT/summary.txt"
