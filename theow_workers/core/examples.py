"""Every rule is held to its own examples: positives match, counter-examples do not.

Each ``examples`` entry of a condition must satisfy that condition, through
the scanner as well as the full regex engine (a pattern Hyperscan reads
differently from Python shows here, at review, not in production), and each
``counter_examples`` entry must not.

>>> from theow_workers.core.rules import parse_rule
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

from theow_workers.core.matching import Captures, check_condition
from theow_workers.core.rules import Rule, RuleError, load_yaml, parse_rule
from theow_workers.core.scanner import Scanner

Location = tuple[str | int, ...]
EXAMPLE_TIMEOUT = 1.0  # generous: an example is small, and a slow one is worth a clear error


def example_problems(rule: Rule) -> list[tuple[Location, str]]:
    """(where in the rule file, what is wrong) for each example that misbehaves."""
    problems: list[tuple[Location, str]] = []
    for i, condition in enumerate(rule.when):
        if condition.regex is None and condition.contains is None:
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
    return problems


def check_examples(path: Path) -> list[RuleError]:
    """The example problems of one rule file, each with its line."""
    text = path.read_text(encoding="utf-8")
    rule = parse_rule(text, path)
    lines = _lines(text)
    return [RuleError(path, reason, lines.get(where)) for where, reason in example_problems(rule)]


def _lines(text: str) -> dict[Location, int]:
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
