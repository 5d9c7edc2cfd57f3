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
them (``REGEX_FLAGS``); the full engine starts where the match may begin
(``core.rules.reach``): the hit's line for a pattern that cannot cross a line,
a few KB before for one that names a newline, the start of the text for one
whose consuming ``.`` may cross lines.

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
>>> hits.start("log", "error: (\\\\w+)")  # the start of the hit's line: it cannot cross lines
3

Warning: Hyperscan reads ``\\w``, ``\\d`` and ``\\s`` as ASCII in a pattern
written in ASCII; a pattern with non-ASCII text is compiled in UTF-8 mode.
``theow rules check`` runs every rule's examples through the scanner, so a
pattern the scanner reads differently from Python is caught at review.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from theow_client.jsontypes import JsonObject
from theow_workers.core.rules import scanner_parts
from theow_workers.core.rules.reach import FAR, LINE, NEAR, reach
from theow_workers.core.rules.scanner_parts import Part, Pattern, shards
from theow_workers.core.rules.schema import FactCondition, Rule, as_text

try:  # pragma: no cover - import guard
    import hyperscan
except ImportError:  # the fallback: every condition is checked the old way
    hyperscan = None  # type: ignore[assignment]

log = logging.getLogger("theow.scanner")

# Hyperscan's compile time grows faster than linearly with a database's size,
# and each database costs a scan: small libraries get parts of 200 patterns,
# large ones at most MAX_SHARDS parts per fact, plus the few small parts of the
# changes made since (at most MAX_SMALL_PARTS, then compiled again as one).
SHARD_SIZE = 200
MAX_SHARDS = 3
MAX_SMALL_PARTS = 3
CHANGE_PART = 16  # patterns: a part this small holds a few changes, cheap to compile again
KEEP_SHARE = 0.75  # a previous part is kept while this share of its patterns is still wanted
BACK_BYTES = 4096  # a match may start this far before the line its first occurrence ends on


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


class Scanner:
    """The compiled patterns of one rules version, and which rules need which.

    ``previous``: the scanner of the version this one replaces. Its parts whose
    patterns are still mostly wanted are kept as they are, and only the
    patterns none of them holds are compiled (``core.rules.scanner_parts``): a
    changed rule costs its own patterns' compile, not the library's. Without
    one, the parts this machine built last (on disk) are the start.
    """

    def __init__(self, rules: Sequence[Rule], previous: Scanner | None = None) -> None:
        started = time.perf_counter()
        patterns: dict[Pattern, int] = {}
        needs: list[tuple[Rule, tuple[int, ...]]] = []
        for rule in rules:
            ids = tuple(
                patterns.setdefault(pattern, len(patterns))
                for condition in rule.when
                for pattern in _patterns(condition)
            )
            needs.append((rule, ids))
        self.patterns = tuple(patterns)
        self._pid = patterns
        # How far before its end a match may start (``core.rules.reach``): from the text's
        # start, the line where it ends (a literal's too), or BACK_BYTES before.
        self._reach = tuple(
            (NEAR if "\n" in p.text else LINE) if p.literal else reach(p.text) for p in patterns
        )
        by_fact: dict[str, list[Pattern]] = {}
        for pattern in patterns:
            by_fact.setdefault(pattern.fact, []).append(pattern)
        start: Sequence[Part] = (
            previous.parts if previous is not None else scanner_parts.recent_parts()
        )
        parts: list[Part] = []
        for fact, members in by_fact.items():
            parts += _parts_for(fact, members, [p for p in start if p.fact == fact])
        scanner_parts.remember(parts)
        self.parts: tuple[Part, ...] = tuple(parts)
        self._local = threading.local()
        compiled = {
            patterns[part.patterns[i]]
            for part in parts
            for i in part.ok
            if part.patterns[i] in patterns
        }
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
        reused = previous.parts if previous is not None else ()
        self.loaded = all(p.loaded or p in reused for p in parts)  # nothing compiled here
        self.build_seconds = time.perf_counter() - started
        built = [p for p in parts if not p.loaded and p not in reused]
        log.info(
            "%d pattern(s) in %d part(s), %s in %.2fs",
            len(self.patterns),
            len(parts),
            f"{sum(len(p.patterns) for p in built)} compiled" if built else "none compiled",
            self.build_seconds,
        )
        if self.unscanned:
            log.info("%d pattern(s) are checked outside the scanner", len(self.unscanned))

    def scan(self, facts: JsonObject) -> Hits:
        starts: dict[tuple[str, str], int] = {}
        found: set[int] = set()
        texts: dict[str, tuple[str, bytes]] = {}
        ends: dict[int, int] = {}
        for part, scratch in zip(self.parts, self._scratches(), strict=True):
            if part.database is None:
                continue
            if part.fact not in texts:
                value = facts.get(part.fact)
                if value is None:
                    continue
                text = as_text(value)
                texts[part.fact] = (text, text.encode("utf-8", "replace"))
            local: dict[int, int] = {}
            part.database.scan(texts[part.fact][1], _record, context=local, scratch=scratch)
            for i, end in local.items():
                pid = self._pid.get(part.patterns[i])
                if pid is not None:  # a pattern of a rule this version no longer has: none
                    ends[pid] = min(end, ends.get(pid, end))
        found |= ends.keys()
        for pid, end in ends.items():
            pattern, far = self.patterns[pid], self._reach[pid]
            if far == FAR:
                starts[(pattern.fact, pattern.text)] = 0
                continue
            text, data = texts[pattern.fact]
            back = _line_start(data, end if far == LINE else end - BACK_BYTES)
            start = _char_offset(text, data, back)
            starts[(pattern.fact, pattern.text)] = start
        return Hits(starts, frozenset(found), self._scanned)

    def _scratches(self) -> list[hyperscan.Scratch | None]:
        """This thread's scratch space for each part.

        Hyperscan's scratch may not be shared by two scans at once; it lives
        as long as this scanner, so it always belongs to databases still alive.
        """
        mine: list[hyperscan.Scratch | None] | None = getattr(self._local, "scratches", None)
        if mine is None:
            mine = [
                hyperscan.Scratch(part.database) if part.database is not None else None
                for part in self.parts
            ]
            self._local.scratches = mine
        return mine

    def candidates(self, hits: Hits) -> list[Rule]:
        """Rules worth checking in full: all their scanned patterns occurred, or none is scanned."""
        rules = list(self.residual)
        for pid in hits.found:
            for rule, needed in self._rules_of.get(pid, ()):
                if all(i in hits.found for i in needed):
                    rules.append(rule)
        return rules


def _parts_for(fact: str, wanted: list[Pattern], previous: Sequence[Part]) -> list[Part]:
    """The parts that scan ``wanted``: previous ones kept where they still serve, the rest new.

    A previous part is kept while at least ``KEEP_SHARE`` of its patterns are
    still wanted and it adds patterns no kept part holds (the largest first);
    the patterns no kept part holds are compiled into a new part. The parts of
    single changes (at most ``CHANGE_PART`` patterns) are kept up to
    ``MAX_SMALL_PARTS``; past that they are compiled again as one, which costs
    milliseconds: a part holding costly patterns is never merged.
    """
    want = set(wanted)
    size = max(SHARD_SIZE, -(-len(wanted) // MAX_SHARDS))
    kept: list[Part] = []
    covered: set[Pattern] = set()
    lives = [(part, [p for p in part.patterns if p in want]) for part in previous]
    for part, live in sorted(lives, key=lambda found: -len(found[1])):  # stable: newest first
        fresh = [p for p in live if p not in covered]
        if len(live) >= KEEP_SHARE * len(part.patterns) and len(fresh) >= KEEP_SHARE * len(live):
            kept.append(part)
            covered |= set(live)
    small = [p for p in kept if len(p.patterns) <= CHANGE_PART]
    if len(small) > MAX_SMALL_PARTS:  # merge the changes made so far into one part
        kept = [p for p in kept if p not in small]
        covered = {p for part in kept for p in part.patterns if p in want}
    missing = [p for p in wanted if p not in covered]
    if not kept:
        return [scanner_parts.compile_part(fact, shard) for shard in shards(missing, size)]
    return kept + ([scanner_parts.compile_part(fact, missing)] if missing else [])


def _patterns(condition: FactCondition) -> Iterable[Pattern]:
    """What the scanner looks for on the condition's behalf: a regex first, then literals."""
    for op, operand in sorted(condition.active(), key=lambda found: -found[0].cost):
        if op.scan is not None and isinstance(operand, str):
            need = op.scan(operand)
            if need is not None:
                yield Pattern(condition.fact, need.text, need.literal)


def _record(pid: int, start: int, end: int, flags: int, ends: object) -> None:
    cast("dict[int, int]", ends).setdefault(pid, end)  # the context ``scan`` is given


def _line_start(data: bytes, offset: int) -> int:
    return 0 if offset <= 0 else data.rfind(b"\n", 0, offset) + 1


def _char_offset(text: str, data: bytes, byte_offset: int) -> int:
    if byte_offset == 0 or len(data) == len(text):  # ASCII: bytes are characters
        return byte_offset
    return len(data[:byte_offset].decode("utf-8", "replace"))
