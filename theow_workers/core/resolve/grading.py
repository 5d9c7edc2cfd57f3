"""Grading a verdict against a person's label: the corpus definitions, in code.

A label marks the text (``chunk``) that states why a build failed. A verdict
is *grounded* when the line it shows a person as "this is why" is inside that
chunk, or the chunk's first line is inside what the rule matched, after both
are normalized (ANSI escapes removed, whitespace collapsed, list and quote
markers stripped).

This normalization is the corpus README's, kept as written so figures compare
across versions; it is not how Theow reads a log (``core.logs.text``): on the
corpus the two differ (the README's bare ``[..m`` also takes the ``[m`` of
``[minimized]``).

>>> grounded("  \\x1b[31mFAILED tests/test_a.py::test_b\\x1b[0m", "", "x\\nFAILED tests/test_a.py::test_b - assert 1")
True
>>> grounded("error", "error", "error: something else broke")
False
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\[[0-9;]*m")
SPACES = re.compile(r"\s+")
LEAD = " -*>=|"
MIN_CHARS = 8
MAX_CHARS = 200


def normalize(text: str) -> str:
    return SPACES.sub(" ", ANSI.sub("", text)).strip().lstrip(LEAD)


def first_line(text: str) -> str:
    for line in text.splitlines():
        if normalize(line):
            return line
    return ""


def grounded(evidence_line: str, matched: str, chunk: str) -> bool:
    """Whether the evidence points at the labelled chunk (see the module docstring)."""
    target = normalize(chunk)
    shown = normalize(evidence_line)[:MAX_CHARS]
    if len(shown) >= MIN_CHARS and shown in target:
        return True
    head = normalize(first_line(chunk))[:MAX_CHARS]
    return len(head) >= MIN_CHARS and head in normalize(matched)


def survives(chunk: str, text: str) -> bool:
    """Whether the labelled chunk is still whole in ``text`` (after bounding, say)."""
    target = normalize(chunk)
    return bool(target) and target in normalize(text)
