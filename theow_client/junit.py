"""Reading the JUnit-style XML reports that test runners write.

Nearly every runner writes one (pytest ``--junitxml``, jest-junit, mocha-junit-reporter,
Maven Surefire, Gradle, gotestsum, cargo-nextest, PHPUnit, Catch2, Karma): ``<testsuites>``
holding ``<testsuite>`` (nested or not) holding ``<testcase>``, each with a ``<failure>``,
``<error>`` or ``<skipped>`` child when it did not simply pass. Surefire and nextest add
``<flakyFailure>``/``<flakyError>`` (it failed, then passed on a rerun) and
``<rerunFailure>``/``<rerunError>`` (it failed on the reruns too). What Theow wants of a
report is the tests that did not pass cleanly, each with where it failed:

>>> import io
>>> report = read_report(io.BytesIO(b'''<testsuite tests="2">
...   <testcase classname="tests.test_calc" name="test_add" file="tests/test_calc.py" line="4">
...     <failure message="assert 3 == 4">tests/test_calc.py:5: AssertionError</failure>
...   </testcase>
...   <testcase classname="tests.test_calc" name="test_sub"/>
... </testsuite>'''), "report.xml")
>>> [(t.name, t.file, t.line, t.outcome, t.kind) for t in report.tests]
[('test_add', 'tests/test_calc.py', 5, 'failed', 'failure')]
>>> report.summary.tests, report.summary.failed
(2, 1)

A test's place is the ``file`` its runner wrote, at the line where its trace shows it
failed in that file (else the runner's ``line``); without a ``file``, the first frame of
its trace that lies in the repository (``theow_client.frames``). A test that failed and passed
in the same reading (Surefire's flaky elements, or the same test written twice, as Gradle's
test-retry plugin does) is ``flaky``, not failed.

Reports come from the build, which runs untrusted code: the parser refuses entity
declarations and external references (``defusedxml``), so a billion-laughs file or one
that reads ``/etc/passwd`` is refused before anything expands; the file's size, the nesting
depth, the cases listed and every text kept are bounded; every text is masked
(``theow_client.redact``). The parse streams (``iterparse``), each test case dropped once
read: 50,000 cases in 20 MB read in about a second (``benchmarks/junit.py``).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Literal
from xml.etree.ElementTree import Element, ParseError

import defusedxml
import defusedxml.ElementTree

from theow_client.facts import bound_text
from theow_client.frames import first_frame, go_package_folder, in_repository
from theow_client.jsontypes import JsonObject
from theow_client.redact import redact_text
from theow_client.terminal import printable

Outcome = Literal["failed", "flaky"]
CHUNK_BYTES = 1024 * 1024
MAX_CHUNK_BYTES = 8 * 1024 * 1024
Kind = Literal["failure", "error"]

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
# Messages that say nothing (gotestsum writes "Failed"): the text's first line says more.
RUST_PANIC = re.compile(r"thread '.*' panicked at .*:\d+:\d+:")
PLACEHOLDERS = frozenset({"", "failed", "failure", "error", "fail"})


@dataclass(frozen=True)
class ReportLimits:
    """What one reading keeps; a report past ``file_bytes`` or ``depth`` is refused."""

    file_bytes: int = 50 * 1024 * 1024  # a report's size on disk
    depth: int = 64  # nesting of elements
    listed: int = 1000  # failed and flaky tests listed; the rest are counted only
    name_chars: int = 500  # a test's name, its class name, its file
    message_chars: int = 4096
    trace_chars: int = 16 * 1024  # searched for the test's frame, not kept


DEFAULT_LIMITS = ReportLimits()
# What ``run --junit`` sends: few enough tests, with short enough texts, to fit a failure's
# facts (``theow_client.facts.FactLimits``) beside its log.
FACT_LIMITS = ReportLimits(listed=100, name_chars=300, message_chars=1000)
# Some file systems keep modification times to 1 or 2 seconds.
MTIME_SLACK = 2.0


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
        trace, _ = bound_text(text, limits.trace_chars)
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


def tests_fact(
    patterns: Iterable[str],
    *,
    since: float | None = None,
    root: str | os.PathLike[str] | None = None,
) -> tuple[JsonObject | None, list[str]]:
    """What ``run --junit`` sends as the fact ``tests``, and one line per problem.

    Only reports written or changed since ``since`` (a ``time.time()``) are read, so a
    report an earlier build left behind is not taken for this one's. None when no report
    was read.
    """
    files, problems = expand(patterns)
    if since is not None:
        fresh = [path for path in files if _modified_since(path, since)]
        if files and not fresh:
            problems.append(f"{len(files)} report(s) found, none written by this run: not sent")
        files = fresh
    if not files:
        return None, problems
    report, unread = read_reports(files, root=root, limits=FACT_LIMITS)
    return report.to_json(), problems + unread


def _modified_since(path: str, since: float) -> bool:
    try:
        return os.stat(path).st_mtime >= since - MTIME_SLACK
    except OSError:
        return True  # read, and the reading names what is wrong with it


def expand(patterns: Iterable[str]) -> tuple[list[str], list[str]]:
    """The files that paths and globs (``**`` for any depth) name, and one line per
    pattern that names none."""
    files: list[str] = []
    errors: list[str] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            found = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
            if not found:
                errors.append(f"{pattern}: no file matches")
        elif os.path.isdir(pattern):
            errors.append(
                f"{pattern}: a directory (give a file or a glob such as {pattern}/**/*.xml)"
            )
            found = []
        else:
            found = [pattern]
        files += [path for path in found if path not in files]
    return files, errors


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
