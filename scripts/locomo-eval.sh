#!/usr/bin/env bash
# LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
# Agents", ACL 2024) on the five development conversations, with the shipped stacks:
# `keel eval --format locomo` per stack, then one Markdown table for
# docs/memory-eval.md (found overall and per category, found for answers over 4
# characters, tokens against the last-100 window and the full history, wall time) and
# one of found per conversation.
#
# The conversations are read where they are, ../shared/datasets/locomo-dev beside the
# repository (or the folder KEEL_LOCOMO_DIR names), never copied. Without them the
# script says so and exits 0.
#
#   scripts/locomo-eval.sh
#   CONFIG=my.yaml scripts/locomo-eval.sh          # another config for both stacks
#   KEEL=target/debug/keel scripts/locomo-eval.sh  # a binary already built
#   JSON_DIR=/tmp/locomo scripts/locomo-eval.sh    # keep each run's --json report
set -euo pipefail
cd "$(dirname "$0")/.."

data=${KEEL_LOCOMO_DIR:-../shared/datasets/locomo-dev}
files=()
for id in 26 30 41 42 43; do
    [ -f "$data/$id.json" ] && files+=("$data/$id.json")
done
if [ ${#files[@]} -eq 0 ]; then
    echo "note: no LoCoMo development files at $data (set KEEL_LOCOMO_DIR); nothing measured"
    exit 0
fi

config=${CONFIG:-examples/summarization.yaml}
if [ -z "${KEEL:-}" ]; then
    cargo build --release -q -p keel-cli
    KEEL=target/release/keel
fi
work=${JSON_DIR:-$(mktemp -d)}
mkdir -p "$work"

# name|label|flags ("-" for none: the full history is sent)
stacks=(
    "summarization|\`--config $config\`|--config $config"
    "memory|\`--config $config --memory session --n-messages 10 --db sqlite::memory:\`|--config $config --memory session --n-messages 10 --db sqlite::memory:"
    "full|the full history (\`keel eval\` without a stack)|-"
)
for stack in "${stacks[@]}"; do
    IFS='|' read -r name label flags <<<"$stack"
    args=()
    [ "$flags" != "-" ] && read -r -a args <<<"$flags"
    "$KEEL" eval --format locomo "${files[@]}" "${args[@]}" --json >"$work/$name.json"
    printf '%s\n' "$label" >"$work/$name.label"
done

python3 - "$work" summarization memory full <<'EOF'
import json, os, sys

work, names = sys.argv[1], sys.argv[2:]
runs = [(open(os.path.join(work, n + ".label")).read().strip(),
         json.load(open(os.path.join(work, n + ".json")))) for n in names]

def share(s):
    return f"{s['percent']:.1f} % ({s['found']}/{s['probes']})"

files = runs[0][1]["files"]
print(f"LoCoMo, {len(files)} conversations, {runs[0][1]['total']['found']['probes']} probes "
      "(found: the answer is in the request the model would receive)\n")
cats = [c["name"] for c in runs[0][1]["total"]["categories"]]
print("| stack | found | " + " | ".join(cats) + " | answer > 4 chars | tokens vs last 100 "
      "| tokens vs full history | wall |")
print("|---|" + "---:|" * (len(cats) + 5))
for label, r in runs:
    t = r["total"]
    print(f"| {label} | **{share(t['found'])}** | "
          + " | ".join(share(c) for c in t["categories"])
          + f" | {share(t['long_answers'])} | {t['sent_vs_last100_percent']:.1f} % "
          f"| {t['sent_vs_full_history_percent']:.1f} % | {t['wall_seconds']:.2f} s |")
# The last-100 window for the same questions, from each probe's `found_in_last100`.
t = runs[0][1]["total"]
probes = [p for f in files for p in f["probes"]]
def window(keep):
    kept = [p for p in probes if keep(p)]
    found = sum(p["found_in_last100"] for p in kept)
    return share({"found": found, "probes": len(kept),
                  "percent": 100.0 * found / len(kept) if kept else 0.0})
full_pct = 100.0 * t["last100_tokens"] / t["full_history_tokens"] if t["full_history_tokens"] else 0
print(f"| the last 100 messages (Langflow's default window; computed) | {window(lambda p: True)} | "
      + " | ".join(window(lambda p, c=c: p["category"] == c["category"]) for c in t["categories"])
      + f" | {window(lambda p: len(p['answer']) > 4)} | 100 % | {full_pct:.1f} % | |")

print("\nfound per conversation:\n")
print("| stack | " + " | ".join(os.path.basename(f["file"]) for f in files) + " |")
print("|---|" + "---:|" * len(files))
for label, r in runs:
    print(f"| {label} | " + " | ".join(share(f["figures"]["found"]) for f in r["files"]) + " |")
print("| the last 100 messages | "
      + " | ".join(share(f["figures"]["last100_found"]) for f in files) + " |")
EOF
