"""Reading a history of failures: JSON Lines, one failure's facts per line, streamed.

A history can be hundreds of MB. Nothing here reads a file whole: lines are
read one at a time with a byte cap (a line longer than ``max_line_bytes`` is
skipped to its end and reported, never held), text facts are bounded with
``theow_client.facts.bound_facts`` exactly as the client bounds them, and
invalid UTF-8 is replaced. Bad lines are not fatal: each becomes a ``Line``
with a ``problem`` naming what is wrong, and reading goes on.

>>> lines = list(read_lines(path))                        # doctest: +SKIP
>>> [(ln.number, ln.problem) for ln in lines if ln.problem]  # doctest: +SKIP
[(3, 'not JSON: Expecting value (column 1)'), (7, 'duplicate of line 2')]

Duplicates: a line byte-identical to an earlier one (surrounding whitespace
aside) is reported as ``duplicate of line N`` and not replayed. Two real
failures never produce identical facts (run ids, timestamps differ); an
identical line is an export artefact, and replaying it would inflate the hit
rate. Detecting them keeps an 8-byte digest per distinct line (about 100 bytes
of memory per line, whatever the line's size), for at most
``MAX_TRACKED_LINES`` lines; past that, later lines are no longer checked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from theow_client.facts import DEFAULT_FACT_LIMIT, FactsError, bound_facts, decode

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_TRACKED_LINES = 5_000_000
BLOCK = 1024 * 1024


@dataclass(frozen=True)
class SourceFile:
    """What identifies a file's content: two replays of it can be compared."""

    path: str
    sha256: str
    size: int
    lines: int  # non-blank lines, each one replay item


@dataclass(frozen=True)
class RawLine:
    number: int  # 1-based line number in the file
    data: bytes | None  # None: longer than the cap, skipped
    size: int
    duplicate_of: int | None = None


@dataclass(frozen=True)
class Line:
    """One parsed line: its facts, or the problem that keeps it from being replayed."""

    number: int
    facts: dict[str, Any] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


def _physical_lines(
    handle: IO[bytes], max_bytes: int, digest: Any = None
) -> Iterator[tuple[bytes | None, int]]:
    """Yield (line bytes, or None when longer than ``max_bytes``; its size in bytes).

    ``digest`` (a hashlib object), when given, sees every byte read.
    """
    while True:
        data = handle.readline(max_bytes + 1)
        if not data:
            return
        if digest is not None:
            digest.update(data)
        if len(data) <= max_bytes or data.endswith(b"\n"):
            yield data, len(data)
            continue
        size = len(data)
        del data
        while True:  # the rest of an overlong line, a block at a time, dropped
            rest = handle.readline(BLOCK)
            if digest is not None:
                digest.update(rest)
            size += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield None, size


def scan(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> SourceFile:
    """One streaming pass: the content hash and the number of non-blank lines."""
    digest = hashlib.sha256()
    size = count = 0
    with path.open("rb") as handle:
        for data, length in _physical_lines(handle, max_line_bytes, digest):
            size += length
            if data is None or data.strip():
                count += 1
    return SourceFile(str(path.resolve()), digest.hexdigest(), size, count)


def raw_lines(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[RawLine]:
    """Non-blank lines with their numbers, duplicates marked; nothing parsed yet."""
    first_seen: dict[bytes, int] = {}
    with path.open("rb") as handle:
        for number, (data, size) in enumerate(_physical_lines(handle, max_line_bytes), start=1):
            if data is None:
                yield RawLine(number, None, size)
                continue
            data = data.strip()
            if not data:
                continue
            key = hashlib.blake2b(data, digest_size=8).digest()
            seen = first_seen.get(key)
            if seen is None and len(first_seen) < MAX_TRACKED_LINES:
                first_seen[key] = number
            yield RawLine(number, data, size, duplicate_of=seen)


def parse_line(
    raw: RawLine,
    fact_limit: int = DEFAULT_FACT_LIMIT,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Line:
    """Facts bounded and validated, or the problem with this line."""
    if raw.data is None:
        return Line(raw.number, problem=f"line longer than {max_line_bytes} bytes ({raw.size})")
    if raw.duplicate_of is not None:
        return Line(raw.number, problem=f"duplicate of line {raw.duplicate_of}")
    try:
        value = json.loads(decode(raw.data))
    except json.JSONDecodeError as exc:
        return Line(raw.number, problem=f"not JSON: {exc.msg} (column {exc.colno})")
    except RecursionError:
        return Line(raw.number, problem="not JSON: nested too deeply")
    if not isinstance(value, dict):
        return Line(raw.number, problem=f"not a JSON object but {_json_type(value)}")
    try:
        facts, truncated = bound_facts(value, fact_limit)
    except FactsError as exc:
        return Line(raw.number, problem=f"invalid facts: {exc}")
    if not facts:
        return Line(raw.number, problem="empty object: no facts")
    return Line(raw.number, facts, {"truncated": truncated} if truncated else {})


def read_lines(
    path: Path,
    fact_limit: int = DEFAULT_FACT_LIMIT,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[Line]:
    """Every non-blank line of ``path``, parsed, in order."""
    for raw in raw_lines(path, max_line_bytes):
        yield parse_line(raw, fact_limit, max_line_bytes)


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
