"""What a verdict points at, in the build's own log: the lines to look at and the evidence.

Rules and ``where_lines`` read the facts as matched (``matching_facts``):
possibly cut by bounding, and a ``log`` joined from the ``stdout`` and
``stderr`` a submission sent. A person opens their own log, so every line
number is turned into the line of the fact they sent, in the original before
any cut (``theow_client.lines``): a 400,000-line log's last error is at line
399,990, not at line 2,461 of what a worker kept.

>>> facts = {"stdout": "building\\nok", "stderr": "Traceback\\nKeyError: 'X'"}
>>> in_sent_log(facts, {}, "log", 4)
('stderr', 2)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from theow_client.jsontypes import Json, JsonObject
from theow_client.lines import LineMap, original_line
from theow_client.verdict import Verdict, Where
from theow_workers.core.logs.summary import where_lines
from theow_workers.core.resolve.plan import MERGED_INTO_LOG, matching_facts
from theow_workers.core.rules.evidence import MAX_LINE_CHARS, Evidence
from theow_workers.core.testcases import failed_tests, where_tests_first

IsLine = Callable[[str], bool]
STREAMS = ("stdout", "stderr")  # joined in this order when a submission has no ``log``


def pointed(
    verdict: Verdict,
    facts: JsonObject,
    lines: Mapping[str, LineMap],
    evidence: Evidence | None = None,
    *,
    is_normal: IsLine | None = None,
    is_wrapper: IsLine | None = None,
    seen: JsonObject | None = None,
) -> Verdict:
    """``verdict`` with its ``where`` lines and its evidence's line numbers in the sent log.

    ``seen``: ``matching_facts(facts)`` when the caller made it already.
    """
    seen = matching_facts(facts) if seen is None else seen
    found = where_lines(seen, evidence, is_normal=is_normal, is_wrapper=is_wrapper)
    where = []
    for w in found:
        fact, line = in_sent_log(facts, lines, w.fact, w.line)
        where.append(Where(fact, line, w.text[:MAX_LINE_CHARS]))
    where = where_tests_first(facts, where)  # each failed test a line of its own, first
    return replace(
        verdict,
        where=tuple(where),
        tests=failed_tests(facts),
        evidence=evidence_in_sent_log(verdict.evidence, facts, lines),
    )


def in_sent_log(
    facts: Mapping[str, Json], lines: Mapping[str, LineMap], fact: str, line: int
) -> tuple[str, int]:
    """The fact a person sent and the line in its original of line ``line`` of ``fact`` as matched."""
    if fact == MERGED_INTO_LOG and facts.get(fact) is None:  # a rule on stderr read the log
        fact = "log"
    if fact == "log" and facts.get("log") is None:
        streams = [s for s in STREAMS if isinstance(facts.get(s), str) and facts[s]]
        if len(streams) == 1:
            fact = streams[0]
        elif len(streams) == 2:
            first = facts[STREAMS[0]].rstrip("\n").count("\n") + 1
            fact, line = (STREAMS[0], line) if line <= first else (STREAMS[1], line - first)
    pieces = lines.get(fact)
    return fact, original_line(pieces, line) if pieces else line


def evidence_in_sent_log(
    evidence: JsonObject | None, facts: Mapping[str, Json], lines: Mapping[str, LineMap]
) -> JsonObject | None:
    """An evidence dict (as a verdict or an attempt carries it) with its lines in the sent log."""
    if not evidence or not isinstance(evidence.get("line"), int):
        return evidence
    fact, line = in_sent_log(facts, lines, str(evidence.get("fact")), evidence["line"])
    shown = {**evidence, "fact": fact, "line": line}
    start = evidence.get("context_start")
    if isinstance(start, int) and start > 0:
        # The context is shown counting up from its first line, which ends at the evidence line.
        shown["context_start"] = line - (evidence["line"] - start)
    return shown


def evidence_of(evidence: JsonObject | None) -> Evidence | None:
    """The chosen rule's evidence as the verdict carries it (lines as matched), for ``where_lines``."""
    if not evidence:
        return None
    try:
        return Evidence(
            fact=str(evidence["fact"]),
            line=int(evidence["line"]),
            text=str(evidence["text"]),
            position=0.0,
            context=tuple(str(ln) for ln in evidence.get("context") or ()),
            context_start=int(evidence.get("context_start") or 0),
            normal=evidence.get("normal"),
        )
    except (KeyError, TypeError, ValueError):
        return None
