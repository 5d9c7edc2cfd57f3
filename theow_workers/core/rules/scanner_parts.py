"""The scanner's compiled parts: Hyperscan databases, each over its own set of patterns.

A rules version's scanner (``core.rules.scanner``) is made of parts. A part
is one Hyperscan database over some patterns of one fact, addressed by what
it compiles (its expressions and flags, Hyperscan's version): kept on disk
under that address, it is loaded in milliseconds by any process that needs
the same part again. Hyperscan reports a part's local ids; the scanner maps
them to its own patterns, so a part outlives the rules version it was built
for. That is what makes a rules change cheap: the next version keeps the
previous version's parts whose patterns are still (mostly) wanted, and
compiles only the patterns no kept part holds, a rule's worth in milliseconds,
instead of the whole library in seconds (``Scanner(rules, previous=...)``).

Compiling is where Hyperscan's limits show: one pattern it cannot compile
makes a whole database fail, so a part that fails is sorted out pattern by
pattern, each in its exact mode, its prefilter mode (may report a match that
is not one, never misses one) or left out (checked the old way).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

try:  # pragma: no cover - import guard
    import hyperscan
except ImportError:  # the fallback: every condition is checked the old way
    hyperscan = None  # type: ignore[assignment]

from theow_workers.core.rules.reach import KEEP_OUT

log = logging.getLogger("theow.scanner")

_LEADING_FLAGS = re.compile(r"^\(\?([aiLmsux]*)(?:-([imsx]+))?\)")
_NAMED_GROUP = re.compile(r"(?<!\\)\(\?P<\w+>")
# Syntax Hyperscan may compile only in prefilter mode or not at all: lookarounds, back
# references, \K, atomic groups, conditionals, possessive quantifiers, a `$` with more after it.
_SUSPECT = re.compile(rb"\(\?<?[=!]|\\[1-9gkK]|\(\?[>(]|[*+?}]\+|(?<!\\)\$(?!\)*\Z)")
RECENT_PARTS = 64  # parts a new process may start from (the disk's ``recent.json``)

Expression = tuple[int, bytes, int]  # local id, pattern, flags


@dataclass(frozen=True)
class Pattern:
    fact: str
    text: str  # the rule's regex, or the literal of a ``contains``
    literal: bool


@dataclass(frozen=True, eq=False)
class Part:
    """One compiled database over ``patterns`` (its local ids are their positions)."""

    key: str
    fact: str
    patterns: tuple[Pattern, ...]
    database: hyperscan.Database | None
    ok: frozenset[int]  # local ids that made it into the database
    loaded: bool  # from the disk, not compiled in this process


def compile_part(fact: str, patterns: Sequence[Pattern]) -> Part:
    """The part over ``patterns`` of ``fact``: from the disk when it is there, else compiled."""
    ordered = tuple(sorted(patterns, key=_kind))
    exprs = tuple((i, *_expression(p)) for i, p in enumerate(ordered)) if hyperscan else ()
    key = hashlib.sha256(
        repr((getattr(hyperscan, "__version__", ""), fact, exprs)).encode()
    ).hexdigest()
    if hyperscan is None or not exprs:
        return Part(key, fact, ordered, None, frozenset(), True)
    cached = _load(key, fact, ordered)
    if cached is not None:
        return cached
    usable = _usable(exprs)
    database = _database(usable) if usable else None
    part = Part(key, fact, ordered, database, frozenset(i for i, _, _ in usable), False)
    _store(part)
    return part


def recent_parts() -> list[Part]:
    """The parts this machine built or loaded last, newest first: where a new process starts."""
    directory = _cache_dir()
    if directory is None or hyperscan is None:
        return []
    try:
        keys = json.loads((directory / "recent.json").read_text())
    except (OSError, ValueError):
        return []
    found = (_load(str(key)) for key in keys if isinstance(key, str))
    return [part for part in found if part is not None]


def remember(parts: Sequence[Part]) -> None:
    """Note ``parts`` as the newest on this machine (best effort: a cache)."""
    directory = _cache_dir()
    if directory is None or not parts:
        return
    try:
        known = json.loads((directory / "recent.json").read_text())
    except (OSError, ValueError):
        known = []
    keys = list(dict.fromkeys([p.key for p in parts] + [k for k in known if isinstance(k, str)]))
    _write(directory, "recent.json", json.dumps(keys[:RECENT_PARTS]).encode())


def shards(patterns: Sequence[Pattern], size: int) -> list[list[Pattern]]:
    """``patterns`` cut into parts of at most ``size``, patterns of one kind together.

    A database mixing caseless ``.*`` patterns with plain literals scans slower
    than each kind apart (``benchmarks/match.py``).
    """
    ordered = sorted(patterns, key=_kind)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def _kind(pattern: Pattern) -> tuple[int, bool, bytes]:
    text, flags = _expression(pattern) if hyperscan else (pattern.text.encode(), 0)
    return (flags, b".*" in text, text)


def hyperscan_form(pattern: str) -> tuple[bytes, int]:
    """A Python regex as Hyperscan reads it: leading flags as flags, group names dropped.

    Rules are searched with MULTILINE and DOTALL (``REGEX_FLAGS``); a leading
    ``(?-s)`` or ``(?m-s)`` turns DOTALL off for the whole pattern, as in ``regex``.
    """
    flags = hyperscan.HS_FLAG_SINGLEMATCH | hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_DOTALL
    found = _LEADING_FLAGS.match(pattern)
    if found:
        on, off = found.group(1), found.group(2) or ""
        pattern = pattern[found.end() :]
        if "x" in on:
            pattern = f"(?x){pattern}"
        flags |= hyperscan.HS_FLAG_CASELESS if "i" in on else 0
        flags &= ~hyperscan.HS_FLAG_MULTILINE if "m" in off else ~0
        flags &= ~hyperscan.HS_FLAG_DOTALL if "s" in off else ~0
    pattern = _NAMED_GROUP.sub("(?:", pattern).replace(r"\Z", r"\z")
    # `\K` consumes nothing: without it a match ends where it does with it.
    pattern = KEEP_OUT.sub(r"\1", pattern)
    if not pattern.isascii():
        flags |= hyperscan.HS_FLAG_UTF8
    return pattern.encode("utf-8"), flags


@lru_cache(maxsize=65536)
def _expression(pattern: Pattern) -> tuple[bytes, int]:
    if pattern.literal:
        literal = re.escape(pattern.text)
        flags = hyperscan.HS_FLAG_SINGLEMATCH
        return literal.encode("utf-8"), flags | (0 if literal.isascii() else hyperscan.HS_FLAG_UTF8)
    return hyperscan_form(pattern.text)


def _cache_dir() -> Path | None:
    """``THEOW_SCANNER_CACHE`` (``off``: none), else ``~/.cache/theow/scanner``."""
    configured = os.environ.get("THEOW_SCANNER_CACHE", "")
    if configured.lower() == "off":
        return None
    return Path(configured) if configured else Path.home() / ".cache" / "theow" / "scanner"


def _load(key: str, fact: str | None = None, patterns: tuple[Pattern, ...] = ()) -> Part | None:
    directory = _cache_dir()
    if directory is None:
        return None
    try:
        data = (directory / f"{key}.part").read_bytes()
        size = int.from_bytes(data[:8], "big")
        header = json.loads(data[8 : 8 + size])
        stored = tuple(Pattern(header["fact"], text, bool(lit)) for text, lit in header["patterns"])
        if patterns and stored != patterns:
            return None  # another part under this key: never trusted
        blob = data[8 + size :]
        database = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK) if blob else None
        return Part(key, header["fact"], stored, database, frozenset(header["ok"]), True)
    except (OSError, ValueError, KeyError, TypeError, hyperscan.error):
        return None  # absent or unreadable: compile


def _store(part: Part) -> None:
    directory = _cache_dir()
    if directory is None:
        return
    blob = hyperscan.dumpb(part.database) if part.database is not None else b""
    header = json.dumps(
        {
            "fact": part.fact,
            "patterns": [[p.text, p.literal] for p in part.patterns],
            "ok": sorted(part.ok),
        }
    ).encode()
    _write(directory, f"{part.key}.part", len(header).to_bytes(8, "big") + header + blob)


def _write(directory: Path, name: str, data: bytes) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f"{name}.{os.getpid()}.tmp"
        partial.write_bytes(data)
        partial.replace(directory / name)  # atomic: a reader never sees half a file
    except OSError as exc:
        log.warning("cannot keep the compiled scanner in %s: %s", directory, exc)


def _usable(exprs: tuple[Expression, ...]) -> tuple[Expression, ...]:
    """``exprs`` as Hyperscan takes them: each in its exact or prefilter mode, or left out.

    One bad pattern makes a whole database fail to compile, so a part that
    fails is sorted out pattern by pattern (each pattern's mode is cached).
    """
    try:
        _database(exprs)
        return exprs
    except hyperscan.error:
        pass
    # Compiling a pattern alone costs about what it costs in the database, so only
    # those with syntax Hyperscan may reject are tried alone; the guess is compiled,
    # and a pattern it missed costs one failed compile, never a wrong database.
    guess = _with_modes(exprs, lambda expression: _SUSPECT.search(expression) is not None)
    if guess != exprs:
        try:
            _database(guess)
            return guess
        except hyperscan.error:
            pass
    return _with_modes(exprs, lambda expression: True)


def _with_modes(
    exprs: tuple[Expression, ...], check: Callable[[bytes], bool]
) -> tuple[Expression, ...]:
    """``exprs`` with each pattern ``check`` selects in its mode (or left out), the rest as written."""
    usable = []
    for pid, expression, flags in exprs:
        found = _mode(expression, flags) if check(expression) else (expression, 0)
        if found is not None:
            usable.append((pid, found[0], flags | found[1]))
    return tuple(usable)


@lru_cache(maxsize=65536)
def _mode(expression: bytes, flags: int) -> tuple[bytes, int] | None:
    """The pattern and its mode Hyperscan compiles: as written, in prefilter mode, or
    loosened (:func:`loosened`) in prefilter mode; None when none of them compiles."""
    prefilter = hyperscan.HS_FLAG_PREFILTER
    for form, mode in ((expression, 0), (expression, prefilter), (loosened(expression), prefilter)):
        try:
            hyperscan.Database().compile(expressions=[form], flags=[flags | mode])
        except hyperscan.error:
            continue
        return form, mode
    return None


def loosened(expression: bytes) -> bytes:
    r"""The pattern with what even Hyperscan's prefilter mode refuses widened away.

    A ``$`` with more after it (``\r?$\n``) is dropped and a back reference
    becomes ``(?s:.*)``: each matches at least what the pattern matches, so
    the scanner still never misses a match, and the full engine decides.

    >>> loosened(rb"a\r?$(?:\n(b))?\1[$]$")
    b'a\\r?(?:\\n(b))?(?s:.*)[$]$'
    """
    out, i, in_class = bytearray(), 0, False
    while i < len(expression):
        char = expression[i : i + 1]
        if char == b"\\":
            pair = expression[i : i + 2]
            if not in_class and pair[1:2].isdigit() and pair[1:2] != b"0":
                out += b"(?s:.*)"
            else:
                out += pair
            i += 2
            continue
        if in_class:
            in_class = char != b"]" or expression[i - 1 : i] == b"["
        elif char == b"[":
            in_class = True
            if expression[i + 1 : i + 2] == b"^":
                out += b"[^"
                i += 2
                continue
        elif char == b"$" and expression[i + 1 :].strip(b")"):
            i += 1
            continue
        out += char
        i += 1
    return bytes(out)


@lru_cache(maxsize=1024)
def _database(exprs: tuple[Expression, ...]) -> hyperscan.Database:
    database = hyperscan.Database()
    database.compile(
        expressions=[e for _, e, _ in exprs],
        ids=[pid for pid, _, _ in exprs],
        elements=len(exprs),
        flags=[f for _, _, f in exprs],
    )
    return database
