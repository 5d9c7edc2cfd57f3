"""What of a failure is searched for, and what identifies its root cause.

The semantic query comes from the error-relevant part of the log, not from
every fact: the lines the one reading of the log picked as the error
(:mod:`theow_workers.core.logs.summary`) and its tail, bounded in length. A big
unrelated fact (a whole go.mod) does not drown the query.

The fingerprint is a hash of the summary's basis: the picked error lines with
the volatile parts (times, durations, ids, paths, numbers) masked, so two
failures with the same root cause on different machines share it; what names
the cause is kept (error codes such as ``TS2322`` or ``ORA-00942``, exit codes,
HTTP statuses), so two causes that differ only by their code do not. It carries
its version (``v3:…``; version 2 masked codes as numbers, version 1 was bare
hex): a value stored by an older version still names what it named (its
failures, its explorations), and nothing reads a fingerprint's form.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from theow_client.jsontypes import JsonObject
from theow_workers.core.logs.summary import ErrorSummary, log_fact, summarize
from theow_workers.core.logs.text import mask_volatile
from theow_workers.core.testcases import cause_basis

MAX_QUERY_CHARS = 2000
TAIL_LINES = 8
FINGERPRINT_VERSION = 3


def log_text(facts: JsonObject) -> str:
    """The failure's log: the first well-known log fact, else the longest multi-line text."""
    return log_fact(facts)[1]


def error_lines(summary: ErrorSummary) -> list[str]:
    """The summary's error lines, then the log's tail; de-duplicated, in order."""
    tail = [line.text for line in summary.lines[-TAIL_LINES:]]
    return list(dict.fromkeys([line.text for line in summary.errors] + tail))


def query_text(facts: JsonObject) -> str:
    """Bounded text to embed for a failure."""
    short = [
        f"{k}: {v}"
        for k, v in facts.items()
        if isinstance(v, str) and 0 < len(v) <= 80 and "\n" not in v
    ]
    body = "\n".join(error_lines(summarize(facts)))
    return ("\n".join(short[:6]) + "\n" + body).strip()[:MAX_QUERY_CHARS]


def similarity_text(facts: JsonObject) -> str:
    """What a failure is embedded as to rank rules: its query text, normalized.

    Two failures that differ only in numbers, ids, times and temp paths embed
    the same text, so a fleet's repeats share one vector (``adapters.query_vectors``).
    """
    return mask_volatile(query_text(facts))[:MAX_QUERY_CHARS]


def fingerprint(facts: JsonObject, is_normal: Callable[[str], bool] | None = None) -> str:
    """Same root cause → same fingerprint, whatever the run's ids and numbers.

    With the job's normal, built from the lines its passing runs do not print.
    The rules' wrappers are not asked for: a cause keeps its fingerprint (and
    its explorations) when the rule library changes.

    >>> a = fingerprint({"log": "run 7 at /tmp/x1\\nerror: disk full after 3s"})
    >>> a == fingerprint({"log": "run 9 at /tmp/y2\\nerror: disk full after 12s"}), a[:3]
    (True, 'v3:')

    When tests failed (a ``tests`` fact), built from each failed test and its masked
    message instead (``core.testcases.cause_basis``).
    """
    tests = cause_basis(facts)
    if tests:
        return _hashed(tests)
    return fingerprint_of(summarize(facts, is_normal=is_normal))


def fingerprint_of(summary: ErrorSummary) -> str:
    """The fingerprint of a failure already summarized (see :func:`fingerprint`)."""
    return _hashed(summary.basis)


def _hashed(basis: str) -> str:
    digest = hashlib.sha256(basis.encode()).hexdigest()[:32]
    return f"v{FINGERPRINT_VERSION}:{digest}"


def fingerprint_version(value: str) -> int:
    """The version a stored fingerprint was computed with: 1 for the unversioned hex of old."""
    head, _, rest = value.partition(":")
    return int(head[1:]) if rest and head[:1] == "v" and head[1:].isdigit() else 1
