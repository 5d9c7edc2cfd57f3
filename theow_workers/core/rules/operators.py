"""The condition operators of a rule, in one table.

Each operator of ``when`` (``equals``, ``contains``, ``regex``, ...) is one
``Operator`` in ``OPERATORS``: the schema's fields, the matcher, the scanner,
``theow rules check``'s examples, the explorer's prompt and the resolve
benchmark's floor all read it, so an operator is added here and nowhere else.

An operator's ``test`` says where its positive form holds in a fact's text
(a ``Span``) or None; a ``negated`` operator holds where the test finds
nothing. Texts are compared as the library spec compares them: non-strings as
their JSON text (``as_text``), regexes with MULTILINE and DOTALL (``REGEX_FLAGS``).

>>> OPERATORS["contains"].test("a\\nerror: x", "error", _no_regex)
Span(start=2, end=7, match=None)
>>> OPERATORS["not_contains"].holds("a\\nerror: x", "error", _no_regex)
False
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

import regex

from theow_client.jsontypes import Json
from theow_workers.core.rules.evidence import literal_runs

# How a rule's regex is searched, as in the single-process library (its
# ``Fact.matches``): ``^``/``$`` at every line, ``.`` across lines. A rule that needs
# a line-bound ``.`` says so: a leading ``(?-s)``, or ``(?-s:...)`` around a part.
REGEX_FLAGS = regex.MULTILINE | regex.DOTALL

Scalar = str | int | float | bool
# An operand as a rule file gives it (the schema has checked its type against the operator's).
Operand = Scalar | list[Scalar] | None


class PatternMatch(Protocol):
    """What the matcher reads of a regex match (``re`` and ``regex`` both give it)."""

    def start(self, group: int | str = 0, /) -> int: ...

    def end(self, group: int | str = 0, /) -> int: ...

    def groups(self) -> tuple[str | None, ...]: ...

    def groupdict(self) -> dict[str, str | None]: ...


# (pattern, text) -> the first match or None; the matcher's has a time limit and starts
# where the scanner saw the pattern, the benchmark's floor is plain ``re``.
Search = Callable[[str, str], PatternMatch | None]


@dataclass(frozen=True)
class Span:
    """Where an operator found what it looks for in the fact's text (``match``: a regex's)."""

    start: int
    end: int
    match: PatternMatch | None = None


class Cost(IntEnum):
    """What checking an operator costs: conditions and operators are checked cheapest first."""

    VALUE = 0  # compare the whole text with a value
    LITERAL = 1  # look for a literal in the text
    PATTERN = 2  # run the regex engine


@dataclass(frozen=True)
class ScanNeed:
    """What the one-pass scanner looks for on an operator's behalf (a necessary condition).

    ``literal``: ``text`` is found as written; else it is a rule regex, and the matcher
    confirms it from where the scanner saw it.
    """

    text: str
    literal: bool


@dataclass(frozen=True, repr=False)
class Operator:
    """One operator: its schema, its check, and what the rest of Theow needs to know of it."""

    name: str
    annotation: object  # the pydantic field's type; every field defaults to None
    test: Callable[[str, Operand, Search], Span | None]  # where the positive form holds
    why_not: Callable[[str, str, Operand], str]  # (fact, text, operand) -> the reason it fails
    cost: Cost
    negated: bool = False
    # ``equals: null`` compares with the text "null"; for the others null is as if absent.
    null_is_value: bool = False
    pattern: bool = False  # the operand is a regex: compiled at load, read under both flag sets
    pins: bool = False  # the fact's one value: a scalar filter field in the index
    scan: Callable[[str], ScanNeed | None] | None = None  # the scanner's prefilter, if any
    # The literals telling the evidence line apart, for operators whose span is evidence;
    # such a condition is held to its examples by ``theow rules check``.
    evidence: Callable[[str], tuple[str, ...]] | None = None
    prompt: str = ""  # the name in the explorer's schema line; "" leaves it out
    doc: str = ""  # the line in docs/rules.md

    @property
    def captures(self) -> bool:
        """A regex whose groups fill ``{extract.N}`` and named placeholders."""
        return self.pattern and not self.negated

    def holds(self, text: str, operand: Operand, search: Search) -> bool:
        return (self.test(text, operand, search) is None) is self.negated

    def __reduce__(self) -> tuple[Callable[[str], Operator], tuple[str]]:
        """Pickled by name: the table's functions are not picklable, its names are."""
        return operator, (self.name,)

    def __repr__(self) -> str:
        return f"Operator({self.name!r})"


def operator(name: str) -> Operator:
    """The operator of the table named ``name`` (KeyError for another name)."""
    return OPERATORS[name]


def as_text(value: Json) -> str:
    """Facts and operands are compared as text; JSON spelling for non-strings."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def short(text: str, limit: int = 60) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(operand: Operand) -> str:
    if not isinstance(operand, str):
        raise TypeError(f"a text operand, not {operand!r}")
    return operand


def _values(operand: Operand) -> list[Scalar]:
    if not isinstance(operand, list):
        raise TypeError(f"a list operand, not {operand!r}")
    return operand


def _equals(text: str, operand: Operand, search: Search) -> Span | None:
    return Span(0, len(text)) if text == as_text(operand) else None


def _one_of(text: str, operand: Operand, search: Search) -> Span | None:
    return Span(0, len(text)) if text in {as_text(v) for v in _values(operand)} else None


def _contains(text: str, operand: Operand, search: Search) -> Span | None:
    literal = _text(operand)
    at = text.find(literal)
    return None if at < 0 else Span(at, at + len(literal))


def _regex(text: str, operand: Operand, search: Search) -> Span | None:
    found = search(_text(operand), text)
    return None if found is None else Span(found.start(), found.end(), found)


def _starts_with(text: str, operand: Operand, search: Search) -> Span | None:
    """A line of the text starts with the operand: a regex's ``^`` (MULTILINE) before it."""
    prefix = _text(operand)
    if text.startswith(prefix):
        return Span(0, len(prefix))
    at = text.find("\n" + prefix)
    return None if at < 0 else Span(at + 1, at + 1 + len(prefix))


def _no_regex(pattern: str, text: str) -> PatternMatch | None:
    raise NotImplementedError("this operator runs no regex")


def _scan_literal(literal: str) -> ScanNeed | None:
    return ScanNeed(literal, literal=True) if literal else None


def _scan_pattern(pattern: str) -> ScanNeed | None:
    return ScanNeed(pattern, literal=False)


def _literal_evidence(literal: str) -> tuple[str, ...]:
    return (literal.strip().lower(),)


OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator(
            "equals",
            Scalar | None,
            _equals,
            lambda fact, text, operand: (
                f"fact {fact!r} is {short(text)!r}, not {as_text(operand)!r}"
            ),
            Cost.VALUE,
            null_is_value=True,
            pins=True,
            prompt="equals",
            doc="`equals`: the fact's text is the operand (a number or boolean as its JSON text)",
        ),
        Operator(
            "contains",
            str | None,
            _contains,
            lambda fact, text, operand: f"fact {fact!r} does not contain {short(_text(operand))!r}",
            Cost.LITERAL,
            scan=_scan_literal,
            evidence=_literal_evidence,
            prompt="contains",
            doc="`contains`: the operand occurs in the fact's text, on one line or across lines",
        ),
        Operator(
            "regex",
            str | None,
            _regex,
            lambda fact, text, operand: (
                f"fact {fact!r}: regex {short(_text(operand))!r} did not match"
            ),
            Cost.PATTERN,
            pattern=True,
            scan=_scan_pattern,
            evidence=literal_runs,
            prompt="regex",
            doc="`regex`: the pattern matches somewhere in the fact's text (MULTILINE and DOTALL);"
            " its groups fill `{extract.N}` and `{NAME}`",
        ),
        Operator(
            "one_of",
            list[Scalar] | None,
            _one_of,
            lambda fact, text, operand: f"fact {fact!r} is {short(text)!r}, not one of {operand}",
            Cost.VALUE,
            prompt="one_of",
            doc="`one_of`: the fact's text is one of the listed values",
        ),
        Operator(
            "not_equals",
            Scalar | None,
            _equals,
            lambda fact, text, operand: f"fact {fact!r} equals {text!r}",
            Cost.VALUE,
            negated=True,
            null_is_value=True,
            doc="`not_equals`: the fact's text is not the operand",
        ),
        Operator(
            "not_contains",
            str | None,
            _contains,
            lambda fact, text, operand: f"fact {fact!r} contains {short(_text(operand))!r}",
            Cost.LITERAL,
            negated=True,
            prompt="not_contains",
            doc="`not_contains`: the operand occurs nowhere in the fact's text",
        ),
        Operator(
            "not_regex",
            str | None,
            _regex,
            lambda fact, text, operand: f"fact {fact!r} matches {short(_text(operand))!r}",
            Cost.PATTERN,
            negated=True,
            pattern=True,
            prompt="not_regex",
            doc="`not_regex`: the pattern matches nowhere in the fact's text",
        ),
        Operator(
            "starts_with",
            str | None,
            _starts_with,
            lambda fact, text, operand: (
                f"fact {fact!r} has no line starting with {short(_text(operand))!r}"
            ),
            Cost.LITERAL,
            scan=_scan_literal,  # a line that starts with it contains it
            evidence=_literal_evidence,
            prompt="starts_with",
            doc="`starts_with`: a line of the fact's text (the text itself if it is one line)"
            " starts with the operand, as a regex `^` followed by the operand would match",
        ),
    )
}
# Cheapest first, in table order within a cost: the order a condition's operators are checked in.
BY_COST = tuple(sorted(OPERATORS.values(), key=lambda op: op.cost))


def prompt_operators() -> str:
    """The operators as the explorer's schema line names them: ``equals|contains|...``."""
    return "|".join(op.prompt for op in OPERATORS.values() if op.prompt)


def docs_lines() -> list[str]:
    """The operator list of docs/rules.md, one Markdown item per operator."""
    return [f"- {op.doc}" for op in OPERATORS.values()]
