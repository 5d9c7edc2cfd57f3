"""The ``tests`` fact read as untrusted input, and written as the text rules match.

The build that wrote the report runs the change's code, so everything in the fact is
read as an attacker could have written it: a value that is not what the client sends
(a test that is not an object, a name that is not text, an unknown outcome) is left
out; at most :data:`MAX_TESTS` tests are read; each text keeps a bounded head, loses
its escape sequences, control characters and line breaks (a name cannot start a line
of its own, so it cannot forge a line of the fact or a CI's workflow command) and is
masked with the worker's secret rules.

Each test is one line of the fact as rules see it, in the order the report listed them:

``[file[:line]: ]classname::name failed|error|flaky[: message]``

>>> facts = {"tests": {"tests": [
...     {"classname": "tests.test_calc", "name": "test_add", "file": "tests/test_calc.py",
...      "line": 5, "message": "assert 3 == 4\\n+ where 3 = add(1, 2)", "outcome": "failed",
...      "kind": "failure"},
...     {"classname": "calc", "name": "calc adds", "file": None, "line": None,
...      "message": "password=hunter2", "outcome": "flaky", "kind": "error"}]}}
>>> print(fact_text(read_tests(facts)))
tests/test_calc.py:5: tests.test_calc::test_add failed: assert 3 == 4 + where 3 = add(1, 2)
calc adds flaky: password=***
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from theow_client.jsontypes import Json, JsonObject
from theow_client.terminal import printable
from theow_workers.core.logs.redact import redact_text

FACT = "tests"
MAX_TESTS = 100  # tests read (the client sends at most 100; the rest it counts)
NAME_CHARS = 300  # a test's name, its class name, its file
MESSAGE_CHARS = 1000
MAX_LINE_NUMBER = 10**9
MAX_COUNT = 10**7  # a report's count of tests
OUTCOMES = ("failed", "flaky")
KINDS = ("failure", "error")


@dataclass(frozen=True)
class TestLine:
    """One test of the fact, made safe: its place, name, outcome and message on one line."""

    __test__ = False  # pytest: not a test class

    number: int  # its line in the fact as rules see it (1-based)
    name: str  # ``classname::name``, or the name alone when it already says the class
    file: str | None
    line: int | None
    message: str
    outcome: str  # ``failed`` or ``flaky`` (it failed, and passed on a rerun)
    kind: str  # ``failure`` (an assertion) or ``error`` (the test could not run)

    @property
    def failed(self) -> bool:
        """It failed the run: a flaky test passed when run again."""
        return self.outcome == "failed"

    @property
    def place(self) -> str:
        """``file:line``, ``file`` or "" when the report did not say."""
        if self.file is None:
            return ""
        return self.file if self.line is None else f"{self.file}:{self.line}"

    @property
    def label(self) -> str:
        if self.outcome == "flaky":
            return "flaky"
        return "error" if self.kind == "error" else "failed"

    @property
    def text(self) -> str:
        """The test's line of the fact."""
        head = f"{self.place}: " if self.place else ""
        tail = f": {self.message}" if self.message else ""
        return f"{head}{self.name} {self.label}{tail}"


def read_tests(facts: JsonObject) -> tuple[TestLine, ...]:
    """The tests of the failure's ``tests`` fact; () when it has none, or none that reads.

    Read once per fact (the last few are remembered): rules, the ``where`` lines, the
    verdict and the fingerprint each ask.
    """
    fact = facts.get(FACT)
    listed = fact.get("tests") if isinstance(fact, dict) else None
    if not isinstance(listed, list) or not listed:
        return ()
    try:
        key = json.dumps(listed[:MAX_TESTS], sort_keys=True)
    except (TypeError, ValueError, RecursionError):  # not JSON: an in-process caller's objects
        return ()
    return _read(key)


@dataclass(frozen=True)
class Counts:
    """A report's counts as the fact's ``summary`` says them (each a whole number, bounded)."""

    tests: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    flaky: int = 0
    unlisted: int = 0  # failed or flaky tests the client counted but did not list


def read_counts(facts: JsonObject) -> Counts | None:
    """The counts of the ``tests`` fact's report; None when it has no ``summary`` object.

    A count that is not a whole number from 0 to ``MAX_COUNT`` reads as 0.

    >>> read_counts({"tests": {"summary": {"tests": 12, "failed": 1, "flaky": "2", "errors": -1}}})
    Counts(tests=12, failed=1, errors=0, skipped=0, flaky=0, unlisted=0)
    >>> read_counts({"tests": {"tests": []}}) is None
    True
    """
    fact = facts.get(FACT)
    summary = fact.get("summary") if isinstance(fact, dict) else None
    if not isinstance(summary, dict):
        return None

    def count(name: str) -> int:
        value = summary.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            return 0
        return value

    names = ("tests", "failed", "errors", "skipped", "flaky", "unlisted")
    return Counts(*(count(name) for name in names))


def fact_text(tests: Sequence[TestLine]) -> str:
    """The fact as rules see it: one line per test."""
    return "\n".join(test.text for test in tests)


def with_tests_text(facts: JsonObject) -> JsonObject:
    """``facts`` with a ``tests`` fact (the report's object) as the text rules match; else as is."""
    if not isinstance(facts.get(FACT), dict):
        return facts
    return {**facts, FACT: fact_text(read_tests(facts))}


def one_line(value: Json, limit: int) -> str:
    """Untrusted text as one bounded line without control characters, not yet masked.

    >>> one_line("::error file=x::forged\\r\\n\\x1b[2Jnext", 60)
    '::error file=x::forged next'
    """
    if not isinstance(value, str):
        return ""
    raw = value[: limit * 4]  # bounded before the masking, which reads all of it
    return " ".join(printable(raw).split())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@functools.lru_cache(maxsize=64)
def _read(listed_json: str) -> tuple[TestLine, ...]:
    fields = [_fields(item) for item in json.loads(listed_json)]
    kept = [f for f in fields if f is not None]
    # One masking pass over every text: the worker's secret rules cost about a millisecond a
    # call, whatever its length, so a hundred tests of four texts each are masked at once.
    texts = _masked([text for f in kept for text in f[:4]])
    tests: list[TestLine] = []
    for i, (_, _, _, _, line, outcome, kind) in enumerate(kept):
        name, classname, file, message = texts[4 * i : 4 * i + 4]
        name, classname = _cut(name, NAME_CHARS), _cut(classname, NAME_CHARS)
        if not name:
            continue
        tests.append(
            TestLine(
                number=len(tests) + 1,
                name=_full_name(classname, name),
                file=_cut(file, NAME_CHARS) or None,
                line=line if file else None,
                message=_cut(message, MESSAGE_CHARS),
                outcome=outcome,
                kind=kind,
            )
        )
    return tuple(tests)


def _full_name(classname: str, name: str) -> str:
    """``classname::name``; the name alone when it says its class (jest-junit writes both alike).

    >>> _full_name("tests.test_calc", "test_add"), _full_name("calc adds", "calc adds")
    ('tests.test_calc::test_add', 'calc adds')
    """
    if not classname or name == classname or name.startswith((f"{classname} ", f"{classname}.")):
        return name
    return f"{classname}::{name}"


_Fields = tuple[str, str, str, str, int | None, str, str]


def _fields(item: Json) -> _Fields | None:
    """One test's texts (cleaned, not masked), line, outcome and kind; None when not a test."""
    if not isinstance(item, dict):
        return None
    name, classname = item.get("name"), item.get("classname")
    outcome, kind = item.get("outcome"), item.get("kind")
    if not isinstance(name, str) or not isinstance(classname, str | None):
        return None
    if outcome not in OUTCOMES:
        return None
    return (
        one_line(name, NAME_CHARS),
        one_line(classname, NAME_CHARS),
        one_line(item.get("file"), NAME_CHARS),
        one_line(item.get("message"), MESSAGE_CHARS),
        _line(item.get("line")),
        str(outcome),
        str(kind) if kind in KINDS else "failure",
    )


def _masked(texts: list[str]) -> list[str]:
    """Each text masked; one line each, so joined they are masked in one call."""
    if not texts:
        return []
    masked = redact_text("\n".join(texts)).split("\n")
    if len(masked) != len(texts):  # a rule that took a line break with it: one by one
        masked = [redact_text(text) for text in texts]
    return [" ".join(text.split()) for text in masked]


def _line(value: Json) -> int | None:
    """A line number: a positive integer (``5`` or ``5.0``), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None
    number = int(value)
    return number if 0 < number <= MAX_LINE_NUMBER else None
