#!/usr/bin/env bash
# How `keel replay` scales with the transcript: wall time and peak RSS at
# 10,000, 50,000 and 200,000 messages, for a replay without middleware, with
# summarization (examples/summarization.yaml) and with session memory on SQLite.
#
# Transcripts come from scripts/gen_session.py (the bundled support scenario, extended
# with more exchanges; deterministic). Figures go to stdout as a Markdown table; the
# numbers in docs/benchmarks.md were produced by this script.
#
#   scripts/bench-replay.sh                      # every size and mode
#   SIZES="10000 50000" MODES=summarization scripts/bench-replay.sh
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"10000 50000 200000"}
MODES=${MODES:-"none summarization memory"}
work=${BENCH_DIR:-${TMPDIR:-/tmp}/keel-replay-bench}
mkdir -p "$work"

cargo build --release -q -p keel-cli
keel=target/release/keel

echo "| messages | mode | wall s | peak RSS MB | model calls |"
echo "|---:|---|---:|---:|---:|"
for n in $SIZES; do
    transcript="$work/s$n.jsonl"
    [ -s "$transcript" ] || python3 scripts/gen_session.py --seed 7 \
        --exchanges $(((n - 100) / 2)) -o "$transcript" >/dev/null 2>&1
    for mode in $MODES; do
        case $mode in
            none) args=() ;;
            summarization) args=(--config examples/summarization.yaml) ;;
            memory)
                rm -f "$work/m$n.db"*
                args=(--memory session --db "sqlite://$work/m$n.db")
                ;;
            *) echo "unknown mode $mode" >&2; exit 2 ;;
        esac
        /usr/bin/time -f "%e %M" -o "$work/time" \
            "$keel" replay "$transcript" "${args[@]}" --json --progress none >"$work/out.json"
        read -r secs kb <"$work/time"
        calls=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["totals"]["calls"])' "$work/out.json")
        printf '| %s | %s | %s | %s | %s |\n' "$n" "$mode" "$secs" "$((kb / 1024))" "$calls"
    done
done
