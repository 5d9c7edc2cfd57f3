"""Shaping a failure's facts before they cross the broker.

Build logs can be any size and any encoding. Both the client (before sending)
and the worker (before matching) keep a bounded head and tail of every text
fact, replace invalid UTF-8, and note what they cut, so a 50 MB log never
reaches the broker or the database whole and nothing is silently lost.
Structure past the limits (``FactLimits``: depth, keys, key size, values,
total text) is refused with the path of what was wrong, never a traceback.

Facts cross the broker as one JSON text (``dumps_facts``) that the worker
parses with ``loads_facts``: nothing deep is ever decoded or pickled before
the task body can check it.

>>> text, note = bound_text("x" * 100, limit=40)
>>> len(text) < 100 and note["original_chars"] == 100
True
"""

from __future__ import annotations

import bisect
import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from theow_client.jsontypes import Json, JsonObject
from theow_client.lines import LineMap

DEFAULT_FACT_LIMIT = 64 * 1024
# The head shows the set-up, the tail how the job ended; the rest of the budget
# goes to windows around lines that look like errors, nearest the end first.
HEAD_SHARE = 0.1
TAIL_SHARE = 0.25
CUT_MARKER = "\n[... theow: {omitted} characters omitted ...]\n"
MIN_WINDOW = 200
# (markers, lines kept before, lines kept after), strongest first: a test
# runner's or compiler's own failure line beats an incidental "error" word.
# Plain substrings, found with str.rfind: a regex alternation over megabytes
# is a hundred times slower.
ERROR_TIERS: tuple[tuple[tuple[str, ...], int, int], ...] = (
    (
        # Where a test runner starts its list of failures (PHPUnit, mocha, RSpec).
        ("There were ", "There was 1 ", "\n1) ", "\n  1) ", "\n 1) ", "\r\n1) ", "\r\n  1) "),
        2,
        80,
    ),
    (
        (
            "FAIL",
            "[ERROR]",
            "error:",
            "error[E",
            "Error:",
            "ERROR",
            "Traceback",
            "panic:",
            "Sanitizer",
            "✗",
            "✖",
            "✘",
            "\nE   ",
            "Warning:",
        ),
        5,
        40,
    ),
    (("Exception", "Assertion", "assert", "expected", "failed", "failure"), 2, 16),
    (
        (
            "error",
            "fail",
            "fatal",
            "exception",
            "panic",
            "cannot",
            "can't",
            "could not",
            "not found",
            "no such",
            "denied",
            "refused",
            "timed out",
            "timeout",
            "undefined",
            "killed",
            "abort",
            "unable",
            "invalid",
            "missing",
        ),
        2,
        6,
    ),
)
LOWER_CASED = 3  # the index of the tier searched in lower-cased text


class FactsError(ValueError):
    """The submitted facts cannot be used; the message says why and where."""


def decode(data: bytes | str) -> str:
    """Text from bytes that may not be UTF-8 (invalid sequences become U+FFFD)."""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def bound_text(text: str, limit: int = DEFAULT_FACT_LIMIT) -> tuple[str, dict[str, int] | None]:
    """Keep at most ``limit`` characters of ``text``, the cause among them.

    A head and a tail, then windows of lines around lines that look like
    errors (strongest markers first, nearest the end first), with a marker
    where text was cut. Returns the text and, when something was cut, a note
    with the sizes. The markers count towards ``limit``, so bounding a
    bounded text again changes nothing (the worker re-checks what a client
    bounded).
    """
    bounded, note, _ = bound_text_kept(text, limit)
    return bounded, note


def bound_text_kept(
    text: str, limit: int = DEFAULT_FACT_LIMIT
) -> tuple[str, dict[str, int] | None, list[tuple[int, int]]]:
    """``bound_text`` and the [start, end) spans of ``text`` it kept, in order."""
    if len(text) <= limit:
        return text, None, [(0, len(text))]
    room = limit
    searches = _Searches(text)
    while True:
        kept = _kept(text, max(room, 0), searches)
        pieces, last = [], 0
        for start, end in kept:
            if start > last:
                pieces.append(CUT_MARKER.format(omitted=start - last))
            pieces.append(text[start:end])
            last = end
        if last < len(text):
            pieces.append(CUT_MARKER.format(omitted=len(text) - last))
        bounded = "".join(pieces)
        if len(bounded) <= limit or room <= 0:
            break
        room -= len(bounded) - limit  # make room for the markers, then cut again
    if len(bounded) > limit:  # a limit smaller than one marker: the marker alone, shortened
        bounded = CUT_MARKER.format(omitted=len(text))[:limit]
        kept = []
    kept_chars = sum(end - start for start, end in kept)
    note = {
        "original_chars": len(text),
        "kept_chars": kept_chars,
        "omitted_chars": len(text) - kept_chars,
    }
    return bounded, note, kept


def kept_line_map(text: str, kept: list[tuple[int, int]]) -> LineMap:
    """Where each span that ``bound_text`` kept of ``text`` lies, in lines (``theow_client.lines``).

    Pieces follow each other with a cut marker between them, exactly as
    ``bound_text_kept`` joins them; counting newlines once through ``text``.

    >>> text = "".join(f"line {n}\\n" for n in range(1, 5001))
    >>> bounded, _, kept = bound_text_kept(text, 2000)
    >>> pieces = kept_line_map(text, kept)
    >>> pieces[0][:2], pieces[-1][1] + pieces[-1][2] - 1
    ((1, 1), 5001)
    """
    marker_lines = CUT_MARKER.count("\n")
    pieces: list[tuple[int, int, int]] = []
    at_line, original_line, last = 1, 1, 0
    for start, end in kept:
        original_line += text.count("\n", last, start)
        if start > last:
            at_line += marker_lines
        inside = text.count("\n", start, end)
        pieces.append((at_line, original_line, inside + 1))
        at_line += inside
        original_line += inside
        last = end
    return tuple(pieces)


def _kept(text: str, limit: int, searches: _Searches | None = None) -> list[tuple[int, int]]:
    """The merged [start, end) spans of ``text`` that bounding to ``limit`` keeps."""
    searches = searches or _Searches(text)
    head, tail = int(limit * HEAD_SHARE), int(limit * TAIL_SHARE)
    kept = [(0, head), (len(text) - tail, len(text))]
    budget = limit - head - tail
    for tier, (markers, before, after) in enumerate(ERROR_TIERS):
        found = _Markers(functools.partial(searches.of, tier, markers), head, len(text) - tail)
        while budget >= MIN_WINDOW and (at := found.last()) is not None:
            start, end = lines_around(text, at, before, after)
            end = min(end, start + budget + _overlap(kept, start, end))
            kept.append((start, end))
            budget -= end - start - _overlap(kept[:-1], start, end)
            found.skip_to(start)
    # What the windows left goes to a longer tail.
    kept.append((max(len(text) - tail - max(budget, 0), 0), len(text)))
    return [(start, end) for start, end in _merged(kept) if end > start]


class _Occurrences:
    """Where one marker occurs in a text: ``str.rfind`` answers, remembered.

    ``bound_text`` computes its cut again and again with a little less room
    (up to ~20 times for a megabyte log), each time looking for every marker:
    searching the text once per marker instead keeps a 1 MB log at a few ms.
    Every start in [``floor``, the last possible start] is known (``starts``,
    descending); lower parts are searched when a question reaches them.
    """

    def __init__(self, text: str, marker: str) -> None:
        self.text, self.marker = text, marker
        self.floor = len(text) - len(marker) + 1
        self._negated: list[int] = []  # -start of every start known, ascending

    def rfind(self, low: int, high: int) -> int:
        """``text.rfind(marker, low, high)`` for 0 <= low, high <= len(text)."""
        bound = high - len(self.marker)  # the last start that fits
        if bound < low:
            return -1
        while True:
            i = bisect.bisect_left(self._negated, -bound)
            if i < len(self._negated):  # the last known start at or before bound
                return -self._negated[i] if -self._negated[i] >= low else -1
            if self.floor <= low:
                return -1
            at = self.text.rfind(self.marker, low, self.floor - 1 + len(self.marker))
            if at < 0:
                self.floor = low
                return -1
            self._negated.append(-at)
            self.floor = at


class _Searches:
    """The markers' occurrences in one text (and its lower-cased form), shared by every cut."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._lowered: str | None = None
        self._found: dict[tuple[int, str], _Occurrences] = {}

    def of(self, tier: int, markers: tuple[str, ...]) -> list[_Occurrences]:
        searched = self.text
        if tier == LOWER_CASED:
            if self._lowered is None:
                self._lowered = self.text.lower()
            # Lower-casing may change the length (rare scripts): then search the text as is.
            searched = self._lowered if len(self._lowered) == len(self.text) else self.text
        return [self._found.setdefault((tier, m), _Occurrences(searched, m)) for m in markers]


class _Markers:
    """The last occurrence of any marker in text[low:high], moving towards the start."""

    def __init__(self, markers: Callable[[], list[_Occurrences]], low: int, high: int) -> None:
        self.markers, self.low, self.high = markers, low, high
        self.next: dict[_Occurrences, int] | None = None  # searched when first asked

    def last(self) -> int | None:
        if self.next is None:  # a tier is not searched once the budget is spent
            self.next = {m: m.rfind(self.low, self.high) for m in self.markers()}
        at = max(self.next.values(), default=-1)
        return at if at >= 0 else None

    def skip_to(self, position: int) -> None:
        """Forget every occurrence at or after ``position`` (it is kept already)."""
        found = self.next or {}
        for marker, at in found.items():
            if at >= position:
                found[marker] = marker.rfind(self.low, position)


def lines_around(text: str, at: int, before: int, after: int) -> tuple[int, int]:
    """(start, end) of the line holding ``at`` with ``before`` lines above it and ``after`` below."""
    start = at
    for _ in range(before + 1):
        start = text.rfind("\n", 0, start)
        if start < 0:
            break
    end = at
    for _ in range(after + 1):
        end = text.find("\n", end + 1)
        if end < 0:
            end = len(text)
            break
    return start + 1, end


def _overlap(kept: list[tuple[int, int]], start: int, end: int) -> int:
    """Characters of [start, end) already kept (kept intervals may overlap each other)."""
    return sum(max(0, min(end, b) - max(start, a)) for a, b in _merged(kept))


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


@dataclass(frozen=True)
class FactLimits:
    """What one failure's facts may hold; past these a fact is bounded or refused.

    Text is bounded (head and tail kept, with a note); structure is refused
    with the path of the offending value, because cutting a structure would
    change what it means.
    """

    text: int = DEFAULT_FACT_LIMIT  # characters per string, at any depth
    depth: int = 32  # nesting levels below the facts object
    keys: int = 1000  # keys per object
    key_chars: int = 256  # characters per key
    values: int = 20_000  # values in all, at every depth
    total: int = 2 * 1024 * 1024  # characters of text in all, after bounding
    wire: int = 16 * 1024 * 1024  # characters of the JSON text a worker will parse


DEFAULT_LIMITS = FactLimits()
# A passing run (theow_client.passing) is read for its lines, not its cause: more of it is kept.
PASSING_LIMITS = FactLimits(text=256 * 1024)
# For what travels beside the facts (notes, hints): small, and never the point.
SIDE_LIMITS = FactLimits(text=4096, depth=8, total=1024 * 1024)


def bound_facts(
    facts: object,
    limit: int | None = None,
    *,
    limits: FactLimits = DEFAULT_LIMITS,
    where: str = "facts",
) -> tuple[JsonObject, dict[str, JsonObject]]:
    """Validate, normalize and bound a facts object; return it and notes by path.

    The one check that every way in (client, ``@mark``, spool, worker,
    replay) applies. Facts must be a JSON object with string keys. Every
    string, at any depth, keeps a head and tail of at most ``limit``
    characters (``bound_text``); invalid UTF-8 (bytes), lone surrogates and
    NUL become U+FFFD; NaN and Infinity become null. The notes say what was
    cut or replaced, keyed by path (``stderr``, ``steps[2].log``).

    Anything else over a limit raises FactsError naming what and where:

    >>> bound_facts({"n": [[[1]]]}, limits=FactLimits(depth=2))
    Traceback (most recent call last):
    ...
    theow_client.facts.FactsError: facts.n[0]: nested deeper than 2 levels
    """
    bounded, notes, _ = bound_facts_kept(facts, limit, limits=limits, where=where)
    return bounded, notes


def bound_facts_kept(
    facts: object,
    limit: int | None = None,
    *,
    limits: FactLimits = DEFAULT_LIMITS,
    where: str = "facts",
) -> tuple[JsonObject, dict[str, JsonObject], dict[str, LineMap]]:
    """``bound_facts`` and, for each text it cut, which lines of the original it kept.

    The line maps (``theow_client.lines``) are keyed like the notes; a fact
    that was not cut has none: its lines are the original's.
    """
    if not isinstance(facts, dict):
        raise FactsError(f"{where} must be a JSON object, got {type(facts).__name__}")
    if limit is not None:
        limits = replace(limits, text=limit)
    walk = _Walk(limits)
    bounded = walk.value(facts, where, 0, top=where == "facts")
    return bounded, walk.notes, walk.lines


def loads_facts(
    text: str | bytes, where: str = "facts", limits: FactLimits = DEFAULT_LIMITS
) -> Json:
    """Parse JSON text under limits: FactsError, never RecursionError or MemoryError.

    >>> loads_facts("[" * 5000 + "]" * 5000)
    Traceback (most recent call last):
    ...
    theow_client.facts.FactsError: facts: nested too deeply to parse
    """
    if len(text) > limits.wire:
        raise FactsError(f"{where}: {len(text)} characters of JSON, more than {limits.wire}")
    if isinstance(text, bytes):
        text = decode(text)
    try:
        return json.loads(text)
    except RecursionError:
        raise FactsError(f"{where}: nested too deeply to parse") from None
    except ValueError as exc:
        raise FactsError(f"{where}: not valid JSON: {exc}") from None


def dumps_facts(facts: JsonObject) -> str:
    """The wire form of facts already bounded: one JSON text."""
    try:
        return json.dumps(facts, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise FactsError(f"facts are not JSON-serializable: {exc}") from exc


class _Walk:
    """One pass over the facts; recursion stops at ``limits.depth``, so it cannot overflow."""

    def __init__(self, limits: FactLimits) -> None:
        self.limits = limits
        self.notes: dict[str, JsonObject] = {}
        self.lines: dict[str, LineMap] = {}
        self.values = 0
        self.chars = 0

    def value(self, value: object, path: str, depth: int, top: bool = False) -> Json:
        self.values += 1
        if self.values > self.limits.values:
            raise FactsError(f"{_short(path)}: more than {self.limits.values} values in all")
        if isinstance(value, (bytes, bytearray)):
            value = decode(bytes(value))
        if isinstance(value, str):
            return self.text(value, path)
        if value is None or isinstance(value, (bool, int)):
            return value
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            self.notes[_note_key(path)] = {"replaced": repr(value)}
            return None
        if isinstance(value, (dict, list, tuple)) and depth >= self.limits.depth:
            raise FactsError(f"{_short(path)}: nested deeper than {self.limits.depth} levels")
        if isinstance(value, dict):
            return self.mapping(value, path, depth, top)
        if isinstance(value, (list, tuple)):
            return [self.value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        raise FactsError(f"{_short(path)}: a value of type {type(value).__name__}, not JSON")

    def mapping(self, value: dict[object, object], path: str, depth: int, top: bool) -> JsonObject:
        if len(value) > self.limits.keys:
            raise FactsError(f"{_short(path)}: {len(value)} keys, more than {self.limits.keys}")
        out: JsonObject = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise FactsError(f"{_short(path)}: key {_preview(key)} is not a string")
            if len(key) > self.limits.key_chars:
                raise FactsError(
                    f"{_short(path)}: key {_preview(key)} has {len(key)} characters, "
                    f"more than {self.limits.key_chars}"
                )
            if top and not key:
                raise FactsError(f"fact names must be non-empty strings, got {key!r}")
            key = _clean(key)
            out[key] = self.value(item, f"{path}.{key}", depth + 1)
        return out

    def text(self, value: str, path: str) -> str:
        original = value
        value, note, kept = bound_text_kept(value, self.limits.text)
        if note and kept:
            self.lines[_note_key(path)] = kept_line_map(original, kept)
        cleaned = _clean(value)
        if note or cleaned is not value:
            entry: JsonObject = dict(note or {})
            if cleaned is not value:
                entry["replaced"] = "invalid text (lone surrogates or NUL) became U+FFFD"
            self.notes[_note_key(path)] = entry
        self.chars += len(cleaned)
        if self.chars > self.limits.total:
            raise FactsError(
                f"{_short(path)}: more than {self.limits.total} characters of text in all"
            )
        return cleaned


def _clean(text: str) -> str:
    """The same text when it is valid, storable Unicode; else lone surrogates and NUL as U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Through UTF-16 keeps a valid surrogate pair and replaces only a lone half.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if "\x00" in text:  # PostgreSQL cannot store NUL in text or JSON
        text = text.replace("\x00", "\ufffd")
    return text


def _note_key(path: str) -> str:
    # Top-level facts keep their bare names, as notes always had them.
    return _short(path.removeprefix("facts.").removeprefix("facts"))


def _short(path: str, limit: int = 80) -> str:
    return path if len(path) <= limit else path[: limit - 3] + "..."


def _preview(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 40 else text[:37] + "..."
