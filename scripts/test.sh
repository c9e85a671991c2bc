#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, lints, then all tests.
# Later steps provision what the tests need (see scripts/ for each service).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace --all-targets
cargo test --workspace --doc
