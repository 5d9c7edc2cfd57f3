"""Applying a proposal's unified diff to the exact file it was made against.

A diff is applied only when the target's current content hashes to the
``base_sha256`` recorded with the proposal (or, for a new file, when the file
does not exist yet): a file that changed since the diff was made is refused
rather than merged by guesswork.

>>> apply_diff("a\\nb\\n", "--- a/x\\n+++ b/x\\n@@ -1,2 +1,2 @@\\n a\\n-b\\n+c\\n")
'a\\nc\\n'
"""

from __future__ import annotations

import hashlib
import re

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    pass


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def apply_diff(original: str, diff: str) -> str:
    """The new content; raises PatchError when a hunk's context does not match."""
    old = original.splitlines(keepends=True)
    new: list[str] = []
    position = 0  # index into old
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines) and not lines[i].startswith("@@"):
        i += 1  # skip the ---/+++ header
    while i < len(lines):
        found = HUNK.match(lines[i])
        if not found:
            raise PatchError(f"malformed hunk header: {lines[i].rstrip()!r}")
        start = max(int(found.group(1)) - 1, 0) if found.group(2) != "0" else int(found.group(1))
        if start < position:
            raise PatchError("overlapping hunks")
        new.extend(old[position:start])
        position = start
        i += 1
        while i < len(lines) and not lines[i].startswith("@@"):
            line = lines[i]
            tag, body = line[:1], line[1:]
            if tag == "\\":  # "\ No newline at end of file"
                i += 1
                continue
            if tag in (" ", "-"):
                if position >= len(old) or old[position].rstrip("\n") != body.rstrip("\n"):
                    raise PatchError(f"context does not match at line {position + 1}")
                position += 1
                if tag == " ":
                    new.append(old[position - 1])
            elif tag == "+":
                new.append(body)
            else:
                raise PatchError(f"malformed diff line: {line.rstrip()!r}")
            i += 1
    new.extend(old[position:])
    return "".join(new)
