"""Every rule is held to its own examples: positives match, counter-examples do not.

Each ``examples`` entry of a condition must satisfy that condition, through
the scanner as well as the full regex engine (a pattern Hyperscan reads
differently from Python shows here, at review, not in production), and each
``counter_examples`` entry must not.

Regexes are searched with MULTILINE and DOTALL, as in the single-process
library; this project once searched them with no flags. An example that reads
differently under the two (another evidence line, other captures, a match
or none), alone or between two other log lines, is reported: the pattern
states the flags it means (``(?-s)`` for a line-bound ``.``, ``(?m)``, ``(?s)``)
and then reads one way under both.

>>> from theow_workers.core.rules.schema import parse_rule
>>> rule = parse_rule('''
... name: r
... mode: track
... when:
...   - fact: log
...     regex: 'error: (\\\\w+)'
...     examples: ["error: boom"]
...     counter_examples: ["warning: error: boom is fine"]
... ''')
>>> [problem for _, problem in example_problems(rule)]
["when[0].counter_examples[0] matches, but must not: 'warning: error: boom is fine'"]
"""

from __future__ import annotations

from pathlib import Path

import yaml

from theow_workers.core.rules.evidence import evidence_at
from theow_workers.core.rules.matching import Captures, check_condition, compiled
from theow_workers.core.rules.scanner import Scanner
from theow_workers.core.rules.schema import (
    REGEX_FLAGS,
    FactCondition,
    Rule,
    RuleError,
    load_yaml,
    parse_rule,
)

Location = tuple[str | int, ...]
EXAMPLE_TIMEOUT = 1.0  # generous: an example is small, and a slow one is worth a clear error
FORMER_FLAGS = 0  # how rule regexes were searched before they took the library's flags
AROUND = ("theow: a line before\n", "\ntheow: a line after\n")


def example_problems(rule: Rule) -> list[tuple[Location, str]]:
    """(where in the rule file, what is wrong) for each example that misbehaves."""
    problems: list[tuple[Location, str]] = []
    for i, condition in enumerate(rule.when):
        # Examples are log lines: held to the conditions that find evidence in a log.
        if not any(op.evidence is not None for op, _ in condition.active()):
            continue
        alone = rule.model_copy(update={"when": [condition]})
        scanner = Scanner([alone])
        for j, example in enumerate(condition.examples):
            facts = {condition.fact: example}
            where: Location = ("when", i, "examples", j)
            reason = check_condition(condition, facts, Captures(), EXAMPLE_TIMEOUT)
            if reason:
                problems.append((where, f"when[{i}].examples[{j}] does not match: {reason}"))
                continue
            hits = scanner.scan(facts)
            if not scanner.candidates(hits):
                problems.append(
                    (where, f"when[{i}].examples[{j}] matches, but the scanner misses it")
                )
        for j, example in enumerate(condition.counter_examples):
            facts = {condition.fact: example}
            if not check_condition(condition, facts, Captures(), EXAMPLE_TIMEOUT):
                problems.append(
                    (
                        ("when", i, "counter_examples", j),
                        f"when[{i}].counter_examples[{j}] matches, but must not: {_short(example)!r}",
                    )
                )
        problems.extend(reading_changes(condition, i))
    return problems


def reading_changes(condition: FactCondition, index: int) -> list[tuple[Location, str]]:
    """The examples of ``condition`` whose reading depends on the default flags."""
    changes: list[tuple[Location, str]] = []
    for op, pattern in condition.active():
        if not op.pattern or not isinstance(pattern, str):
            continue
        key = op.name
        for kind in ("examples", "counter_examples"):
            for j, example in enumerate(getattr(condition, kind)):
                change = _changed_reading(pattern, example)
                if change:
                    changes.append(
                        (
                            ("when", index, kind, j),
                            f"when[{index}].{kind}[{j}] reads differently now that {key}es are"
                            f" searched with MULTILINE and DOTALL: {change}; say which is meant"
                            " in the pattern ((?-s) for a line-bound '.', (?m), (?s))",
                        )
                    )
    return changes


def _changed_reading(pattern: str, example: str) -> str:
    """'' when the example reads the same under both flag sets, else how it differs."""
    for text, where in ((example, ""), (AROUND[0] + example + AROUND[1], " between two lines")):
        before, after = _reading(pattern, FORMER_FLAGS, text), _reading(pattern, REGEX_FLAGS, text)
        if before != after:
            return f"{where and where.strip() + ', '}{_said(before)} before, {_said(after)} now"
    return ""


Reading = tuple[int, str, tuple[str | None, ...], tuple[tuple[str, str | None], ...]] | str | None


def _reading(pattern: str, flags: int, text: str) -> Reading:
    """What a person sees of a match: its evidence line and text, and its captures."""
    try:
        found = compiled(pattern, flags).search(text, timeout=EXAMPLE_TIMEOUT)
    except TimeoutError:
        return "a timeout"
    if found is None:
        return None
    evidence = evidence_at("", text, found.start(), found.end())
    return evidence.line, evidence.text, found.groups(), tuple(sorted(found.groupdict().items()))


def _said(reading: Reading) -> str:
    if reading is None or isinstance(reading, str):
        return reading or "no match"
    line, _, numbered, named = reading
    captures = dict(named) if named else {str(i): v for i, v in enumerate(numbered, start=1)}
    shown = {k: v if len(v) <= 40 else v[:37] + "..." for k, v in captures.items() if v}
    return f"a match at line {line}" + (f" capturing {shown}" if shown else "")


def check_examples(path: Path) -> list[RuleError]:
    """The example problems of one rule file, each with its line."""
    text = path.read_text(encoding="utf-8")
    rule = parse_rule(text, path)
    lines = example_lines(text)
    return [RuleError(path, reason, lines.get(where)) for where, reason in example_problems(rule)]


def example_lines(text: str) -> dict[Location, int]:
    lines: dict[Location, int] = {}

    def walk(node: yaml.Node, path: Location) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                lines[(*path, key.value)] = key.start_mark.line + 1
                walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[(*path, i)] = item.start_mark.line + 1
                walk(item, (*path, i))

    root, _ = load_yaml(text)  # parse_rule took it: no alias to expand
    if root is not None:
        walk(root, ())
    return lines


def _short(text: str, limit: int = 80) -> str:
    text = text.strip().replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
