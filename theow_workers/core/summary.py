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
from theow_workers.core.query import LOG_FACTS, MAX_LINE_CHARS, error_lines, looks_like_error
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
    picked = {ln for ln in error_lines(text, is_normal) if looks_like_error(ln)}
    numbered = [(n, ln.strip()[:MAX_LINE_CHARS]) for n, ln in enumerate(text.split("\n"), 1)]
    for number, line in reversed(numbered):
        if len(found) >= limit:
            break
        wrapper = is_wrapper is not None and is_wrapper(line)
        shown = any(w.fact == name and w.line == number for w in found)
        if line in picked and not wrapper and not shown:
            found.append(Where(name, number, line))
    return found[:limit]
