"""A CI log as a person reads it: no colour codes, no CI-system boilerplate, the failing step first.

CI systems wrap a tool's output in their own text: Travis' ``travis_fold`` and
``travis_time`` markers, its worker and system information (the ``sudo -V``
header reads like error lines: "password prompt timeout",
"-Werror=format-security"), ``The command "…" exited with 1.``; GitHub
Actions' ``##[group]``/``##[endgroup]`` and per-line time stamps. None of it
says why a build failed, and all of it differs between runs, so grouping,
display and error-line picking read the log through :func:`clean_lines`
(or :func:`numbered_lines`, which keeps each line's number in the fact).

This module is the one reading of log text's characters: the one ANSI
stripper (:func:`strip_ansi`), the one time-stamp stripper (:data:`LINE_STAMP`,
:func:`without_stamps`) and the one volatile-part normalizer
(:func:`mask_volatile`). Which lines state the error is
:mod:`theow_workers.core.logs.summary`'s part. (The corpus grading in
``core.resolve.grading`` keeps the corpus README's own normalization, so its figures
compare across versions.)

>>> clean_lines("travis_fold:start:worker_info\\r\\x1b[0KWorker information\\n"
...             "hostname: x\\ntravis_fold:end:worker_info\\r\\x1b[0K"
...             "\\x1b[31merror: it broke\\x1b[0m\\n"
...             '\\x1b[31;1mThe command "make" exited with 2.\\x1b[0m\\n')
['error: it broke']
>>> strip_ansi("\\x1b[31merror\\x1b[0m [1mbold[0m")
'error bold'
"""

from __future__ import annotations

import re

from theow_client.terminal import printable
from theow_workers.core.rules.codes import KEPT, is_code

# The bare "[31m" a log keeps when the escape byte itself was dropped.
BARE_COLOUR = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
# A time stamp a CI system puts before every line (GitHub Actions, Jenkins timestamper).
STAMP = r"\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\]? ?"
LINE_STAMP = re.compile(f"^{STAMP}")
_NEXT_STAMP = re.compile(f"\n{STAMP}")
# Folds whose whole content is the CI system describing itself.
BOILERPLATE_FOLDS = re.compile(r"^(?:worker_info|system_info|cache\.\d+|docker_mtu|resolvconf)")
FOLD = re.compile(r"^travis_fold:(start|end):(\S+)")
# Where bounding cut the log (``theow_client.facts.CUT_MARKER``): a fold's end may be gone.
CUT = re.compile(r"^\[\.\.\. theow: \d+ characters omitted \.\.\.\]$")
# The mark a CI system puts before a message it raises as an annotation.
ANNOTATION = re.compile(r"^(?:##\[(?:error|warning)\]|::(?:error|warning)[^:\n]*::)")
# Lines that belong to the CI system, never to the tool that failed.
BOILERPLATE = re.compile(
    r"^(?:travis_(?:fold|time):|##\[(?:group|endgroup|section|command|debug)\]|::(?:end)?group::|"
    r"\$ |Done\. Your build exited with|Your build has been stopped|"
    r"The command \".*\" (?:exited with|failed)|Setting environment variables from \.travis\.yml|"
    r"Post job cleanup|Cleaning up orphan processes|Using worker:|Worker information|"
    r"Build system information|\[command\])",
)


# What differs between two runs of one cause, in the order it is replaced (on lower-cased text).
_VOLATILE = [
    (
        re.compile(r"\b\d{4}-\d\d-\d\d[t _]\d\d[:_]\d\d[:_]\d\d(?:[.,_]\d+)?(?:z|[+-]\d\d:?\d\d)?"),
        "<ts>",
    ),
    (
        re.compile(
            r"\b(?:mon|tue|wed|thu|fri|sat|sun)\w* +\w{3} +\d+ +\d\d:\d\d:\d\d(?: +\w+)? +\d{4}"
        ),
        "<ts>",
    ),
    (re.compile(r"\b\d\d?:\d\d:\d\d(?:[.,]\d+)?\b"), "<ts>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{7,}\b"), "<hex>"),
    # Durations: "11 min", "26.279 seconds", "(0.52s)", "123ms", "1m 3s".
    (
        re.compile(
            r"\b\d+(?:\.\d+)?\s?(?:ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\b"
        ),
        "<dur>",
    ),
    (re.compile(r"[a-z]:\\(?:[^\\\s]+\\)+"), "<path>/"),
    (re.compile(r"(?:~|\.{1,2})?(?:/[\w.@+\-]+)+/"), "<path>/"),
    (re.compile(r"\d+"), "<n>"),
    (re.compile(r"(?:<n>[.,:])+<n>"), "<n>"),
    (re.compile(r"[ \t]+"), " "),
]
SEGMENT = "\u2028"  # a line break within a line: what a carriage return leaves


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (colours, erase-line, clipboard writes)
    or control characters, as a person reads it and as a terminal may print it."""
    return BARE_COLOUR.sub("", printable(text))


def without_stamps(log: str) -> str:
    """``log`` without the time stamp at the start of each line; line numbers stay.

    A pattern that starts with a newline is searched for that character;
    ``(?m)^`` would be tried at every position of a 64 KB log.

    >>> without_stamps("2025-06-01T10:00:00.1Z a\\n\\n[2025-06-01T10:00:01Z] b")
    'a\\n\\nb'
    """
    first = LINE_STAMP.match(log)
    return _NEXT_STAMP.sub("\n", log[first.end() :] if first else log)


# A CI system's wrapper around a tool's message, at the start of a line: GitHub Actions'
# error annotation (``##[error]…``, the ``::error file=…::…`` command), GitLab's section
# markers, Buildkite's time stamps. The runner's own exit-code line keeps its mark: it is
# the runner's statement that a step failed, and only a wrapper rule reads it.
_WRAPPED = re.compile(
    r"(?m)^(?:##\[error\]|::error(?:[ \t][^\n]*?)?::)"
    r"(?!Process completed with exit code \d|The process '[^'\n]*' failed with exit code \d)(?=\S)"
    r"|^(?:\x1b\[0K)?section_(?:start|end):\d+:[\w.\[\]=,-]+\r?(?:\x1b\[0K)?|_bk;t=\d+\x07"
)
ANNOTATION_MARKS = ("##[error]", "::error", "section_start:", "section_end:", "_bk;t=")


def unwrap_annotations(log: str) -> str:
    """``log`` with CI wrappers around a tool's message removed; line numbers stay.

    Rules are written for the tool's own line (``src/app.ts(3,5): error TS2322: …``);
    on GitHub Actions it may arrive only inside an annotation. A warning's mark
    stays: a warning is not why a build failed.

    >>> unwrap_annotations("##[error]src/a.ts(3,5): error TS2322: x\\n"
    ...                    "::error file=a.ts,line=3::boom\\n##[error]Process completed with exit code 2.")
    'src/a.ts(3,5): error TS2322: x\\nboom\\n##[error]Process completed with exit code 2.'
    """
    if not any(mark in log for mark in ANNOTATION_MARKS):
        return log  # most logs: a few substring searches, no regex over 64 KB
    return _WRAPPED.sub("", log)


def clean_lines(text: str) -> list[str]:
    """The log's lines without colour codes, time stamps and CI boilerplate, stripped, non-empty.

    (Keeping only the first failing step's lines, as Travis' ``The command "…"
    exited with N`` delimits it, was measured too: it loses a cause stated in a
    later step, and grouped worse on ``benchmarks/grouping.py``.)
    """
    return [line for _, line in numbered_lines(text)]


def numbered_lines(text: str, last: int | None = None) -> list[tuple[int, str]]:
    """:func:`clean_lines`, each with its 1-based line number in ``text``; the ``last`` ones only.

    Lines are counted at ``\\n`` as evidence counts them; a carriage return
    inside a line (a progress bar redrawn) splits what a person reads into
    several lines that share one number.

    >>> numbered_lines("a\\r\\n\\x1b[32m\\x1b[0m\\n10%\\r100% done\\n")
    [(1, 'a'), (3, '10%'), (3, '100% done')]

    Only the lines that open or close a fold (or mark a cut) are read in
    full on the way down; the rest are cleaned from the end, until ``last``
    are found: a 64 KB log costs the lines asked for, not all of its lines.
    """
    physical = text.split("\n")
    # Lines that open or close a fold or mark a cut, read first; inside a boilerplate
    # fold (between two of them) nothing is kept.
    read: dict[int, list[str]] = {}
    hidden: list[tuple[int, int]] = []  # [from, to) physical line indices inside a fold
    skipping, since, index, at = "", 0, 0, 0
    for start in _fold_or_cut(text):
        if start < at:
            continue  # a second marker on a line already read
        index += text.count("\n", at, start)
        at = text.find("\n", start)
        at = len(text) if at < 0 else at
        if skipping:
            hidden.append((since, index))
        kept: list[str] = []
        for line in _segments(physical[index]):
            fold = FOLD.match(line)
            if fold is not None:
                kind, name = fold.groups()
                if kind == "start" and BOILERPLATE_FOLDS.match(name):
                    skipping = name
                elif kind == "end" and name == skipping:
                    skipping = ""
            elif CUT.match(line):
                skipping = ""
            elif not skipping and line and not BOILERPLATE.match(line):
                kept.append(line)
        read[index] = kept
        since = index + 1
    if skipping:
        hidden.append((since, len(physical)))
    found: list[tuple[int, str]] = []
    index = len(physical) - 1
    while index >= 0 and (last is None or len(found) < last):
        if hidden and index < hidden[-1][1]:
            if index >= hidden[-1][0]:
                index = hidden[-1][0] - 1
                continue
            hidden.pop()
            continue
        lines = read.get(index)
        if lines is None:
            lines = [ln for ln in _segments(physical[index]) if ln and not BOILERPLATE.match(ln)]
        found.extend((index + 1, line) for line in reversed(lines))
        index -= 1
    found.reverse()
    return found if last is None else found[-last:]


def _fold_or_cut(text: str) -> list[int]:
    """Where a fold opens or closes or bounding cut, in order (``str.find``: faster than a regex)."""
    found = []
    for marker in ("travis_fold:", "characters omitted"):
        at = text.find(marker)
        while at >= 0:
            found.append(at)
            at = text.find(marker, at + 1)
    return sorted(found)


def _segments(line: str) -> list[str]:
    """What a person reads of one line of a log: cleaned, split where a carriage return was."""
    if "\r" in line:
        line = line.replace("\r", SEGMENT)  # strip_ansi would make it a line break
    cleaned = strip_ansi(line)
    parts = cleaned.split(SEGMENT) if SEGMENT in cleaned else (cleaned,)
    return [LINE_STAMP.sub("", part).strip() for part in parts]


def mask_volatile(line: str) -> str:
    """A line with what differs between runs of one cause taken out (lower-cased).

    Times, dates, ids, hex, durations, paths and numbers, in that order; the
    fingerprint, grouping, the job's normal, the explanation cache and the
    query text all read it. What names the cause stays (``core.rules.codes``): error
    codes, exit codes, signals and HTTP statuses.

    >>> mask_volatile("Error at /home/travis/build/a/b/src/x.c:12:3 after 11 min (run 7f3a9c2e)")
    'error at <path>/x.c:<n> after <dur> (run <hex>)'
    >>> mask_volatile("src/app.ts(3,5): error TS2322: Type 'number' is not assignable")
    "src/app.ts(<n>): error ts2322: type 'number' is not assignable"
    >>> mask_volatile("Process completed with exit code 137 after 12s")
    'process completed with exit code 137 after <dur>'
    """
    parts: list[str] = []
    at = 0
    for kept in KEPT.finditer(line):
        if not is_code(kept.group()):
            continue  # a hash in upper case, not a code
        parts.append(_masked(line[at : kept.start()]))
        parts.append(" ".join(kept.group().lower().split()))
        at = kept.end()
    parts.append(_masked(line[at:]))
    return "".join(parts).strip()


def _masked(text: str) -> str:
    text = text.lower()
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text
