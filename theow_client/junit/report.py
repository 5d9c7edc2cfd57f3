"""What a test report says: the tests that did not pass cleanly, counted, and the limits.

``theow_client.junit.reading`` fills a ``Report``; the CLI prints its ``lines()`` or its
``to_json()``, and ``run --junit`` sends the JSON as the fact ``tests``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Literal

from theow_client.jsontypes import JsonObject
from theow_client.terminal import printable

Outcome = Literal["failed", "flaky"]
Kind = Literal["failure", "error"]


@dataclass(frozen=True)
class ReportLimits:
    """What one reading keeps; a report past ``file_bytes`` or ``depth`` is refused."""

    file_bytes: int = 50 * 1024 * 1024  # a report's size on disk
    depth: int = 64  # nesting of elements
    listed: int = 1000  # failed and flaky tests listed; the rest are counted only
    name_chars: int = 500  # a test's name, its class name, its file
    message_chars: int = 4096
    trace_chars: int = 8 * 1024  # the head of a trace, searched for the test's frame, not kept


DEFAULT_LIMITS = ReportLimits()
# What ``run --junit`` sends: few enough tests, with short enough texts, to fit a failure's
# facts (``theow_client.facts.FactLimits``) beside its log.
FACT_LIMITS = ReportLimits(listed=100, name_chars=300, message_chars=1000)


class ReportError(ValueError):
    """A report that cannot be read; the message is one line naming the file and why."""


@dataclass(frozen=True)
class TestCase:
    """One test that failed, errored or was flaky."""

    __test__ = False  # pytest: not a test class

    classname: str
    name: str
    file: str | None
    line: int | None
    message: str
    outcome: Outcome
    kind: Kind
    time: float | None

    def title(self) -> str:
        """``classname.name``, or the name alone when it already says the class."""
        if not self.classname or self.classname in self.name:
            return self.name
        return f"{self.classname}.{self.name}"

    def where(self) -> str:
        """``file:line``, ``file`` or "" when the report does not say."""
        if self.file is None:
            return ""
        return self.file if self.line is None else f"{self.file}:{self.line}"


@dataclass
class Summary:
    """Counts over every test case read: ``failed`` and ``errors`` as JUnit counts them."""

    tests: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    flaky: int = 0


@dataclass
class Report:
    """What one or more reports hold: the tests that did not pass cleanly, and counts."""

    tests: list[TestCase] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
    unlisted: int = 0  # failed or flaky tests past ``ReportLimits.listed``, counted only

    def to_json(self) -> JsonObject:
        summary: JsonObject = dict(asdict(self.summary))
        if self.unlisted:
            summary["unlisted"] = self.unlisted
        return {"tests": [dict(asdict(test)) for test in self.tests], "summary": summary}

    def lines(self) -> Iterator[str]:
        """One line per test, ``file:line`` first where known, then the counts.

        Each is one line that a terminal or a CI system prints as it is: escape sequences
        and line breaks from the report are gone, and no line starts with ``::`` (which
        GitHub Actions would read as a workflow command).
        """
        for test in self.tests:
            label = test.outcome if test.kind == "failure" else f"{test.outcome} (error)"
            message = test.message.strip().split("\n", 1)[0]
            where = f"{test.where()}: " if test.file else ""
            line = f"{where}{test.title()}: {label}" + (f": {message}" if message else "")
            line = " ".join(printable(line).split())
            yield f" {line}" if line.startswith("::") else line
        s = self.summary
        more = f", {self.unlisted} more not listed" if self.unlisted else ""
        yield (
            f"{s.tests} tests: {s.failed} failed, {s.errors} errors, "
            f"{s.skipped} skipped, {s.flaky} flaky{more}"
        )
