"""One pass over each fact for every rule's ``regex`` and ``contains`` conditions.

Trying rules one after another costs time in proportion to the rule count.
Instead every regex and ``contains`` condition on a fact (each operator whose
``scan`` says what to look for: ``core.rules.operators``) is compiled into
Hyperscan databases (no backtracking, one scan of the text for all of them),
built once per rules version. A scan says which patterns occur and where the
first occurrence ends; only rules all of whose scanned conditions occurred are
handed to the full regex engine, which then runs from just before the hit
(for captures and the exact semantics of Python's ``regex``).

Patterns are scanned with MULTILINE and DOTALL, as the full engine searches
them (``REGEX_FLAGS``); one whose ``.`` may cross lines is confirmed from the
start of the text, since its match may begin any distance before the hit.

Patterns Hyperscan cannot compile exactly (lookarounds, back references) are
compiled in its prefilter mode, which may report a match that is not one but
never misses one: the full engine decides. What even prefilter mode rejects
stays out of the scanner and is checked the old way, under the time limit.

>>> from theow_workers.core.rules.schema import parse_rule
>>> rule = parse_rule("name: r\\nmode: track\\nwhen: [{fact: log, regex: 'error: (\\\\w+)'}]")
>>> scanner = Scanner([rule])
>>> hits = scanner.scan({"log": "ok\\nerror: boom\\n"})
>>> [r.name for r in scanner.candidates(hits)]
['r']
>>> hits.start("log", "error: (\\\\w+)")  # a line start at or before the hit
0

Warning: Hyperscan reads ``\\w``, ``\\d`` and ``\\s`` as ASCII in a pattern
written in ASCII; a pattern with non-ASCII text is compiled in UTF-8 mode.
``theow rules check`` runs every rule's examples through the scanner, so a
pattern the scanner reads differently from Python is caught at review.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import cast

from theow_client.jsontypes import JsonObject
from theow_workers.core.rules.schema import FactCondition, Rule, as_text

try:  # pragma: no cover - import guard
    import hyperscan
except ImportError:  # the fallback: every condition is checked the old way
    hyperscan = None  # type: ignore[assignment]

log = logging.getLogger("theow.scanner")

# Hyperscan's compile time grows faster than linearly with a database's size,
# and each database costs a scan: small libraries get shards of 200 patterns,
# large ones at most MAX_SHARDS shards per fact.
SHARD_SIZE = 200
MAX_SHARDS = 3
BACK_BYTES = 4096  # a match may start this far before the line its first occurrence ends on
_LEADING_FLAGS = re.compile(r"^\(\?([aiLmsux]*)(?:-([imsx]+))?\)")
# A `.` outside a character class: escapes and classes (with `]` first in them) skipped.
_BARE_DOT = re.compile(r"(?>\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|[^.\\\[])*+\.", re.DOTALL)
_NAMED_GROUP = re.compile(r"(?<!\\)\(\?P<\w+>")
# Syntax Hyperscan may compile only in prefilter mode or not at all: lookarounds, back
# references, \K, atomic groups, conditionals, possessive quantifiers, a `$` with more after it.
_SUSPECT = re.compile(rb"\(\?<?[=!]|\\[1-9gkK]|\(\?[>(]|[*+?}]\+|(?<!\\)\$(?!\)*\Z)")


@dataclass(frozen=True)
class Hits:
    """What one scan found: for each scanned pattern, where to start confirming it."""

    starts: dict[tuple[str, str], int] = field(default_factory=dict)
    found: frozenset[int] = frozenset()  # ids of the patterns that occurred
    scanned: frozenset[tuple[str, str]] = frozenset()

    def start(self, fact: str, pattern: str) -> int | None:
        """Character offset to run the full regex from, or None: the pattern does not occur."""
        return self.starts.get((fact, pattern))

    def covers(self, fact: str, pattern: str) -> bool:
        """Whether the scanner decided this pattern (else check it the old way)."""
        return (fact, pattern) in self.scanned


@dataclass(frozen=True)
class _Pattern:
    fact: str
    text: str  # the rule's regex, or the literal of a ``contains``
    literal: bool


class Scanner:
    """The compiled patterns of one rules version, and which rules need which."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        started = time.perf_counter()
        patterns: dict[_Pattern, int] = {}
        needs: list[tuple[Rule, tuple[int, ...]]] = []
        for rule in rules:
            ids = tuple(
                patterns.setdefault(pattern, len(patterns))
                for condition in rule.when
                for pattern in _patterns(condition)
            )
            needs.append((rule, ids))
        self.patterns = tuple(patterns)
        # Confirmed from the text's start: the scanner's end offset does not bound their start.
        self._far = frozenset(
            pid
            for pattern, pid in patterns.items()
            if not pattern.literal and spans_lines(pattern.text)
        )
        by_fact: dict[str, list[int]] = {}
        for pattern, pid in patterns.items():
            by_fact.setdefault(pattern.fact, []).append(pid)
        self._shards: dict[str, list[hyperscan.Database]] = {}
        self._local = threading.local()
        compiled: set[int] = set()
        loaded = True
        for fact, members in by_fact.items():
            shards, ok, cached = _compile([(pid, self.patterns[pid]) for pid in members])
            self._shards[fact] = shards
            compiled |= ok
            loaded &= cached
        self.compiled = frozenset(compiled)
        self._scanned = frozenset((self.patterns[i].fact, self.patterns[i].text) for i in compiled)
        self.unscanned = tuple(p.text for i, p in enumerate(self.patterns) if i not in compiled)
        # A rule is a candidate when every one of its scanned patterns occurred;
        # a rule with none scanned is always checked.
        self._rules_of: dict[int, list[tuple[Rule, tuple[int, ...]]]] = {}
        residual = []
        for rule, ids in needs:
            needed = tuple(i for i in ids if i in compiled)
            if not needed:
                residual.append(rule)
                continue
            # Index by one pattern: any one of them occurring is needed to find the rule.
            self._rules_of.setdefault(needed[-1], []).append((rule, needed))
        self.residual = tuple(residual)
        # Once per rules version and machine, not per failure: said apart, so whoever
        # times failures (a benchmark, the first failure after a rules change) can tell.
        self.loaded = loaded  # every database came from the disk cache
        self.build_seconds = time.perf_counter() - started
        log.info(
            "%d pattern(s) %s in %.2fs",
            len(self.patterns),
            "loaded from the disk cache" if loaded else "compiled",
            self.build_seconds,
        )
        if self.unscanned:
            log.info("%d pattern(s) are checked outside the scanner", len(self.unscanned))

    def scan(self, facts: JsonObject) -> Hits:
        starts: dict[tuple[str, str], int] = {}
        found: set[int] = set()
        for fact, shards in self._shards.items():
            value = facts.get(fact)
            if value is None:
                continue
            text = as_text(value)
            data = text.encode("utf-8", "replace")
            ends: dict[int, int] = {}
            for database, scratch in zip(shards, self._scratches(fact), strict=True):
                database.scan(data, _record, context=ends, scratch=scratch)
            found |= ends.keys()
            for pid, end in ends.items():
                pattern = self.patterns[pid]
                if pid in self._far:
                    starts[(fact, pattern.text)] = 0
                    continue
                start = _char_offset(text, data, _line_start(data, end - BACK_BYTES))
                starts[(fact, pattern.text)] = start
        return Hits(starts, frozenset(found), self._scanned)

    def _scratches(self, fact: str) -> list[hyperscan.Scratch]:
        """This thread's scratch space for each database of ``fact``.

        Hyperscan's scratch may not be shared by two scans at once; it lives
        as long as this scanner, so it always belongs to databases still alive.
        """
        mine: dict[str, list[hyperscan.Scratch]] = self._local.__dict__.setdefault("scratches", {})
        if fact not in mine:
            mine[fact] = [hyperscan.Scratch(database) for database in self._shards[fact]]
        return mine[fact]

    def candidates(self, hits: Hits) -> list[Rule]:
        """Rules worth checking in full: all their scanned patterns occurred, or none is scanned."""
        rules = list(self.residual)
        for pid in hits.found:
            for rule, needed in self._rules_of.get(pid, ()):
                if all(i in hits.found for i in needed):
                    rules.append(rule)
        return rules


def _patterns(condition: FactCondition) -> Iterable[_Pattern]:
    """What the scanner looks for on the condition's behalf: a regex first, then literals."""
    for op, operand in sorted(condition.active(), key=lambda found: -found[0].cost):
        if op.scan is not None and isinstance(operand, str):
            need = op.scan(operand)
            if need is not None:
                yield _Pattern(condition.fact, need.text, need.literal)


def _record(pid: int, start: int, end: int, flags: int, ends: object) -> None:
    cast("dict[int, int]", ends).setdefault(pid, end)  # the context ``scan`` is given


def _line_start(data: bytes, offset: int) -> int:
    return 0 if offset <= 0 else data.rfind(b"\n", 0, offset) + 1


def _char_offset(text: str, data: bytes, byte_offset: int) -> int:
    if byte_offset == 0 or len(data) == len(text):  # ASCII: bytes are characters
        return byte_offset
    return len(data[:byte_offset].decode("utf-8", "replace"))


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
    if not pattern.isascii():
        flags |= hyperscan.HS_FLAG_UTF8
    return pattern.encode("utf-8"), flags


def spans_lines(pattern: str) -> bool:
    r"""Whether a match may run across many lines: a ``.`` that DOTALL lets match newlines.

    The scanner says where a pattern's first match ends; a match that cannot
    run far starts on a line near there, one with a DOTALL ``.`` may start
    anywhere before. Conservative: a ``(?-s:...)`` group still counts.

    >>> spans_lines(r"panic:.*goroutine"), spans_lines(r"(?-s)FAIL.*"), spans_lines(r"a\.b[.]")
    (True, False, False)
    """
    found = _LEADING_FLAGS.match(pattern)
    if found and "s" in (found.group(2) or ""):
        return False
    return _BARE_DOT.match(pattern) is not None


def _expression(pattern: _Pattern) -> tuple[bytes, int]:
    if pattern.literal:
        literal = re.escape(pattern.text)
        flags = hyperscan.HS_FLAG_SINGLEMATCH
        return literal.encode("utf-8"), flags | (0 if literal.isascii() else hyperscan.HS_FLAG_UTF8)
    return hyperscan_form(pattern.text)


def _compile(items: list[tuple[int, _Pattern]]) -> tuple[list[hyperscan.Database], set[int], bool]:
    """Hyperscan databases for ``items`` in shards, the ids that made it in, and whether from disk.

    Compiling takes seconds for a few hundred rules (a pattern with a long
    bounded repeat or a lookaround alone can take two), so the result is
    kept on disk, addressed by the patterns and the Hyperscan version: a
    worker that restarts, or a second worker on the machine, loads it in
    milliseconds. ``THEOW_SCANNER_CACHE`` names the directory (``off``: none).
    """
    if hyperscan is None:
        return [], set(), False
    # Keyed by what Hyperscan compiles (expressions and their flags), not only the rules' text.
    key = hashlib.sha256(
        repr(
            (getattr(hyperscan, "__version__", ""), [(pid, *_expression(p)) for pid, p in items])
        ).encode()
    ).hexdigest()
    cached = _load(key)
    if cached is not None:
        return (*cached, True)
    shards, ok = _build(items)
    _store(key, shards, ok)
    return shards, ok, False


def _cache_dir() -> Path | None:
    configured = os.environ.get("THEOW_SCANNER_CACHE", "")
    if configured.lower() == "off":
        return None
    return Path(configured) if configured else Path.home() / ".cache" / "theow" / "scanner"


def _load(key: str) -> tuple[list[hyperscan.Database], set[int]] | None:
    directory = _cache_dir()
    if directory is None:
        return None
    try:
        data = (directory / f"{key}.hs").read_bytes()
        size = int.from_bytes(data[:8], "big")
        header = json.loads(data[8 : 8 + size])
        shards, at = [], 8 + size
        for length in header["sizes"]:
            shards.append(hyperscan.loadb(data[at : at + length], hyperscan.HS_MODE_BLOCK))
            at += length
        return shards, set(header["ok"])
    except (OSError, ValueError, KeyError, hyperscan.error):
        return None  # absent or unreadable: compile


def _store(key: str, shards: list[hyperscan.Database], ok: set[int]) -> None:
    directory = _cache_dir()
    if directory is None:
        return
    blobs = [hyperscan.dumpb(db) for db in shards]
    header = json.dumps({"ok": sorted(ok), "sizes": [len(b) for b in blobs]}).encode()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f"{key}.{os.getpid()}.tmp"
        partial.write_bytes(len(header).to_bytes(8, "big") + header + b"".join(blobs))
        partial.replace(directory / f"{key}.hs")  # atomic: a reader never sees half a file
    except OSError as exc:
        log.warning("cannot keep the compiled scanner in %s: %s", directory, exc)


def _build(items: list[tuple[int, _Pattern]]) -> tuple[list[hyperscan.Database], set[int]]:
    # Patterns of one kind share a database: a shard mixing caseless `.*` patterns
    # with plain literals scans slower than each kind apart (benchmarks/match.py).
    exprs = sorted(
        ((pid, *_expression(pattern)) for pid, pattern in items),
        key=lambda e: (e[2], b".*" in e[1], e[1][:3]),
    )
    shards, ok = [], set()
    size = max(SHARD_SIZE, -(-len(exprs) // MAX_SHARDS))
    for i in range(0, len(exprs), size):
        usable = _usable(tuple(exprs[i : i + size]))
        if usable:
            shards.append(_database(usable))
            ok |= {pid for pid, _, _ in usable}
    return shards, ok


@lru_cache(maxsize=1024)
def _usable(exprs: tuple[tuple[int, bytes, int], ...]) -> tuple[tuple[int, bytes, int], ...]:
    """``exprs`` as Hyperscan takes them: each in its exact or prefilter mode, or left out.

    One bad pattern makes a whole database fail to compile, so a shard that
    fails is sorted out pattern by pattern (each pattern's mode is cached).
    """
    if not exprs:
        return ()
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
    exprs: tuple[tuple[int, bytes, int], ...], check: Callable[[bytes], bool]
) -> tuple[tuple[int, bytes, int], ...]:
    """``exprs`` with each pattern ``check`` selects in its mode (or left out), the rest as written."""
    usable = []
    for pid, expression, flags in exprs:
        mode = _mode(expression, flags) if check(expression) else 0
        if mode is not None:
            usable.append((pid, expression, flags | mode))
    return tuple(usable)


@lru_cache(maxsize=65536)
def _mode(expression: bytes, flags: int) -> int | None:
    """0 when Hyperscan compiles the pattern as written, PREFILTER when only so, None else."""
    for mode in (0, hyperscan.HS_FLAG_PREFILTER):
        try:
            hyperscan.Database().compile(expressions=[expression], flags=[flags | mode])
        except hyperscan.error:
            continue
        return mode
    return None


@lru_cache(maxsize=1024)
def _database(exprs: tuple[tuple[int, bytes, int], ...]) -> hyperscan.Database:
    database = hyperscan.Database()
    database.compile(
        expressions=[e for _, e, _ in exprs],
        ids=[pid for pid, _, _ in exprs],
        elements=len(exprs),
        flags=[f for _, _, f in exprs],
    )
    return database
