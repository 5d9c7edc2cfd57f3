"""What of a failure is searched for, and what identifies its root cause.

The semantic query comes from the error-relevant part of the log, not from
every fact: the longest log-like fact, the lines in it that look like errors,
and its tail, bounded in length. A big unrelated fact (a whole go.mod) does
not drown the query.

The fingerprint is a hash of that error text with the volatile parts (numbers,
hex ids, paths in temp dirs, timestamps) normalized away: two failures with
the same root cause on different machines share it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

LOG_FACTS = ("stderr", "log", "output", "stdout", "error", "traceback", "exception")
# Matched against lower-cased lines: a case-sensitive search is ~10x faster than IGNORECASE.
ERROR_LINE = re.compile(
    r"error|fatal|fail|exception|traceback|panic|cannot|can't|could not|couldn't|not found|"
    r"no such|denied|refused|timed? ?out|unable|missing|unresolved|undefined|killed|abort"
)
MAX_QUERY_CHARS = 2000
MAX_ERROR_LINES = 12
TAIL_LINES = 8
MAX_LINE_CHARS = 300
# Lines judged against the job's normal, from the end: new lines are looked for near
# the failure, and a 64 KB log of mostly normal lines must not cost a mask per line.
NORMAL_SCAN_LINES = 200

_VOLATILE = [
    (
        re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"),
        "<ts>",
    ),
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (re.compile(r"\b[0-9a-f]{7,}\b", re.I), "<hex>"),
    (re.compile(r"(/tmp|/var/folders|/private/var)/\S+"), "<tmp>"),
    (re.compile(r"\d+"), "<n>"),
    (re.compile(r"[ \t]+"), " "),
]


def looks_like_error(line: str) -> bool:
    return ERROR_LINE.search(line.lower()) is not None


def log_text(facts: dict[str, Any]) -> str:
    """The failure's log: the first well-known log fact, else the longest multi-line text."""
    for name in LOG_FACTS:
        value = facts.get(name)
        if isinstance(value, str) and value.strip():
            return value
    texts = [v for v in facts.values() if isinstance(v, str) and "\n" in v.strip()]
    return max(texts, key=len, default="")


def error_lines(text: str, is_normal: Callable[[str], bool] | None = None) -> list[str]:
    """Lines that look like errors, then the tail; de-duplicated, in order.

    With ``is_normal`` (the job's normal, ``core.normal``) lines the job's
    passing runs print too are left out, unless every line is one of them.
    """
    lines = [ln.strip()[:MAX_LINE_CHARS] for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if looks_like_error(ln)]
    tail = lines[-TAIL_LINES:]
    if is_normal is not None:
        # Only the lines that could be picked are judged: masking every line costs ms.
        new_errors = _last(errors[-NORMAL_SCAN_LINES:], MAX_ERROR_LINES, is_normal)
        new_tail = _last(lines[-NORMAL_SCAN_LINES:], TAIL_LINES, is_normal)
        if new_errors or new_tail:
            errors, tail = new_errors, new_tail
    picked = errors[-MAX_ERROR_LINES:] + tail
    return list(dict.fromkeys(picked))


def _last(lines: list[str], count: int, is_normal: Callable[[str], bool]) -> list[str]:
    """The last ``count`` lines that are not normal, in order."""
    found: list[str] = []
    for line in reversed(lines):
        if len(found) == count:
            break
        if not is_normal(line):
            found.append(line)
    return found[::-1]


def query_text(facts: dict[str, Any]) -> str:
    """Bounded text to embed for a failure."""
    short = [
        f"{k}: {v}"
        for k, v in facts.items()
        if isinstance(v, str) and 0 < len(v) <= 80 and "\n" not in v
    ]
    body = "\n".join(error_lines(log_text(facts)))
    return ("\n".join(short[:6]) + "\n" + body).strip()[:MAX_QUERY_CHARS]


def similarity_text(facts: dict[str, Any]) -> str:
    """What a failure is embedded as to rank rules: its query text, normalized.

    Two failures that differ only in numbers, ids, times and temp paths embed
    the same text, so a fleet's repeats share one vector (``adapters.query_vectors``).
    """
    return normalize(query_text(facts))[:MAX_QUERY_CHARS]


def normalize(text: str) -> str:
    text = text.lower()
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text.strip()


def fingerprint(facts: dict[str, Any], is_normal: Callable[[str], bool] | None = None) -> str:
    """Same root cause → same fingerprint, whatever the run's ids and numbers.

    With the job's normal, built from the lines its passing runs do not print.
    """
    lines = error_lines(log_text(facts), is_normal)
    basis = "\n".join(normalize(ln) for ln in lines if looks_like_error(ln)) or "\n".join(
        normalize(ln) for ln in lines
    )
    if not basis:
        basis = normalize(" ".join(f"{k}={facts[k]}" for k in sorted(facts)))
    return hashlib.sha256(basis.encode()).hexdigest()[:32]
