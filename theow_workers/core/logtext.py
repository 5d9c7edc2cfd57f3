"""A CI log as a person reads it: no colour codes, no CI-system boilerplate, the failing step first.

CI systems wrap a tool's output in their own text: Travis' ``travis_fold`` and
``travis_time`` markers, its worker and system information (the ``sudo -V``
header reads like error lines: "password prompt timeout",
"-Werror=format-security"), ``The command "…" exited with 1.``; GitHub
Actions' ``##[group]``/``##[endgroup]`` and per-line time stamps. None of it
says why a build failed, and all of it differs between runs, so grouping,
display and error-line picking read the log through :func:`clean_lines`.

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

# The bare "[31m" a log keeps when the escape byte itself was dropped.
BARE_COLOUR = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
LINE_BREAK = re.compile(r"\r\n|\r|\n")
# A time stamp a CI system puts before every line (GitHub Actions, Jenkins timestamper).
LINE_STAMP = re.compile(r"^\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\]? ?")
# Folds whose whole content is the CI system describing itself.
BOILERPLATE_FOLDS = re.compile(r"^(?:worker_info|system_info|cache\.\d+|docker_mtu|resolvconf)")
FOLD = re.compile(r"^travis_fold:(start|end):(\S+)")
# Where bounding cut the log (``theow_client.facts.CUT_MARKER``): a fold's end may be gone.
CUT = re.compile(r"^\[\.\.\. theow: \d+ characters omitted \.\.\.\]$")
# Lines that belong to the CI system, never to the tool that failed.
BOILERPLATE = re.compile(
    r"^(?:travis_(?:fold|time):|##\[(?:group|endgroup|section|command|debug)\]|::(?:end)?group::|"
    r"\$ |Done\. Your build exited with|Your build has been stopped|"
    r"The command \".*\" (?:exited with|failed)|Setting environment variables from \.travis\.yml|"
    r"Post job cleanup|Cleaning up orphan processes|Using worker:|Worker information|"
    r"Build system information|\[command\])",
)


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (colours, erase-line, clipboard writes)
    or control characters, as a person reads it and as a terminal may print it."""
    return BARE_COLOUR.sub("", printable(text))


def clean_lines(text: str) -> list[str]:
    """The log's lines without colour codes, time stamps and CI boilerplate, stripped, non-empty.

    (Keeping only the first failing step's lines, as Travis' ``The command "…"
    exited with N`` delimits it, was measured too: it loses a cause stated in a
    later step, and grouped worse on ``benchmarks/grouping.py``.)
    """
    raw = [LINE_STAMP.sub("", line).strip() for line in LINE_BREAK.split(strip_ansi(text))]
    kept: list[str] = []
    skipping = ""
    for line in raw:
        fold = FOLD.match(line)
        if fold is not None:
            kind, name = fold.groups()
            if kind == "start" and BOILERPLATE_FOLDS.match(name):
                skipping = name
            elif kind == "end" and name == skipping:
                skipping = ""
            continue
        if CUT.match(line):
            skipping = ""
            continue
        if skipping or not line or BOILERPLATE.match(line):
            continue
        kept.append(line)
    return kept
