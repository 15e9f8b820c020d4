#!/usr/bin/env python3
"""Generates the synchronous client from the asynchronous one (one source of truth).

    python3 scripts/unasync.py          # rewrite the generated files
    python3 scripts/unasync.py --check  # exit 1 when they are stale

Each rule is a regular expression applied in order: async/await keywords go, async names
(AsyncX, aclose, aiter_lines, __aenter__, asynccontextmanager, asleep…) become their
synchronous counterparts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "sandgate"
PAIRS = [("_async_client.py", "_sync_client.py"), ("_async_agent.py", "_sync_agent.py")]

RULES: list[tuple[str, str]] = [
    (r"``async with``", "``with``"),
    (r"\basync def ", "def "),
    (r"\basync with ", "with "),
    (r"\basync for ", "for "),
    (r"\bawait ", ""),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_(lines|bytes|raw|text)\b", r"iter_\1"),
    (r"\basleep\b", "sleep"),
    (r"\b_async_(client|agent)\b", r"_sync_\1"),
    (r"\bAsync([A-Z]\w*)", r"\1"),
    (r"The asynchronous client\. The synchronous client \(_sync_client\.py\) is generated from this\nfile by scripts/unasync\.py: edit this one and run the script \(tests/test_generated\.py checks\)\.",
     "The synchronous client, GENERATED from _async_client.py by scripts/unasync.py: do not edit;\nedit that file and run the script (tests/test_generated.py checks)."),
    (r"Agent tools for an async agent loop\. The synchronous helper \(_sync_agent\.py\) is generated\nfrom this file by scripts/unasync\.py\.",
     "Agent tools for a synchronous agent loop, GENERATED from _async_agent.py by scripts/unasync.py:\ndo not edit; edit that file and run the script."),
]


def convert(src: str) -> str:
    for pat, rep in RULES:
        src = re.sub(pat, rep, src)
    return src


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for a, s in PAIRS:
        src = ROOT / a
        if not src.exists():
            continue
        want = convert(src.read_text())
        dst = ROOT / s
        if check:
            if not dst.exists() or dst.read_text() != want:
                stale.append(s)
        else:
            dst.write_text(want)
    if stale:
        print(f"stale: {', '.join(stale)}: run python3 scripts/unasync.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
