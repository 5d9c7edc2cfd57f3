"""How far before the end of a match its start may lie: where the full regex starts confirming.

The scanner (``core.rules.scanner``) learns where each pattern's first match
ends; the full regex engine then searches from a point no later than that
match's start. The nearer that point, the less text the engine walks: a 64 KB
log searched from its first byte by a pattern that tries every line start
costs milliseconds, the line alone microseconds.

* ``LINE``: no match can hold a newline (every ``.``, class and escape that
  consumes excludes it): the match lies on the line where it ends.
* ``NEAR``: it may cross lines, by a newline it names (``\\n``, ``\\s``, a
  negated class): searched from ``BACK_BYTES`` before (the scanner's heuristic).
* ``FAR``: a ``.`` that DOTALL lets cross lines consumes text, so the match may
  start anywhere before: searched from the start of the text.

Lookarounds consume nothing, so what they hold never moves a match's start:
``(?<!BUILD FAILED(?s:.{0,3000}))`` looks back across lines, yet its match is
on one line.

>>> reach(r"make: \\*\\*\\* \\[(?P<t>[^\\]\\n]+)\\] Error (?P<c>\\d+)"), reach(r"panic:.*goroutine")
('line', 'far')
>>> reach(r"Failures: *\\r?\\n\\K +(?P<test>\\w+)"), reach(r"(?m)^x(?<!y(?s:.{0,30}))")
('near', 'line')
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

LINE, NEAR, FAR = "line", "near", "far"

_LEADING_FLAGS = re.compile(r"^\(\?([aiLmsux]*)(?:-([imsx]+))?\)")
_FLAGS_OFF = re.compile(r"\(\?([imsx]*-[imsx]+)\)")
# A `.` outside a character class: escapes and classes (with `]` first in them) skipped.
_BARE_DOT = re.compile(r"(?>\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|[^.\\\[])*+\.", re.DOTALL)
KEEP_OUT = re.compile(r"(?<!\\)((?:\\\\)*)\\K")  # `\K` not itself escaped
_LOOK_BEHIND = re.compile(r"(?<!\\)((?:\\\\)*)\(\?<([=!])")
_NAMED = re.compile(r"(?<!\\)\(\?P<\w+>")
_C = re._constants  # type: ignore[attr-defined]
_NEWLINE = ord("\n")
_CROSSING = {_C.CATEGORY_SPACE, _C.CATEGORY_NOT_DIGIT, _C.CATEGORY_NOT_WORD, _C.CATEGORY_LINEBREAK}
_CROSSING |= {
    getattr(_C, f"CATEGORY_UNI_{name}")
    for name in ("SPACE", "NOT_DIGIT", "NOT_WORD", "LINEBREAK")
    if hasattr(_C, f"CATEGORY_UNI_{name}")
}


def spans_lines(pattern: str) -> bool:
    r"""Whether a match may run across many lines: a consuming ``.`` that DOTALL lets match newlines.

    >>> spans_lines(r"panic:.*goroutine"), spans_lines(r"(?-s)FAIL.*"), spans_lines(r"a\.b[.]")
    (True, False, False)
    """
    return reach(pattern) == FAR


@lru_cache(maxsize=65536)
def reach(pattern: str) -> str:
    """``LINE``, ``NEAR`` or ``FAR``, as rules are searched (MULTILINE and DOTALL by default).

    A pattern Python's own parser cannot read (syntax only ``regex`` knows)
    is judged by its text: ``FAR`` with a bare ``.``, else ``NEAR``.
    """
    found = _LEADING_FLAGS.match(pattern)
    dotall = not (found and "s" in (found.group(2) or ""))
    text = KEEP_OUT.sub(r"\1", pattern)  # `\K` consumes nothing
    # Look-behinds and look-aheads alike consume nothing (and Python's parser refuses a
    # look-behind of varying width, which ``regex`` takes).
    text = _LOOK_BEHIND.sub(r"\1(?\2", text)
    text = _NAMED.sub("(", text)  # ``regex`` lets alternatives share a group name
    off = _FLAGS_OFF.match(text)
    if off:  # Python reads flags turned off only around a group: ``(?-s)x`` as ``(?-s:x)``
        text = f"(?{off.group(1)}:{text[off.end() :]})"
    try:
        parsed = re._parser.parse(text)  # type: ignore[attr-defined]
    except (re.error, RecursionError, AttributeError, OverflowError):
        if not dotall:
            return NEAR
        return FAR if _BARE_DOT.match(pattern) is not None else NEAR
    try:
        return _walk(list(parsed), dotall)
    except RecursionError:
        return FAR


def _walk(items: list[Any], dotall: bool) -> str:
    """The widest reach of a sequence of parsed items."""
    widest = LINE
    for op, arg in items:
        here = _item(op, arg, dotall)
        if here == FAR:
            return FAR
        if here == NEAR:
            widest = NEAR
    return widest


def _item(op: Any, arg: Any, dotall: bool) -> str:
    if op in (_C.ASSERT, _C.ASSERT_NOT, _C.AT):
        return LINE  # consumes nothing
    if op is _C.LITERAL:
        return NEAR if arg == _NEWLINE else LINE
    if op is _C.NOT_LITERAL:
        return LINE if arg == _NEWLINE else NEAR
    if op is _C.ANY:
        return FAR if dotall else LINE
    if op is _C.IN:
        return NEAR if _class_crosses(arg) else LINE
    if op is _C.BRANCH:
        return _widest(_walk(list(branch), dotall) for branch in arg[1])
    if op is _C.SUBPATTERN:
        _, add, remove, sub = arg
        inner = (dotall or bool(add & re.DOTALL)) and not remove & re.DOTALL
        return _walk(list(sub), inner)
    if op in (_C.MAX_REPEAT, _C.MIN_REPEAT, getattr(_C, "POSSESSIVE_REPEAT", None)):
        return _walk(list(arg[2]), dotall)
    if op is getattr(_C, "ATOMIC_GROUP", None):
        return _walk(list(arg), dotall)
    if op is _C.GROUPREF:
        return LINE  # repeats a group's text: the group's own reach counts already
    if op is _C.GROUPREF_EXISTS:
        _, yes, no = arg
        return _widest([_walk(list(yes), dotall), _walk(list(no), dotall) if no else LINE])
    return FAR  # a back reference or anything unforeseen: searched from the start


def _widest(reaches: Any) -> str:
    found = set(reaches)
    return FAR if FAR in found else NEAR if NEAR in found else LINE


def _class_crosses(items: list[Any]) -> bool:
    """Whether a character class matches a newline."""
    negated = bool(items) and items[0][0] is _C.NEGATE
    holds = False
    for op, arg in items[1:] if negated else items:
        if (
            (op is _C.LITERAL and arg == _NEWLINE)
            or (op is _C.RANGE and arg[0] <= _NEWLINE <= arg[1])
            or (op is _C.CATEGORY and arg in _CROSSING)
        ):
            holds = True
        elif op is _C.CATEGORY and negated:
            return True  # a negated category inside a negated class: judged widely
    return holds != negated
