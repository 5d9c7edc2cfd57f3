"""The shipped rules are precise: a rule matches its own cause and nothing else.

Every example of every rule is run against every other rule, and every rule
is run against a corpus of successful build logs (warnings, deprecations,
"0 errors", -Werror flags, tests named after timeouts, retries that
recovered). A rule that matches another cause's example or a build that
passed would send the wrong fix, or a retry, to a build agent.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from theow_workers.core.actions import load_actions
from theow_workers.core.rules.matching import Captures, check_condition, evaluate
from theow_workers.core.rules.schema import Rule, load_rules

ROOT = Path(__file__).resolve().parents[2]
SUCCESS_LOGS = ROOT / "tests" / "fixtures" / "success_logs"
PROBLEM_TYPES = ("build_failure", "dependency_resolution", "test_failure", "infrastructure")


@pytest.fixture(scope="module")
def rules() -> tuple[Rule, ...]:
    actions = load_actions(ROOT / "actions")
    ruleset = load_rules(ROOT / "rules", known_actions=frozenset(actions.names()))
    assert not ruleset.errors, "\n".join(str(e) for e in ruleset.errors)
    return ruleset.rules


def pinned_facts(rule: Rule) -> list[dict[str, Any]]:
    """The equals facts of a rule, once per value of each of its one_of facts."""
    base = {c.fact: c.equals for c in rule.when if "equals" in c.model_fields_set}
    variants = [{**base, c.fact: value} for c in rule.when if c.one_of for value in c.one_of]
    return variants or [base]


def example_cases(rule: Rule) -> list[tuple[str, dict[str, Any]]]:
    """(label, facts) for each example of the rule, with the facts the rule pins."""
    cases = []
    for condition in rule.when:
        for number, example in enumerate(condition.examples, start=1):
            for extra in pinned_facts(rule):
                cases.append((f"{rule.name} #{number}", {condition.fact: example, **extra}))
    return cases


def confusion(matches: dict[str, list[str]], what: str) -> str:
    lines = [f"{len(matches)} rule(s) match {what}:"]
    for rule, victims in sorted(matches.items()):
        lines.append(f"  {rule:<34} matches {', '.join(sorted(set(victims)))}")
    return "\n".join(lines)


def test_every_example_validates_its_own_rule(rules):
    problems = []
    for rule in rules:
        for label, facts in example_cases(rule):
            for condition in rule.when:
                if condition.fact not in facts:
                    continue
                reason = check_condition(condition, facts, Captures(), timeout=0.05)
                if reason:
                    problems.append(f"{label}: {reason}")
            if all(c.fact in facts for c in rule.when):
                match = evaluate(rule, facts)
                if not match.ok:
                    problems.append(f"{label}: {match.reason}")
    assert not problems, "examples that do not match their own rule:\n" + "\n".join(problems)


def test_no_rule_matches_another_rules_example(rules):
    # A wrapper (`generic: true`) is true of most failures, so it may match a
    # specific rule's example, and a wrapper's example may hold a specific
    # cause: the resolver ranks every specific rule above every generic one.
    matches: dict[str, list[str]] = defaultdict(list)
    for owner in (rule for rule in rules if not rule.generic):
        for label, facts in example_cases(owner):
            for rule in rules:
                if rule is not owner and not rule.generic and evaluate(rule, facts).ok:
                    matches[rule.name].append(label)
    assert not matches, confusion(matches, "other rules' examples")


def test_the_success_corpus_is_big_and_varied():
    logs = sorted(SUCCESS_LOGS.glob("*.log"))
    assert len(logs) >= 20
    ecosystems = {path.name.split("_", 1)[0] for path in logs}
    assert {"go", "python", "node", "rust", "java", "cpp", "docker"} <= ecosystems


def test_no_rule_matches_a_successful_build(rules):
    used = {
        str(value)
        for rule in rules
        for c in rule.when
        if c.fact == "problem_type"
        for value in ([c.equals] if "equals" in c.model_fields_set else c.one_of or [])
    }
    matches: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SUCCESS_LOGS.glob("*.log")):
        log = path.read_text(encoding="utf-8")
        for problem_type in sorted(used | set(PROBLEM_TYPES)):
            facts = {
                "log": log,
                "stderr": log,
                "stdout": log,
                "exit_code": 0,
                "problem_type": problem_type,
            }
            for rule in rules:
                if evaluate(rule, facts).ok:
                    matches[rule.name].append(f"{path.name} ({problem_type})")
    assert not matches, confusion(matches, "successful build logs")
