"""Reading JUnit XML: one streaming pass per report, hardened, bounded, masked.

The parser is defusedxml's ``iterparse``: a document that declares an entity or refers to
an external one is refused before anything expands. Each ``<testcase>`` is read when it
ends and let go, so memory stays flat whatever the report's size; a report is merged into
the reading only once it was read whole, so a file that breaks halfway adds nothing.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO
from xml.etree.ElementTree import Element, ParseError

import defusedxml
import defusedxml.ElementTree

from theow_client.facts import bound_text
from theow_client.junit.frames import first_frame, go_package_folder, in_repository
from theow_client.junit.report import (
    DEFAULT_LIMITS,
    Kind,
    Report,
    ReportError,
    ReportLimits,
    Summary,
    TestCase,
)
from theow_client.redact import redact_text
from theow_client.terminal import printable

# What the parser is handed at a time (``_Limited``).
CHUNK_BYTES = 1024 * 1024
MAX_CHUNK_BYTES = 8 * 1024 * 1024

# Root elements of other test-report formats, named in the refusal.
OTHER_FORMATS = {
    "TestRun": "a Visual Studio TRX report",
    "test-run": "an NUnit 3 report",
    "test-results": "an NUnit 2 report",
    "assemblies": "an xUnit.net report",
    "assembly": "an xUnit.net report",
}
FAILED = {"failure": "failure", "error": "error"}
STILL_FAILED = {"rerunFailure": "failure", "rerunError": "error"}
FLAKY = {"flakyFailure": "failure", "flakyError": "error"}
# Rust's panic line, whose message is on the next line.
RUST_PANIC = re.compile(r"thread '.*' panicked at .*:\d+:\d+:")
# Messages that say nothing (gotestsum writes "Failed"): the text's first line says more.
PLACEHOLDERS = frozenset({"", "failed", "failure", "error", "fail"})


@dataclass
class _Failing:
    """A test that failed in this reading so far; ``at`` is its place in the list, or -1."""

    flaky: bool
    kind: Kind
    at: int


@dataclass
class _File:
    """What one report held, merged into the reading only once the whole file was read."""

    skipped: list[int] = field(default_factory=list)  # hashes of (classname, name)
    passed: list[int] = field(default_factory=list)
    failed: list[tuple[int, bool, Kind, TestCase | None]] = field(default_factory=list)


class _Reading:
    """One or more reports read into one ``Report``: passes and failures meet across files.

    A test is keyed by (classname, name); a key that both passed and failed is flaky.
    Passing tests are remembered by hash only, so 50,000 of them cost a few megabytes.
    """

    def __init__(self, root: Path, limits: ReportLimits) -> None:
        self.root, self.limits = root, limits
        self.tests: list[TestCase] = []
        self.unlisted = 0
        self.failing: dict[int, _Failing] = {}
        self.passed: set[int] = set()
        self.skipped: set[int] = set()
        self.folders: dict[str, str | None] = {}

    def read(self, source: IO[bytes], name: str) -> None:
        try:
            found = self._parse(source, name)
        except ParseError as exc:
            raise ReportError(f"{name}: not well-formed XML ({exc})") from None
        except defusedxml.DTDForbidden:
            raise ReportError(f"{name}: refused: a document type declaration") from None
        except defusedxml.EntitiesForbidden:
            raise ReportError(
                f"{name}: refused: declares XML entities (entity expansion is not allowed)"
            ) from None
        except defusedxml.ExternalReferenceForbidden:
            raise ReportError(f"{name}: refused: refers to an external entity") from None
        except defusedxml.DefusedXmlException as exc:
            raise ReportError(f"{name}: refused: {exc}") from None
        self._merge(found)

    def report(self) -> Report:
        skipped = self.skipped - self.passed - self.failing.keys()
        tests = len(self.passed | self.failing.keys()) + len(skipped)
        summary = Summary(tests=tests, skipped=len(skipped))
        for test in self.failing.values():
            if test.flaky:
                summary.flaky += 1
            elif test.kind == "error":
                summary.errors += 1
            else:
                summary.failed += 1
        return Report(list(self.tests), summary, self.unlisted)

    def _parse(self, source: IO[bytes], name: str) -> _File:
        found = _File()
        limited = _Limited(source, self.limits.file_bytes, name)
        stack: list[Element] = []
        suite_files: list[str | None] = []
        cases_open = 0  # a test case's failure and output are read with the test case
        events = defusedxml.ElementTree.iterparse(limited, events=("start", "end"))
        for event, element in events:
            tag = _local(element.tag)
            if event == "start":
                if not stack and tag not in ("testsuites", "testsuite"):
                    other = OTHER_FORMATS.get(tag)
                    what = other or f"root element <{redact_text(_short(printable(tag), 40))}>"
                    raise ReportError(f"{name}: {what}, not JUnit XML")
                stack.append(element)
                if len(stack) > self.limits.depth:
                    raise ReportError(f"{name}: nested deeper than {self.limits.depth} elements")
                if tag == "testsuite":
                    suite_files.append(element.get("file") or _inherited(suite_files))
                cases_open += tag == "testcase"
                continue
            stack.pop()
            if tag == "testcase":
                cases_open -= 1
                if cases_open == 0:
                    self._case(found, element, _inherited(suite_files))
            elif tag == "testsuite":
                suite_files.pop()
            if cases_open:
                continue
            if stack:
                stack[-1].remove(element)  # what was read is let go: memory stays flat
            element.clear()
        return found

    def _case(self, found: _File, case: Element, suite_file: str | None) -> None:
        key = hash((case.get("classname") or "", case.get("name") or ""))
        if not len(case):  # most tests passed and wrote nothing
            found.passed.append(key)
            return
        children = {_local(child.tag): child for child in reversed(case)}
        failed = next((children[t] for t in (*FAILED, *STILL_FAILED) if t in children), None)
        flaky = next((children[t] for t in FLAKY if t in children), None)
        shown = failed if failed is not None else flaky
        if shown is None:
            if "skipped" in children:
                found.skipped.append(key)
            else:
                found.passed.append(key)
            return
        kind: Kind = (
            "error" if _local(shown.tag) in ("error", "rerunError", "flakyError") else "failure"
        )
        listed = len(self.tests) + len(found.failed) < self.limits.listed
        test = self._test(case, shown, kind, suite_file) if listed else None
        found.failed.append((key, failed is None, kind, test))

    def _merge(self, found: _File) -> None:
        self.skipped.update(found.skipped)
        for key in found.passed:
            self.passed.add(key)
            if key in self.failing:
                self._flaky(self.failing[key])
        for key, flaky, kind, test in found.failed:
            known = self.failing.get(key)
            if known is None:
                at = -1
                if test is not None and len(self.tests) < self.limits.listed:
                    at = len(self.tests)
                    self.tests.append(test)
                else:
                    self.unlisted += 1
                known = self.failing[key] = _Failing(False, kind, at)
            if flaky or key in self.passed:
                self._flaky(known)

    def _flaky(self, test: _Failing) -> None:
        """It failed and passed in this reading: flaky, whatever else it did."""
        test.flaky = True
        if test.at >= 0 and self.tests[test.at].outcome != "flaky":
            self.tests[test.at] = replace(self.tests[test.at], outcome="flaky")

    def _folder(self, classname: str) -> str | None:
        """A Go package's folder, for the bare file names in its output."""
        if "/" not in classname or "." not in classname.split("/", 1)[0]:
            return None
        if classname not in self.folders:
            self.folders[classname] = go_package_folder(self.root, classname)
        return self.folders[classname]

    def _test(self, case: Element, shown: Element, kind: Kind, suite_file: str | None) -> TestCase:
        limits = self.limits
        text = _text(shown)
        message = shown.get("message") or ""
        if message.strip().lower() in PLACEHOLDERS:
            message = ""
        message = message or _first_line(text, case.get("name") or "") or shown.get("type") or ""
        trace = text[: limits.trace_chars]  # a trace names the test's own frame near its start
        file, line = case.get("file") or suite_file, _number(case.get("line"))
        folder = self._folder(case.get("classname") or "")
        frame = first_frame(trace, self.root, file, folder)
        if file is not None:
            # The line where it failed, in the test's file, when the trace shows it.
            file = in_repository(file, self.root) or file
            if frame is not None:
                line = frame[1]
        elif frame is not None:
            file, line = frame
        return TestCase(
            classname=_masked(case.get("classname") or "", limits.name_chars),
            name=_masked(case.get("name") or "", limits.name_chars),
            file=_masked(file, limits.name_chars) if file is not None else None,
            line=line,
            message=_masked(message, limits.message_chars),
            outcome="failed",
            kind=kind,
            time=_seconds(case.get("time")),
        )


def read_report(
    source: IO[bytes] | str | os.PathLike[str],
    name: str | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    limits: ReportLimits = DEFAULT_LIMITS,
) -> Report:
    """One report, from a path or a binary stream; ReportError says what is wrong with it."""
    report, errors = read_reports([source], root=root, limits=limits, names=[name])
    if errors:
        raise ReportError(errors[0])
    return report


def read_reports(
    sources: Iterable[IO[bytes] | str | os.PathLike[str]],
    *,
    root: str | os.PathLike[str] | None = None,
    limits: ReportLimits = DEFAULT_LIMITS,
    names: Iterable[str | None] = (),
) -> tuple[Report, list[str]]:
    """Every report read into one, and one line per report that could not be read.

    A bad report loses nothing of the others; what a bad report held before the point
    where it went wrong is dropped with it, so no test is counted from half a file.
    """
    reading = _Reading(Path(root if root is not None else os.getcwd()), limits)
    errors: list[str] = []
    given = list(names)
    for index, source in enumerate(sources):
        name = (given[index] if index < len(given) else None) or _name(source)
        try:
            if isinstance(source, (str, os.PathLike)):
                with _opened(source, name, limits) as stream:
                    reading.read(stream, name)
            else:
                reading.read(source, name)
        except ReportError as exc:
            errors.append(_short(str(exc), 1000))
    return reading.report(), errors


@contextlib.contextmanager
def _opened(path: str | os.PathLike[str], name: str, limits: ReportLimits) -> Iterator[IO[bytes]]:
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed below, after the size check
    except OSError as exc:
        raise ReportError(f"{name}: {exc.strerror or exc}") from None
    with stream:
        size = os.fstat(stream.fileno()).st_size
        if size > limits.file_bytes:
            raise ReportError(f"{name}: {size} bytes, more than {limits.file_bytes}")
        yield stream


class _Limited:
    """A binary stream that refuses to give more than ``limit`` bytes (a pipe, a growing file).

    It also hands the parser chunks of 1 MB growing to 8 MB, whatever size is asked for:
    expat (2.5) scans a token that spans chunks again from its start at every chunk, so
    one 20 MB attribute read 16 KB at a time costs 15 s; in these chunks, 0.3 s.
    """

    def __init__(self, stream: IO[bytes], limit: int, name: str) -> None:
        self.stream, self.left, self.name, self.limit = stream, limit, name, limit
        self.chunk = CHUNK_BYTES

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(min(max(size, self.chunk), self.left + 1))
        self.chunk = min(self.chunk * 2, MAX_CHUNK_BYTES)
        self.left -= len(data)
        if self.left < 0:
            raise ReportError(f"{self.name}: more than {self.limit} bytes")
        return data


def _name(source: object) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return str(getattr(source, "name", "report"))


@functools.lru_cache(maxsize=1024)
def _local(tag: object) -> str:
    """An element's name without its namespace (``{urn:x}testcase`` → ``testcase``)."""
    text = tag if isinstance(tag, str) else ""
    return text.rsplit("}", 1)[-1]


def _inherited(files: list[str | None]) -> str | None:
    return files[-1] if files else None


def _text(element: Element) -> str:
    """A failure's text: its own, or its ``<stackTrace>``'s (Surefire's rerun elements)."""
    parts = [element.text or ""]
    parts += [child.text or "" for child in element if _local(child.tag) == "stackTrace"]
    return "".join(parts).strip()


def _first_line(text: str, name: str = "") -> str:
    """The first line that says something.

    Passed over: Go's ``=== RUN``/``--- FAIL`` markers, Catch2's ``FAILED:``, the test's
    own name (PHPUnit's first line), and Rust's ``thread 'x' panicked at file:line:``
    whose message is on the next line.
    """
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("=== ", "--- ")) or line == "FAILED:":
            continue
        if (name and line.endswith(name)) or RUST_PANIC.fullmatch(line):
            continue
        return line
    return ""


def _number(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit() or len(text) > 9:
        return None
    return int(text)


def _seconds(text: str | None) -> float | None:
    try:
        seconds = float((text or "").replace(",", ""))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _masked(text: str, limit: int) -> str:
    bounded, _ = bound_text(text, limit)
    return redact_text(bounded)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
