#!/usr/bin/env python3
"""Print the Keel-vs-LangChain table from one run of scripts/compare/run.sh.

Arguments: LANGCHAIN_JSON KEEL_JSON CRITERION_DIR. The Keel figures are criterion's
median estimates (`<CRITERION_DIR>/vs_langchain/<bench>/new/estimates.json`); KEEL_JSON
(written by the bench) names the benches and describes what each iteration did.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Judged, with the durable-runtime goals: the pass-through check and the compaction pass
# as they happen on the growing thread, and the compaction pass on a cold process (the
# first call after a restart). Each Keel figure is divided by LangChain's figure for the
# same work (the cold pass by LangChain's compaction pass: LangChain has no warm state).
TARGETS = {"passthrough": 2000.0, "compaction": 100.0, "compaction_cold": 50.0}
LANGCHAIN_KEY = {"compaction_cold": "compaction"}
# Reported, not judged: the least a cold pass must do (fingerprint and count every
# message), against LangChain's compaction: the ceiling of the cold ratio in this run.
# Also reported: reading every byte of the cold thread once, with no work on it.
REPORTED = {"cold_floor": "compaction", "cold_read": "compaction"}


def fmt(us: float) -> str:
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    if us >= 1:
        return f"{us:.2f} µs"
    return f"{us * 1000:.0f} ns"


def main() -> None:
    lc = json.loads(Path(sys.argv[1]).read_text())
    keel = json.loads(Path(sys.argv[2]).read_text())
    crit = Path(sys.argv[3])
    rows = []
    ok = True
    for key, target in TARGETS.items():
        bench = keel["benches"][key]
        est = json.loads((crit / "vs_langchain" / bench["id"] / "new" / "estimates.json").read_text())
        keel_us = est["median"]["point_estimate"] / 1000
        lc_us = lc[LANGCHAIN_KEY.get(key, key)]["median_us"]
        ratio = lc_us / keel_us
        ok &= ratio >= target
        rows.append((key, lc_us, keel_us, ratio, target))
    for key, lc_key in REPORTED.items():
        bench = keel["benches"].get(key)
        if bench is None:
            continue
        est = json.loads((crit / "vs_langchain" / bench["id"] / "new" / "estimates.json").read_text())
        keel_us = est["median"]["point_estimate"] / 1000
        lc_us = lc[lc_key]["median_us"]
        rows.append((key, lc_us, keel_us, lc_us / keel_us, None))
    print(f"thread: {lc['base_messages']} messages (+1 per pass-through call); "
          f"LangChain {lc['langchain_version']} (core {lc['langchain_core_version']}), Python {lc['python']}")
    print(f"{'benchmark':<16} {'LangChain':>12} {'Keel':>12} {'ratio':>9} {'target':>8}")
    for key, lc_us, keel_us, ratio, target in rows:
        if target is None:
            print(f"{key:<16} {fmt(lc_us):>12} {fmt(keel_us):>12} {ratio:>8.0f}x {'-':>7}  reported")
            continue
        mark = "ok" if ratio >= target else "MISSED"
        print(f"{key:<16} {fmt(lc_us):>12} {fmt(keel_us):>12} {ratio:>8.0f}x {target:>6.0f}x  {mark}")
    for key, bench in keel["benches"].items():
        est = json.loads((crit / "vs_langchain" / bench["id"] / "new" / "estimates.json").read_text())
        print(f"  keel {key}: {fmt(est['median']['point_estimate'] / 1000)} -- {bench['what']}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
