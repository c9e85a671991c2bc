#!/usr/bin/env bash
# A Rust developer's first agent, checked from outside the workspace, as a user builds it:
#
#   scripts/first-agent-tests.sh           # the agent, then the documentation's snippets
#   scripts/first-agent-tests.sh agent     # only the agent
#   scripts/first-agent-tests.sh snippets  # only the snippets
#
# agent: a new crate in a temp dir whose [dependencies] are the README's dependency
# block (path form, pointed at this checkout), with examples/first_agent.rs as its
# main.rs and examples/first_agent/summarization.yaml next to its Cargo.toml. It is built
# and run against a local OpenAI-compatible server (scripts/first-agent/openai_stub.py,
# Python's standard library only); the run must print a tool call, a
# `context_compacting` and a `context_compacted` event and each run's outcome. Then the
# same binary with no server listening must exit non-zero and say so.
#
# snippets: every ```rust block of README.md and docs/*.md compiled as doc tests of a
# crate outside the workspace (depending on the README's block plus what each page says
# to add: features `middleware`, `mcp` and `anthropic`, and keel-testkit where a page uses it).
#
# The crate shares CARGO_TARGET_DIR with the workspace and starts from the workspace's
# Cargo.lock, so the dependencies the workspace build compiled are reused (a user's own
# lockfile may resolve newer patch versions and compile them again).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/keel-first-agent.XXXXXX")"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

# The README's dependency block: the ```toml block right after the marker line, with
# its `path = "..."` pointed at this checkout.
readme_dependencies() {
    python3 - "$ROOT" <<'PY'
import re, sys
root = sys.argv[1]
text = open(f"{root}/README.md", encoding="utf-8").read()
m = re.search(r"<!-- dependency: path form -->\s*```toml\n(.*?)```", text, re.S)
if not m:
    sys.exit("README.md: no ```toml block after `<!-- dependency: path form -->`")
block = m.group(1)
if "[dependencies]" not in block or 'path = "' not in block:
    sys.exit("README.md: the dependency block has no [dependencies] with a path form")
print(re.sub(r'path = "[^"]*"', f'path = "{root}"', block, count=1), end="")
PY
}

new_crate() { # DIR NAME
    mkdir -p "$1/src"
    {
        printf '[package]\nname = "%s"\nversion = "0.1.0"\nedition = "2024"\npublish = false\n\n' "$2"
        readme_dependencies
        # Its own workspace: never mistaken for a member of an enclosing one.
        printf '\n[workspace]\n'
    } >"$1/Cargo.toml"
    cp "$ROOT/Cargo.lock" "$1/Cargo.lock"
}

run_agent() {
    local app="$WORK/my-agent"
    new_crate "$app" my-agent
    cp "$ROOT/examples/first_agent.rs" "$app/src/main.rs"
    cp "$ROOT/examples/first_agent/summarization.yaml" "$app/summarization.yaml"
    echo "first-agent: building $app (Cargo.toml from README.md)"
    (cd "$app" && cargo build -q)
    local bin="$CARGO_TARGET_DIR/debug/my-agent"

    python3 "$ROOT/scripts/first-agent/openai_stub.py" "$WORK/port" 2>"$WORK/stub.log" &
    PIDS+=("$!")
    for _ in $(seq 1 100); do
        [[ -s "$WORK/port" ]] && break
        sleep 0.1
    done
    local port
    port="$(cat "$WORK/port")"

    local out="$WORK/agent.out"
    if ! (cd "$app" && OPENAI_BASE_URL="http://127.0.0.1:$port/v1" OPENAI_API_KEY=sk-local \
        KEEL_MODEL=stub-model "$bin") >"$out" 2>"$WORK/agent.err"; then
        echo "first-agent: the agent failed:" >&2
        cat "$out" "$WORK/agent.err" >&2
        return 1
    fi
    local want
    for want in '[tool call] lookup_order' '[context_compacting] ' '[context_compacted] ' '[outcome] completed'; do
        if ! grep -qF -- "$want" "$out"; then
            echo "first-agent: the agent's output has no \`$want\`:" >&2
            cat "$out" "$WORK/agent.err" >&2
            return 1
        fi
    done
    grep -F -- '[context_compacting]' "$out" | head -1
    [[ -f "$app/first_agent.db" ]] || { echo "first-agent: no first_agent.db (session memory on SQLite)" >&2; return 1; }

    # No server: a port nothing listens on (the stub's, once it is stopped).
    kill "${PIDS[-1]}"
    wait "${PIDS[-1]}" 2>/dev/null || true
    local code=0
    (cd "$app" && OPENAI_BASE_URL="http://127.0.0.1:$port/v1" KEEL_MODEL=stub-model \
        KEEL_OPENAI_TIMEOUT_SECS=5 "$bin") >"$WORK/none.out" 2>"$WORK/none.err" || code=$?
    if [[ "$code" == 0 ]] || ! grep -q "no OpenAI-compatible server answered at http://127.0.0.1:$port/v1" "$WORK/none.err"; then
        echo "first-agent: without a server the agent exited $code and said:" >&2
        cat "$WORK/none.err" >&2
        return 1
    fi
    echo "first-agent: ok (no server: $(head -1 "$WORK/none.err"))"
}

run_snippets() {
    local docs="$WORK/doc-snippets"
    new_crate "$docs" doc-snippets
    # What the pages say to add beyond the README's block.
    cat >>"$docs/Cargo.toml" <<EOF

[dev-dependencies]
# docs/middleware.md (feature middleware), docs/tools.md (feature mcp) and
# docs/claude.md (feature anthropic).
keel = { path = "$ROOT", features = ["openai", "middleware", "mcp", "anthropic"] }
# README.md's "Composing middleware" and docs/writing-middleware.md use the scripted
# model of keel-testkit.
keel-testkit = { path = "$ROOT/crates/keel-testkit" }
# docs/operations.md's tracing setup.
keel-otel = { path = "$ROOT/crates/keel-otel" }
tracing-subscriber = "0.3"
EOF
    # A snippet marked `ignore` would be checked by nobody.
    if grep -n '^ *```rust,ignore' "$ROOT/README.md" "$ROOT"/docs/*.md; then
        echo "first-agent: the Rust snippets above are not compiled: remove \`ignore\`" >&2
        return 1
    fi
    python3 - "$ROOT" "$docs/src/lib.rs" <<'PY'
import glob, os, sys
root, out = sys.argv[1], sys.argv[2]
pages = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(f"{root}/docs/*.md"))
with open(out, "w") as f:
    f.write("//! The Rust snippets of Keel's README and docs, compiled as doc tests.\n")
    for i, page in enumerate(pages):
        f.write(f'\n#[doc = include_str!("{root}/{page}")]\npub mod page_{i} {{}}\n')
PY
    echo "first-agent: compiling the snippets of README.md and docs/*.md"
    (cd "$docs" && cargo test -q --doc)
}

case "${1:-all}" in
agent) run_agent ;;
snippets) run_snippets ;;
all)
    run_agent
    run_snippets
    ;;
*)
    echo "usage: scripts/first-agent-tests.sh [agent|snippets]" >&2
    exit 2
    ;;
esac
