"""Every rule's examples against the whole library: no other specific rule wins them.

A rule's own checks (:mod:`~theow_workers.core.rules.examples`) say its examples
match it; nothing there says another rule does not match them better. Here
each example of each specific rule is resolved as a failure would be, with
the resolver's structural ranking (specific before generic, evidence nearer
the end first; no similarity model, no track record), and the rule must come
first. A rule tied with it on that ranking counts as a winner too: similarity
would decide, and it may decide either way.

A rule meant to win over another declares it: ``supersedes: [name]``. It may
then win the other's examples; the declaration must be backed by an example
on which both rules apply, or it says nothing a person can check.

Wrappers (``generic``) are not checked: any specific rule outranks them by design.

>>> from theow_workers.core.rules.schema import parse_rule
>>> broad = parse_rule("name: any_error\\nmode: track\\n"
...     "when: [{fact: log, regex: 'error: (?P<m>.+)', examples: ['x.c:1: error: boom']}]")
>>> narrow = parse_rule("name: c_error\\nmode: track\\n"
...     "when: [{fact: log, regex: '\\\\w+\\\\.c:\\\\d+: ', examples: ['x.c:1: error: boom']}]")
>>> [c.describe() for c in confusions([broad, narrow])]
["when[0].examples[0] of c_error is won by any_error: 'x.c:1: error: boom'"]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from theow_client.jsontypes import JsonObject
from theow_workers.core.resolve.plan import Candidate, RuleBook, plan
from theow_workers.core.rules.examples import EXAMPLE_TIMEOUT, Location, example_lines
from theow_workers.core.rules.schema import Rule, RuleError


@dataclass(frozen=True)
class Confusion:
    """An example of ``rule`` that ``winner`` wins (or a declaration that does not hold)."""

    rule: str
    where: Location
    example: str
    winner: str
    reason: str = ""  # set for a problem with a `supersedes` declaration

    def describe(self) -> str:
        if self.reason:
            return self.reason
        i, j = self.where[1], self.where[3]
        return f"when[{i}].examples[{j}] of {self.rule} is won by {self.winner}: {_short(self.example)!r}"


def confusions(rules: Sequence[Rule], book: RuleBook | None = None) -> list[Confusion]:
    """Each example of a specific rule that another specific rule outranks or ties, then
    each ``supersedes`` declaration that names no rule, that an example contradicts (the
    superseded rule ranks first), or that no example backs."""
    book = book or RuleBook(tuple(rules), "confusion check")
    by_name = {rule.name: rule for rule in rules}
    found: list[Confusion] = []
    backed: set[tuple[str, str]] = set()
    for rule in rules:
        for i, j, facts in _example_facts(rule):
            ranked = plan(book, facts, regex_timeout=EXAMPLE_TIMEOUT).attempts
            attempts = [c.rule for c in ranked]
            if rule.name not in attempts:
                continue  # it does not match its own example: its own checks say so
            where: Location = ("when", i, "examples", j)
            for rank, name in enumerate(attempts):
                for other in by_name[name].supersedes:
                    if other not in attempts:
                        continue
                    if attempts.index(other) > rank:
                        backed.add((name, other))
                    else:
                        reason = (
                            f"{name} supersedes {other}, but {other} ranks first on"
                            f" when[{i}].examples[{j}] of {rule.name}"
                        )
                        found.append(Confusion(name, ("supersedes",), "", other, reason))
            winner = None if rule.generic else _winner(ranked, rule.name, by_name)
            if winner is not None:
                example = facts[rule.when[i].fact]
                found.append(Confusion(rule.name, where, example, winner))
    for rule in rules:
        for other in rule.supersedes:
            if other not in by_name:
                reason = f"{rule.name} supersedes {other!r}, which is no rule of the library"
            elif rule.name in by_name[other].supersedes:
                reason = f"{rule.name} and {other} supersede each other"
            elif (rule.name, other) not in backed:
                reason = (
                    f"{rule.name} supersedes {other}, but no example shows both applying"
                    f" with {rule.name} first: add one"
                )
            else:
                continue
            found.append(Confusion(rule.name, ("supersedes",), "", other, reason))
    return list(dict.fromkeys(found))


def _winner(ranked: Sequence[Candidate], own: str, by_name: dict[str, Rule]) -> str | None:
    """The first specific rule ranked above ``own``, or level with it, that does not supersede it."""
    at = next(rank for rank, c in enumerate(ranked) if c.rule == own)
    level = (ranked[at].generic, ranked[at].normal, ranked[at].position)
    for rank, candidate in enumerate(ranked):
        if candidate.rule == own or candidate.generic:
            continue
        if own in by_name[candidate.rule].supersedes:
            continue
        if rank < at or (candidate.generic, candidate.normal, candidate.position) == level:
            return candidate.rule
    return None


def _example_facts(rule: Rule) -> list[tuple[int, int, JsonObject]]:
    """(condition index, example index, facts) for each example of ``rule``.

    The facts are the example on its fact, the values the rule's ``equals`` and
    ``one_of`` conditions pin, and the first example of each condition on another fact.
    """
    pinned: JsonObject = {}
    for condition in rule.when:
        if "equals" in condition.model_fields_set:
            pinned.setdefault(condition.fact, condition.equals)
        elif condition.one_of:
            pinned.setdefault(condition.fact, condition.one_of[0])
    for condition in rule.when:
        if condition.examples:
            pinned.setdefault(condition.fact, condition.examples[0])
    return [
        (i, j, {**pinned, condition.fact: example})
        for i, condition in enumerate(rule.when)
        for j, example in enumerate(condition.examples)
    ]


def confusion_errors(
    rules: Sequence[Rule], files: dict[str, Path], book: RuleBook | None = None
) -> list[RuleError]:
    """:func:`confusions` as errors naming each example's (or declaration's) file and line."""
    errors = []
    lines: dict[str, dict[Location, int]] = {}
    for confusion in confusions(rules, book):
        path = files[confusion.rule]
        if confusion.rule not in lines:
            lines[confusion.rule] = example_lines(path.read_text(encoding="utf-8"))
        errors.append(
            RuleError(path, confusion.describe(), lines[confusion.rule].get(confusion.where))
        )
    return errors


def _short(text: str, limit: int = 80) -> str:
    """The start of ``text``, shown with ``repr`` (so newlines and escapes read as such)."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rule_confusions(rule: Rule, book: RuleBook) -> list[tuple[str, str]]:
    """The confusion check for one rule about to join ``book``, without rebuilding its scanner.

    Its examples must not be won (outranked or tied) by a specific rule of the
    book, and it must not win theirs; ``supersedes`` is honoured both ways.
    What :func:`confusions` would report for this rule, in the same words, each
    with the other rule: ``(other rule, problem)``.
    """
    from theow_workers.core.rules.matching import evaluate

    found: list[tuple[str, str]] = []
    for i, j, facts in _example_facts(rule):
        own = evaluate(rule, facts, regex_timeout=EXAMPLE_TIMEOUT, is_wrapper=book.is_wrapper)
        if not own.ok or own.evidence is None:
            continue  # its own checks say so
        for candidate in plan(book, facts, regex_timeout=EXAMPLE_TIMEOUT).attempts:
            if candidate.generic or candidate.rule in rule.supersedes:
                continue
            if candidate.position >= own.evidence.position:
                example = facts[rule.when[i].fact]
                found.append(
                    (
                        candidate.rule,
                        f"when[{i}].examples[{j}] of {rule.name} is won by {candidate.rule}: {_short(example)!r}",
                    )
                )
                break
    patterns = [c.regex for c in rule.when if c.regex]
    for other in book.rules:
        if other.generic or rule.name in other.supersedes:
            continue
        for i, j, facts in _example_facts(other):
            text = facts.get(other.when[i].fact)
            if patterns and not any(
                isinstance(v, str) and _searches(p, v) for p in patterns for v in facts.values()
            ):
                continue
            mine = evaluate(rule, facts, regex_timeout=EXAMPLE_TIMEOUT, is_wrapper=book.is_wrapper)
            if not mine.ok or mine.evidence is None:
                continue
            theirs = next(
                (
                    c
                    for c in plan(book, facts, regex_timeout=EXAMPLE_TIMEOUT).attempts
                    if c.rule == other.name
                ),
                None,
            )
            if theirs is not None and mine.evidence.position >= theirs.position:
                found.append(
                    (
                        other.name,
                        f"when[{i}].examples[{j}] of {other.name} is won by {rule.name}: {_short(str(text))!r}",
                    )
                )
    return found


def _searches(pattern: str, text: str) -> bool:
    from theow_workers.core.rules.matching import compiled

    try:
        return compiled(pattern).search(text, timeout=EXAMPLE_TIMEOUT) is not None
    except TimeoutError:
        return True  # let the full check decide
