"""Writes the two tables of docs/serving.md's "Differences from langgraph-api that
remain" (gaps, then accepted differences) from allowlist.json, the source of truth, so
the page never drifts from what the differential suite accepts.

    python tables.py            # rewrite the tables in docs/serving.md
    python tables.py --check    # exit 1 if they differ from the allowlist
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
ALLOWLIST = HERE / "allowlist.json"
DOC = HERE.parents[4] / "docs" / "serving.md"
HEADINGS = {
    "keel_gaps": "**Gaps** (Keel answers differently; each is a change still to make):",
    "accepted": "**Accepted** (representation only, or deliberate Keel behaviour):",
}


def rows(entries: list[dict], section: str) -> list[str]:
    out = []
    for e in entries:
        reason = e["reason"]
        if section == "keel_gaps" and reason.startswith("gap: "):
            reason = reason[len("gap: "):]
        out.append(f"| `{e['match']}` | {reason} |")
    return out


def render(lines: list[str], allow: dict) -> list[str]:
    lines = list(lines)
    for section, heading in HEADINGS.items():
        at = lines.index(heading)
        # The heading, a blank line, the table's header and separator, then its rows.
        start = at + 4
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[start:end] = rows(allow.get(section, []), section)
    return lines


def main() -> int:
    allow = json.loads(ALLOWLIST.read_text())
    text = DOC.read_text()
    lines = text.split("\n")
    new = "\n".join(render(lines, allow))
    if "--check" in sys.argv[1:]:
        if new != text:
            print(f"{DOC} does not list what {ALLOWLIST.name} accepts: run {Path(__file__).name}")
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
