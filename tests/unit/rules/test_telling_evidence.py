"""The evidence a rule shows is the line that says why, not a wrapper or a header it also matched.

Through the resolver with the shipped rules, as a worker runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.actions import load_actions
from theow_workers.core.resolve.plan import RuleBook, plan
from theow_workers.core.rules.schema import load_rules, parse_rule

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def book() -> RuleBook:
    actions = load_actions(ROOT / "actions")
    ruleset = load_rules(ROOT / "rules", known_actions=frozenset(actions.names()))
    assert not ruleset.errors, "\n".join(str(e) for e in ruleset.errors)
    return RuleBook(ruleset.rules, "test")


def shown(book: RuleBook, log: str) -> tuple[str, int, str]:
    """(chosen specific rule, its evidence line number, its evidence text)."""
    result = plan(book, {"log": log})
    chosen = result.specific[0]
    assert chosen.match is not None and chosen.match.evidence is not None
    return chosen.rule, chosen.match.evidence.line, chosen.match.evidence.text


def test_a_missing_rakefile_shows_rakes_reason_not_rake_aborted(book):
    log = "$ rake\nrake aborted!\nNo Rakefile found (looking for: rakefile, Rakefile)\n"
    assert shown(book, log) == (
        "rake_rakefile_missing",
        3,
        "No Rakefile found (looking for: rakefile, Rakefile)",
    )


def test_a_failing_pytest_test_shows_its_assertion_not_the_sections_header(book):
    log = (
        "=================================== FAILURES ===================================\n"
        "___________________________________ test_add ___________________________________\n"
        "\n"
        "    def test_add():\n"
        ">       assert add(2, 3) == 5\n"
        "E       assert -1 == 5\n"
        "E        +  where -1 = add(2, 3)\n"
        "\n"
        "test_calc.py:4: AssertionError\n"
        "=========================== short test summary info ============================\n"
        "FAILED test_calc.py::test_add - assert -1 == 5\n"
        "============================== 1 failed in 0.03s ===============================\n"
    )
    rule, line, text = shown(book, log)
    assert (rule, line, text) == ("python_test_failures", 6, "E       assert -1 == 5")
    captures = plan(book, {"log": log}).specific[0].match.captures.named  # type: ignore[union-attr]
    assert captures["test"] == "test_add"


def test_a_rule_whose_first_condition_matched_a_wrapper_shows_its_other_condition():
    make = parse_rule(
        "name: make_failed\nmode: track\ngeneric: true\n"
        "when: [{fact: log, regex: 'make: \\*\\*\\* \\[\\w+\\] Error \\d+'}]"
    )
    linker = parse_rule(
        "name: undefined_symbol\nmode: track\nwhen:\n"
        "  - {fact: log, regex: 'make: \\*\\*\\* \\[\\w+\\] Error \\d+'}\n"
        "  - {fact: log, regex: 'undefined reference to `(?P<symbol>\\w+)'''}\n"
    )
    log = "ld: main.o: undefined reference to `frobnicate'\nmake: *** [all] Error 1\n"
    chosen = plan(RuleBook((make, linker), "v"), {"log": log}).specific[0]
    assert chosen.match is not None and chosen.match.evidence is not None
    assert chosen.match.evidence.text == "ld: main.o: undefined reference to `frobnicate'"
    assert chosen.match.evidence.line == 1


def test_the_whole_match_stays_the_matched_text(book):
    log = "$ rake\nrake aborted!\nNo Rakefile found (looking for: rakefile, Rakefile)\n"
    evidence = plan(book, {"log": log}).specific[0].match.evidence  # type: ignore[union-attr]
    assert evidence is not None and evidence.matched.startswith("rake aborted!\n")


def test_a_pattern_that_starts_mid_line_shows_the_whole_line_it_matched_on(book):
    log = (
        "go: downloading github.com/imdario/mergo v1.0.0\n"
        "go: github.com/imdario/mergo@v1.0.0: parsing go.mod:\n"
        "        module declares its path as: dario.cat/mergo\n"
        "                but was required as: github.com/imdario/mergo\n"
    )
    assert shown(book, log) == (
        "go_module_path_rename",
        2,
        "go: github.com/imdario/mergo@v1.0.0: parsing go.mod:",
    )


def test_a_line_past_the_bound_is_cut_there_and_never_cuts_away_what_matched(book):
    log = "x" * 300 + " ModuleNotFoundError: No module named 'yaml' " + "y" * 300 + "\n"
    rule, line, text = shown(book, log)
    assert (rule, line) == ("python_module_not_found", 1)
    assert text == log[:500]  # from the line's start: the match begins within the bound
    far = "x" * 600 + " ModuleNotFoundError: No module named 'yaml'\n"
    assert shown(book, far)[2] == "…ModuleNotFoundError: No module named 'yaml'"
