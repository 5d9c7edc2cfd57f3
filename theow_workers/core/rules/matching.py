"""Structural validation of a rule against facts, and parameter binding.

A rule applies when every condition of ``when`` holds and every placeholder
of ``then`` can be bound. Regexes run on bounded input with a time limit, so
a pattern with catastrophic backtracking costs at most ``regex_timeout`` and
then simply does not match.

>>> from theow_workers.core.rules.schema import parse_rule
>>> rule = parse_rule('''
... name: missing_module
... mode: track
... when: [{fact: stderr, regex: "No module named '(?P<module>[a-z_.]+)'"}]
... ''')
>>> evaluate(rule, {"stderr": "No module named 'yaml'"}).captures.named
{'module': 'yaml'}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Protocol

import regex

from theow_client.jsontypes import Json, JsonObject
from theow_client.verdict import BoundAction
from theow_workers.core.rules.evidence import Evidence, IsWrapper, telling_evidence
from theow_workers.core.rules.operators import PatternMatch
from theow_workers.core.rules.operators import short as _short
from theow_workers.core.rules.scanner import Hits
from theow_workers.core.rules.schema import PLACEHOLDER, REGEX_FLAGS, FactCondition, Rule, as_text

DEFAULT_REGEX_TIMEOUT = 0.05  # seconds per regex search
BRACE_ESCAPES = (("{{", "\x00"), ("}}", "\x01"))


class UnboundPlaceholder(LookupError):
    pass


@dataclass
class Captures:
    numbered: dict[int, str] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)
    # Where each condition's evidence operator (regex, contains) matched, by its index in ``when``.
    spans: dict[int, tuple[str, str, int, int]] = field(default_factory=dict)
    # Where each regex condition's named groups that matched begin, by its index in ``when``.
    named_at: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def absorb(self, found: PatternMatch) -> None:
        """Keep the first value seen for each group: earlier facts win."""
        for i, value in enumerate(found.groups(), start=1):
            if value is not None:
                self.numbered.setdefault(i, value)
        for name, value in found.groupdict().items():
            if value is not None:
                self.named.setdefault(name, value)


# What a verdict shows of a rule's captures: enough for a test name or a path, never a whole log.
SHOWN_CAPTURES = 10
SHOWN_CAPTURE_CHARS = 200


def shown_captures(captures: Captures) -> dict[str, str]:
    """The captures a person reads in a verdict: named groups, else numbered ones, bounded.

    >>> c = Captures(numbered={1: "a.go:3"}, named={})
    >>> shown_captures(c)
    {'1': 'a.go:3'}
    """
    chosen = captures.named or {str(i): v for i, v in sorted(captures.numbered.items())}
    return {k: v[:SHOWN_CAPTURE_CHARS] for k, v in list(chosen.items())[:SHOWN_CAPTURES]}


@dataclass(frozen=True)
class Match:
    """The outcome of checking one rule: ok, or the first reason it does not apply."""

    rule: Rule
    ok: bool
    reason: str
    captures: Captures
    actions: tuple[BoundAction, ...] = ()
    evidence: Evidence | None = None


class CompiledPattern(Protocol):
    """What is used of a compiled ``regex`` pattern (the module has no type information)."""

    groups: int
    groupindex: dict[str, int]

    def search(
        self,
        text: str,
        pos: int = 0,
        endpos: int | None = None,
        *,
        partial: bool = False,
        timeout: float | None = None,
    ) -> PatternMatch | None: ...


@lru_cache(maxsize=4096)
def compiled(pattern: str, flags: int = REGEX_FLAGS) -> CompiledPattern:
    """``pattern`` as rules are searched (MULTILINE and DOTALL unless it says otherwise)."""
    pattern_: CompiledPattern = regex.compile(pattern, flags)
    return pattern_


@lru_cache(maxsize=4096)
def required_literals(pattern: str) -> tuple[str, ...] | None:
    """Substrings one of which every match of ``pattern`` must contain, if easy to see.

    Checking ``any(literal in text)`` first lets most rules fail in
    microseconds without running the regex engine over a 64 KB log. For an
    alternation at the top (``a|b``) or in a group every match passes
    through, it is one literal per alternative.
    """
    # Python's parser takes flags turned off only around a group: ``(?-s)x`` as ``(?-s:x)``.
    off = _FLAGS_OFF.match(pattern)
    if off:
        if set(off.group(1).partition("-")[0]) & {"i", "x"}:
            return None
        pattern = f"(?{off.group(1)}:{pattern[off.end() :]})"
    try:
        parsed = re._parser.parse(pattern)  # type: ignore[attr-defined]
    except (re.error, RecursionError, AttributeError):
        return None
    if parsed.state.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    return _literals(list(parsed))


def required_literal(pattern: str) -> str | None:
    """The single literal every match contains, when there is one (see required_literals)."""
    found = required_literals(pattern)
    return found[0] if found is not None and len(found) == 1 else None


_FLAGS_OFF = re.compile(r"\(\?([imsx]*-[imsx]+)\)")
_C = re._constants  # type: ignore[attr-defined]
MIN_LITERAL = 3


def _literals(sequence: list[Any]) -> tuple[str, ...] | None:
    best, run = "", []
    options: tuple[str, ...] | None = None
    for op, arg in sequence:
        if op is _C.LITERAL:
            run.append(chr(arg))
            continue
        best = max(best, "".join(run), key=len)
        run = []
        if options is not None:
            continue
        if op is _C.BRANCH:
            options = _any_of(arg[1])
        elif op is _C.SUBPATTERN and not arg[1] & re.IGNORECASE:
            options = _literals(list(arg[3]))
    best = max(best, "".join(run), key=len)
    if len(best) >= MIN_LITERAL:
        return (best,)
    return options


def _any_of(alternatives: list[Any]) -> tuple[str, ...] | None:
    found = [_literals(list(alternative)) for alternative in alternatives]
    if not found or any(f is None for f in found):
        return None
    return tuple(dict.fromkeys(x for f in found if f is not None for x in f))


class RegexTimeout(Exception):
    pass


def _search(
    pattern: str, text: str, timeout: float, start: int | None = None
) -> PatternMatch | None:
    """Search with a time limit; RegexTimeout past the limit.

    ``start`` is where the scanner saw the pattern occur (search from there);
    without it, a literal pre-check rules most texts out first.
    """
    if start is None:
        literals = required_literals(pattern)
        if literals is not None and not any(literal in text for literal in literals):
            return None
        start = 0
    try:
        return compiled(pattern).search(text, start, timeout=timeout)
    except TimeoutError:
        raise RegexTimeout(f"regex {_short(pattern)!r} timed out after {timeout:g}s") from None


def check_condition(
    condition: FactCondition,
    facts: JsonObject,
    captures: Captures,
    timeout: float,
    hits: Hits | None = None,
    index: int = 0,
) -> str:
    """'' if the condition holds, else why not (and captures gain regex groups and spans)."""
    name = condition.fact
    if name not in facts or facts[name] is None:
        return f"fact {name!r} is missing"
    text = as_text(facts[name])
    try:
        for op, operand in condition.active():
            start = None
            if hits is not None and op.scan is not None and isinstance(operand, str):
                # A pattern the scanner decided is searched from where it occurred.
                need = op.scan(operand)
                if need is not None and not need.literal and hits.covers(name, need.text):
                    start = hits.start(name, need.text)
                    if start is None:  # it does not occur
                        return op.why_not(name, text, operand)
            search = partial(_search, timeout=timeout, start=start) if op.pattern else _none
            found = op.test(text, operand, search)
            if (found is None) is not op.negated:
                return op.why_not(name, text, operand)
            if found is not None and op.evidence is not None:
                # Checked cheapest first: a regex's span wins over a contains on one condition.
                captures.spans[index] = (name, text, found.start, found.end)
            if found is not None and found.match is not None and op.captures:
                captures.absorb(found.match)
                captures.named_at[index] = tuple(
                    found.match.start(group)
                    for group, value in found.match.groupdict().items()
                    if value
                )
    except RegexTimeout as exc:
        return f"fact {name!r}: {exc}"
    return ""


def _none(pattern: str, text: str) -> PatternMatch | None:
    raise AssertionError("only a regex operator searches")


def _cost(condition: FactCondition) -> int:
    """Cheap checks first: most rules are ruled out by an equals or a literal."""
    return condition.cost


def evaluate(
    rule: Rule,
    facts: JsonObject,
    *,
    regex_timeout: float = DEFAULT_REGEX_TIMEOUT,
    client_side: frozenset[str] = frozenset(),
    hits: Hits | None = None,
    is_wrapper: IsWrapper | None = None,
) -> Match:
    """Check every condition of ``rule`` and bind its actions' params.

    ``hits``, from one scan of the facts for all rules, says where each
    scanned pattern occurs, so the regex engine runs from there only.
    ``is_wrapper`` (the rule book's, from its ``generic`` rules) keeps wrapper lines out of
    the evidence.
    """
    captures = Captures()
    # Captures are numbered in `when` order, so regex conditions are checked in
    # file order after the cheap ones.
    order = sorted(range(len(rule.when)), key=lambda i: (_cost(rule.when[i]), i))
    for i in order:
        reason = check_condition(rule.when[i], facts, captures, regex_timeout, hits, i)
        if reason:
            return Match(rule, False, reason, captures)
    try:
        actions = tuple(
            BoundAction(
                step.action,
                bind(step.params, captures, facts),
                client_side=step.action in client_side,
            )
            for step in rule.then
        )
    except UnboundPlaceholder as exc:
        return Match(rule, False, f"placeholder {{{exc.args[0]}}} cannot be bound", captures)
    evidence = telling_evidence(
        captures.spans,
        captures.named_at,
        lambda i: _condition_literals(rule.when[i]),
        None if rule.generic else is_wrapper,  # a wrapper's evidence is a wrapper's line
    )
    return Match(rule, True, "all facts hold", captures, actions, evidence)


def _condition_literals(condition: FactCondition) -> tuple[str, ...]:
    """The literals of the condition's evidence operator: the costliest, as for its span."""
    for op, operand in reversed(condition.active()):
        if op.evidence is not None and isinstance(operand, str):
            return op.evidence(operand)
    return ()


def bind(value: Json, captures: Captures, facts: JsonObject) -> Json:
    """Fill placeholders in every string of ``value``; captures win over facts."""
    if isinstance(value, str):
        return _bind_text(value, captures, facts)
    if isinstance(value, dict):
        return {k: bind(v, captures, facts) for k, v in value.items()}
    if isinstance(value, list):
        return [bind(v, captures, facts) for v in value]
    return value


def _lookup(key: str, captures: Captures, facts: JsonObject) -> str:
    head, _, tail = key.partition(".")
    if head == "extract" and tail:
        value = captures.numbered.get(int(tail)) if tail.isdigit() else captures.named.get(tail)
    elif head == "facts" and tail:
        value = as_text(facts[tail]) if facts.get(tail) is not None else None
    elif not tail:
        value = captures.named.get(key)
        if value is None and facts.get(key) is not None:
            value = as_text(facts[key])
    else:
        value = None
    if value is None:
        raise UnboundPlaceholder(key)
    return value


def _bind_text(text: str, captures: Captures, facts: JsonObject) -> str:
    for escape, marker in BRACE_ESCAPES:
        text = text.replace(escape, marker)
    bound = PLACEHOLDER.sub(lambda m: _lookup(m.group(1), captures, facts), text)
    return bound.replace("\x00", "{").replace("\x01", "}")
