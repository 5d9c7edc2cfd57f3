"""The lines to look at in a failure's log (a stand-in replaced at merge by the one reading of log text).

``where_lines`` gives up to ``limit`` lines, most telling first: the chosen
rule's evidence, then the last lines that look like errors. Line numbers are
1-based in the fact as received (the bounded log).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from theow_client.verdict import Where
from theow_workers.core.evidence import Evidence
from theow_workers.core.query import LOG_FACTS, MAX_LINE_CHARS, looks_like_error
from theow_workers.core.rules import Rule

IsLine = Callable[[str], bool]


def wrapper_predicate(rules: Iterable[Rule]) -> IsLine:
    """Whether a line is a wrapper's line (stand-in: no line is)."""
    return lambda line: False


def where_lines(
    facts: dict[str, Any],
    evidence: Evidence | None = None,
    *,
    is_normal: IsLine | None = None,
    is_wrapper: IsLine | None = None,
    limit: int = 3,
) -> list[Where]:
    """The evidence line, then the last error lines of the log, newest first."""
    found: list[Where] = []
    if evidence is not None:
        found.append(Where(evidence.fact, evidence.line, evidence.text))
    name = next((n for n in LOG_FACTS if isinstance(facts.get(n), str)), None)
    if name is None:
        return found[:limit]
    text: str = facts[name]
    lines = text.split("\n")
    # From the end: the lines nearest the failure, and a 64 KB log is rarely read whole.
    for number in range(len(lines), 0, -1):
        if len(found) >= limit:
            break
        line = lines[number - 1].strip()[:MAX_LINE_CHARS]
        if not line or not looks_like_error(line):
            continue
        if (is_normal and is_normal(line)) or (is_wrapper and is_wrapper(line)):
            continue
        if not any(w.fact == name and w.line == number for w in found):
            found.append(Where(name, number, line))
    return found[:limit]
