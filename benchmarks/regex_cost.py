"""What each shipped rule's regexes cost on 64 KB logs, against THEOW_REGEX_TIMEOUT (50 ms).

    .venv/bin/python benchmarks/regex_cost.py           # the ten costliest patterns
    .venv/bin/python benchmarks/regex_cost.py --all     # every pattern

Texts: 64 KB of the successful-build fixture logs, of ``examples/failures.jsonl``
and of the rule's own examples (realistic: a pattern should take under half the
timeout), and 64 KB lines of one repeated character with the rule's literal last
(hostile: under the timeout). The figure is CPU seconds of this thread, best of
three, so other processes on a busy machine do not count. The exit code is 1
when a pattern is over its limit. The test suite checks only that every pattern
answers on these texts (no catastrophic backtracking); the milliseconds are here.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import regex

from theow_workers.core.resolve.library import Library
from theow_workers.core.rules.matching import required_literal
from theow_workers.core.rules.schema import REGEX_FLAGS

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 0.05  # THEOW_REGEX_TIMEOUT's default
SIZE = 64 * 1024


def fill(text: str, size: int = SIZE) -> str:
    return (text * (size // max(1, len(text)) + 1))[:size]


def best_of_three(pattern: Any, text: str) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.thread_time()
        try:
            pattern.search(text, timeout=1.0)
        except TimeoutError:
            return float("inf")
        best = min(best, time.thread_time() - started)
    return best


def main() -> int:
    logs = [
        fill(
            "".join(
                p.read_text() for p in sorted((ROOT / "tests/fixtures/success_logs").glob("*.log"))
            )
        ),
        fill("".join(json.loads(ln)["stderr"] for ln in (ROOT / "examples/failures.jsonl").open())),
    ]
    costs: list[tuple[float, float, str, str]] = []  # (share of its limit, seconds, rule, pattern)
    for rule in Library.load(ROOT / "rules", ROOT / "actions").rules.rules:
        examples = fill("\n".join(e for c in rule.when for e in c.examples) + "\n")
        for condition in rule.when:
            for source in filter(None, (condition.regex, condition.not_regex)):
                pattern = regex.compile(source, REGEX_FLAGS)
                literal = required_literal(source) or ""
                hostile = [fill(ch, SIZE - len(literal)) + literal for ch in "a e-/0.[\n"]
                for limit, texts in ((TIMEOUT / 2, [*logs, examples]), (TIMEOUT, hostile)):
                    worst = max(best_of_three(pattern, text) for text in texts)
                    costs.append((worst / limit, worst, rule.name, source))
    costs.sort(reverse=True)
    for share, seconds, name, source in costs if "--all" in sys.argv else costs[:10]:
        print(f"{seconds * 1000:8.2f} ms  {share:6.0%} of its limit  {name}: {source[:60]}")
    over = [c for c in costs if c[0] >= 1]
    print(f"{len(costs)} pattern scans; {len(over)} over their limit")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
