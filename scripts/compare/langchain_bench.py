#!/usr/bin/env python3
"""The LangChain side of the Keel-vs-LangChain benchmark.

Two subcommands:

    gen-thread --out PATH [--base 10000] [--grow 2000] [--seed N]
        Writes one generated agent thread as JSONL in Keel's wire shape (one message per
        line): `base` messages of history followed by `grow` more that the pass-through
        benchmark appends one per call. The Rust side reads the same file.

    bench --thread PATH [--calls 200] [--passes 10] [--json OUT]
        Times LangChain 1.5's `SummarizationMiddleware.before_model` (approximate
        counter, fake summary model) on that thread:
          passthrough: the first `base` messages, growing by one message per call,
                       trigger far above the count, so every call passes through;
          compaction:  one full summarizing pass over the first `base` messages
                       (trigger tokens 100000, keep messages 20, default trim 4000).
        Prints a JSON object with per-call times in microseconds.

Run through scripts/compare/run.sh, which also runs the Keel side and prints the ratios.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import convgen  # noqa: E402

# Shared with the Rust side through the JSON this script prints and run.sh forwards.
COMPACTION_TRIGGER_TOKENS = 100_000
COMPACTION_KEEP_MESSAGES = 20
FAKE_SUMMARY = "FAKE SUMMARY: the user asked for work; tools ran; results were noted."


def gen_thread(out: Path, base: int, grow: int, seed: int) -> None:
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = []
    turn = 0
    while len(msgs) < base + grow:
        # Mixed turns: mostly short tool loops, some parallel calls and long outputs.
        msgs += convgen.conversation(rng, f"b{turn:05d}", turns=1, max_parallel=3, loop_max=4,
                                     long_rate=0.03, long_chars=(1500, 6000), parts_rate=0.05)
        turn += 1
    msgs = msgs[: base + grow]
    # The cut between history and growth must not split a tool run; a growth message
    # may be any kind, as in a real tool loop.
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for m in msgs:
            f.write(json.dumps(m, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {len(msgs)} messages to {out}", file=sys.stderr)


def load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def middleware(trigger: tuple[str, int], keep: tuple[str, int]) -> Any:
    from langchain.agents.middleware.summarization import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=[FAKE_SUMMARY])
    return SummarizationMiddleware(model, trigger=trigger, keep=keep)


def bench(thread: Path, base: int, calls: int, passes: int) -> dict[str, Any]:
    from importlib.metadata import version

    msgs = load(thread)
    if len(msgs) < base + calls:
        raise SystemExit(f"{thread} has {len(msgs)} messages; need base {base} + calls {calls}")
    lc = convgen.to_langchain(msgs)

    # Pass-through: the thread grows by one message per call; the trigger is never met,
    # so before_model only counts and returns None (what it does on most model calls).
    mw = middleware(("tokens", 10**12), ("messages", COMPACTION_KEEP_MESSAGES))
    history = list(lc[:base])
    times = []
    gc.collect()
    for i in range(calls):
        history.append(lc[base + i])
        state = {"messages": history}
        t0 = time.perf_counter_ns()
        out = mw.before_model(state, None)
        times.append(time.perf_counter_ns() - t0)
        assert out is None, "pass-through benchmark summarized"
    passthrough = summarize_times(times)

    # Full compaction pass: count, decide, cut, trim, summarize with the fake model.
    mw = middleware(("tokens", COMPACTION_TRIGGER_TOKENS), ("messages", COMPACTION_KEEP_MESSAGES))
    history = list(lc[:base])
    times = []
    kept = None
    for _ in range(passes):
        state = {"messages": list(history)}
        t0 = time.perf_counter_ns()
        out = mw.before_model(state, None)
        times.append(time.perf_counter_ns() - t0)
        assert out is not None, "compaction benchmark did not summarize"
        kept = len(out["messages"]) - 2
    compaction = summarize_times(times)
    compaction["kept_messages"] = kept

    return {
        "side": "langchain",
        "langchain_version": version("langchain"),
        "langchain_core_version": version("langchain-core"),
        "python": sys.version.split()[0],
        "thread": str(thread),
        "base_messages": base,
        "passthrough": passthrough,
        "compaction": compaction,
        "compaction_config": {"trigger_tokens": COMPACTION_TRIGGER_TOKENS, "keep_messages": COMPACTION_KEEP_MESSAGES},
    }


def summarize_times(ns: list[int]) -> dict[str, Any]:
    us = [t / 1000 for t in ns]
    return {
        "samples": len(us),
        "median_us": statistics.median(us),
        "mean_us": statistics.fmean(us),
        "min_us": min(us),
        "max_us": max(us),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen-thread")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--base", type=int, default=10_000)
    g.add_argument("--grow", type=int, default=2_000)
    g.add_argument("--seed", type=int, default=20261130)
    b = sub.add_parser("bench")
    b.add_argument("--thread", type=Path, required=True)
    b.add_argument("--base", type=int, default=10_000)
    b.add_argument("--calls", type=int, default=200)
    b.add_argument("--passes", type=int, default=10)
    b.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.cmd == "gen-thread":
        gen_thread(args.out, args.base, args.grow, args.seed)
        return
    result = bench(args.thread, args.base, args.calls, args.passes)
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
