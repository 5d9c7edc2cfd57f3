"""Reading a history of failures: JSON Lines, one failure's facts per line, streamed.

The one reader of JSON Lines files: ``theow replay`` and ``theow rules eval``
both read through it. A file named ``.gz`` is gunzipped as it is read;
``spool`` keeps standard input (``-``) as a file, so a replay of it can be
resumed. A file that is not JSON Lines at all (gzip data under another name, a
binary file, text where none of the first lines is a JSON object) is refused
by ``scan`` with a ``HistoryError`` naming the file and what is wrong, before
anything is replayed:

>>> scan(Path("history.jsonl"))                           # doctest: +SKIP
HistoryError: history.jsonl: gzip-compressed data; name it history.jsonl.gz to read it as gzip

A history can be hundreds of MB. Nothing here reads a file whole: lines are
read one at a time with a byte cap (a line longer than ``max_line_bytes`` is
skipped to its end and reported, never held), text facts are bounded with
``theow_client.facts.bound_facts`` exactly as the client bounds them (with the lines
they kept, so line numbers count in the history's own logs), and
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

import gzip
import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, cast

from theow_client.facts import DEFAULT_FACT_LIMIT, FactsError, bound_facts_kept, decode
from theow_client.jsontypes import JsonObject
from theow_client.lines import to_wire

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_TRACKED_LINES = 5_000_000
BLOCK = 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"
STDIN = "-"
# ``scan`` judges a file by its first lines: a history with a few bad lines is
# read (they are reported), one where (nearly) none of them is a JSON object
# is not JSON Lines. At most 1 in 10 valid is "nearly none".
SNIFF_LINES = 100
SNIFF_MIN_VALID = 0.1


class _Digest(Protocol):
    """What ``_physical_lines`` uses of a hashlib object."""

    def update(self, data: bytes, /) -> None: ...


class HistoryError(ValueError):
    """A file that cannot be read as JSON Lines at all; the message names it and why."""


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
    facts: JsonObject | None = None
    notes: JsonObject = field(default_factory=dict)
    problem: str | None = None
    # Which lines of each cut fact were kept (``theow_client.lines``, wire form).
    kept_lines: JsonObject = field(default_factory=dict)


def _physical_lines(
    handle: IO[bytes], max_bytes: int, digest: _Digest | None = None
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


@contextmanager
def open_history(path: Path) -> Iterator[IO[bytes]]:
    """The bytes of a JSON Lines file, gunzipped when its name ends in ``.gz``.

    Raises ``HistoryError`` for a missing file, and for gzip data under another
    name or a ``.gz`` name on other data: read as they are, either gives lines
    of noise and a replay where nothing matches.
    """
    if not path.exists():
        raise HistoryError(f"{path}: no such file")
    if not path.is_file():
        raise HistoryError(f"{path}: not a file")
    compressed = path.suffix == ".gz"
    with path.open("rb") as handle:
        magic = handle.read(len(GZIP_MAGIC))
        handle.seek(0)
        if magic == GZIP_MAGIC and not compressed:
            raise HistoryError(
                f"{path}: gzip-compressed data; name it {path.name}.gz to read it as gzip"
            )
        if compressed and magic and magic != GZIP_MAGIC:
            raise HistoryError(f"{path}: named .gz but not gzip data")
        if not compressed:
            yield handle
            return
        try:
            with gzip.GzipFile(fileobj=handle) as unzipped:
                yield cast(IO[bytes], unzipped)  # a binary stream, as typeshed does not say
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise HistoryError(f"{path}: damaged gzip data ({exc or type(exc).__name__})") from None


def spool(stream: IO[bytes], directory: Path) -> Path:
    """Keep standard input in ``directory`` as a file named by its content; return it.

    A replay reads its source twice (``scan``, then the lines) and again on
    resume, which a pipe cannot give. The same input gives the same file, so a
    second replay of it is compared with the first. Gzip data is named ``.gz``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    handle, draft = tempfile.mkstemp(dir=directory, prefix=".stdin-")
    try:
        with os.fdopen(handle, "wb") as out:
            head = b""
            while block := stream.read(BLOCK):
                head = head or block[: len(GZIP_MAGIC)]
                digest.update(block)
                out.write(block)
        suffix = ".jsonl.gz" if head == GZIP_MAGIC else ".jsonl"
        kept = directory / f"stdin-{digest.hexdigest()[:16]}{suffix}"
        os.replace(draft, kept)
    except BaseException:
        Path(draft).unlink(missing_ok=True)
        raise
    return kept


def scan(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> SourceFile:
    """One streaming pass: the content hash and the number of non-blank lines.

    Raises ``HistoryError`` when the file cannot be read as JSON Lines (see
    ``open_history``), or when (nearly) none of its first ``SNIFF_LINES``
    lines is a JSON object.
    """
    digest = hashlib.sha256()
    size = count = 0
    sniff = _Sniff(path)
    with open_history(path) as handle:
        lines = _physical_lines(handle, max_line_bytes, digest)
        for number, (data, length) in enumerate(lines, start=1):
            size += length
            if data is None or data.strip():
                count += 1
                sniff.see(number, data)
    sniff.judge()
    return SourceFile(str(path.resolve()), digest.hexdigest(), size, count)


def check(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
    """Raise ``HistoryError`` as ``scan`` would, reading only the first lines."""
    sniff = _Sniff(path)
    with open_history(path) as handle:
        for number, (data, _) in enumerate(_physical_lines(handle, max_line_bytes), start=1):
            if data is None or data.strip():
                sniff.see(number, data)
                if sniff.seen >= SNIFF_LINES:
                    break
    sniff.judge()


class _Sniff:
    """Whether the first lines of a file look like JSON Lines."""

    def __init__(self, path: Path) -> None:
        self.path, self.seen, self.valid = path, 0, 0
        self.binary, self.first_problem = False, ""

    def see(self, number: int, data: bytes | None) -> None:
        if self.seen >= SNIFF_LINES:
            return
        self.seen += 1
        if data is None:
            self.first_problem = self.first_problem or f"line {number}: too long"
            return
        self.binary = self.binary or b"\0" in data
        _, problem = json_object(data)
        if problem is None:
            self.valid += 1
        else:
            self.first_problem = self.first_problem or f"line {number}: {problem}"

    def judge(self) -> None:
        if self.seen == 0 or self.valid >= max(1, self.seen * SNIFF_MIN_VALID):
            return
        if self.binary and self.valid == 0:
            raise HistoryError(f"{self.path}: binary data, not JSON Lines")
        if self.valid:
            found = f"only {self.valid} of its first {self.seen} lines are JSON objects"
        elif self.seen == 1:
            found = "its one line is not a JSON object"
        else:
            found = f"none of its first {self.seen} lines is a JSON object"
        raise HistoryError(f"{self.path}: not JSON Lines: {found} ({self.first_problem})")


def raw_lines(
    path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, duplicates: bool = True
) -> Iterator[RawLine]:
    """Non-blank lines with their numbers, duplicates marked (when asked); nothing parsed yet."""
    first_seen: dict[bytes, int] = {}
    with open_history(path) as handle:
        for number, (data, size) in enumerate(_physical_lines(handle, max_line_bytes), start=1):
            if data is None:
                yield RawLine(number, None, size)
                continue
            data = data.strip()
            if not data:
                continue
            if not duplicates:
                yield RawLine(number, data, size)
                continue
            key = hashlib.blake2b(data, digest_size=8).digest()
            seen = first_seen.get(key)
            if seen is None and len(first_seen) < MAX_TRACKED_LINES:
                first_seen[key] = number
            yield RawLine(number, data, size, duplicate_of=seen)


def json_object(data: bytes) -> tuple[JsonObject | None, str | None]:
    """A line's JSON object, or what keeps it from being one."""
    try:
        value = json.loads(decode(data))
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} (column {exc.colno})"
    except RecursionError:
        return None, "not JSON: nested too deeply"
    if not isinstance(value, dict):
        return None, f"not a JSON object but {_json_type(value)}"
    return value, None


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
    value, problem = json_object(raw.data)
    if value is None:
        return Line(raw.number, problem=problem)
    try:
        facts, truncated, kept = bound_facts_kept(value, fact_limit)
    except FactsError as exc:
        return Line(raw.number, problem=f"invalid facts: {exc}")
    if not facts:
        return Line(raw.number, problem="empty object: no facts")
    kept = {fact: pieces for fact, pieces in kept.items() if fact in facts}
    notes = {"truncated": truncated} if truncated else {}
    return Line(raw.number, facts, notes, kept_lines=to_wire(kept))


def read_lines(
    path: Path,
    fact_limit: int = DEFAULT_FACT_LIMIT,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[Line]:
    """Every non-blank line of ``path``, parsed, in order."""
    for raw in raw_lines(path, max_line_bytes):
        yield parse_line(raw, fact_limit, max_line_bytes)


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
