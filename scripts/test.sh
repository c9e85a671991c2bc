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

# A throwaway PostgreSQL unless KEEL_TEST_POSTGRES_URL names one; stopped on exit.
echo "== PostgreSQL"
source scripts/postgres.sh

echo "== cargo test"
cargo test --workspace --all-targets
cargo test --workspace --doc
# The store conformance suite, migrations and cross-pool tests on PostgreSQL.
cargo test -p keel-store --features postgres --test postgres
