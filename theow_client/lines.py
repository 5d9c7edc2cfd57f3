"""Line numbers in the original log, for a fact that bounding cut.

Bounding (``theow_client.facts``) keeps pieces of a long log with a cut
marker between them, so the Nth line of what a worker receives is not the Nth
line the build printed. A line map says where each kept piece lies: its first
line in the bounded text, its first line in the original, and how many lines
it holds. The client sends one per cut fact in the submission's optional
``kept_lines`` field (``{fact: [[bounded, original, count], ...]}``); the
worker reads it with ``parse_kept_lines`` and turns a line it points at into
the line a person finds in their own copy of the log (``original_line``).

>>> pieces = ((1, 1, 120), (122, 398_001, 2_000))
>>> original_line(pieces, 130), original_line(pieces, 121)
(398009, 121)

A line of a cut marker (121 above) is the first line the cut left out.
A submission without ``kept_lines`` counts lines in the facts as received.
"""

from __future__ import annotations

from collections.abc import Mapping

from theow_client.jsontypes import Json

LineMap = tuple[tuple[int, int, int], ...]

FIELD = "kept_lines"  # the submission's optional field
MAX_FACTS = 64  # facts with a map in one submission
# Bounding keeps at most a few hundred pieces of one fact (its windows are >= 200 characters).
MAX_PIECES = 2048
MAX_LINE = 2**53  # JSON numbers past this lose precision


class LineMapError(ValueError):
    """A ``kept_lines`` field that cannot be used; the message says what is wrong."""


def original_line(pieces: LineMap, line: int) -> int:
    """The original's line number of the bounded text's ``line`` (both 1-based)."""
    found = None
    for piece in pieces:
        if piece[0] > line:
            break
        found = piece
    if found is None:
        return line
    at, original, count = found
    return original + min(line - at, count)


def kept_line(pieces: LineMap, line: int) -> int | None:
    """The original's line number of ``line``, None for a line bounding added (a cut marker)."""
    for at, original, count in pieces:
        if at <= line < at + count:
            return original + line - at
    return None


def compose(outer: LineMap, inner: LineMap) -> LineMap:
    """A map from ``inner``'s bounded lines to ``outer``'s original ones.

    For a text bounded twice: ``outer`` is the client's cut of the original,
    ``inner`` the worker's cut of what the client sent.

    >>> compose(((1, 1, 10), (12, 500, 10)), ((1, 1, 3), (5, 14, 4)))
    ((1, 1, 3), (5, 502, 4))
    """
    pieces: list[tuple[int, int, int]] = []
    for at, middle, count in inner:
        for o_at, o_original, o_count in outer:
            low, high = max(middle, o_at), min(middle + count, o_at + o_count)
            if low < high:
                pieces.append((at + low - middle, o_original + low - o_at, high - low))
    return tuple(pieces)


def to_wire(maps: Mapping[str, LineMap]) -> dict[str, list[list[int]]]:
    return {fact: [list(piece) for piece in pieces] for fact, pieces in maps.items()}


def parse_kept_lines(value: object, facts: Mapping[str, Json]) -> dict[str, LineMap]:
    """The line maps an agent sent, for the top-level text facts it names.

    Raises LineMapError naming what is wrong: the caller ignores the whole
    field then, with a note, and counts lines as received.

    >>> parse_kept_lines({"log": [[1, 1, 5], [3, 90, 2]]}, {"log": "a"})
    Traceback (most recent call last):
    ...
    theow_client.lines.LineMapError: kept_lines.log[1]: pieces overlap or go backwards
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LineMapError(f"{FIELD} must be an object, got {type(value).__name__}")
    if len(value) > MAX_FACTS:
        raise LineMapError(f"{FIELD}: {len(value)} facts, more than {MAX_FACTS}")
    maps: dict[str, LineMap] = {}
    for fact, pieces in value.items():
        where = f"{FIELD}.{str(fact)[:80]}"
        if not isinstance(fact, str) or not isinstance(facts.get(fact), str):
            raise LineMapError(f"{where}: no text fact of that name")
        if not isinstance(pieces, list) or not 0 < len(pieces) <= MAX_PIECES:
            raise LineMapError(f"{where}: must be a list of 1 to {MAX_PIECES} pieces")
        maps[fact] = _pieces(pieces, where)
    return maps


def _pieces(pieces: list[object], where: str) -> LineMap:
    checked: list[tuple[int, int, int]] = []
    for i, piece in enumerate(pieces):
        if not (
            isinstance(piece, list)
            and len(piece) == 3
            and all(type(n) is int and 1 <= n <= MAX_LINE for n in piece)
        ):
            raise LineMapError(f"{where}[{i}]: must be [bounded line, original line, count] >= 1")
        at, original, count = piece
        if checked:
            p_at, p_original, p_count = checked[-1]
            if at < p_at + p_count or original < p_original + p_count - 1:
                raise LineMapError(f"{where}[{i}]: pieces overlap or go backwards")
        checked.append((at, original, count))
    return tuple(checked)
