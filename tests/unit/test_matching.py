"""Validating facts and binding action params."""

import pytest

from theow_workers.core.rules.matching import evaluate, required_literal
from theow_workers.core.rules.schema import parse_rule


def rule(when: str, params: str = "{}", mode: str = "fix") -> object:
    return parse_rule(
        f"name: r\nmode: {mode}\nwhen:\n{when}\nthen:\n  - action: act\n    params: {params}\n"
    )


GO_RENAME = rule(
    "  - fact: stderr\n"
    "    regex: 'declares its path as: (\\S+)\\s+but was required as: (?P<old>\\S+)'\n",
    '{new: "{extract.1}", old: "{extract.2}", named: "{extract.old}", bare: "{old}", '
    'job: "{facts.job}", fallback: "{repo}", literal: "{{extract.1}}"}',
)
LOG = "go: module declares its path as: dario.cat/mergo\n\tbut was required as: github.com/imdario/mergo"


def test_every_placeholder_form_binds_from_captures_and_facts():
    match = evaluate(GO_RENAME, {"stderr": LOG, "job": "build-42", "repo": "acme/api"})
    assert match.ok, match.reason
    assert match.actions[0].params == {
        "new": "dario.cat/mergo",
        "old": "github.com/imdario/mergo",
        "named": "github.com/imdario/mergo",
        "bare": "github.com/imdario/mergo",
        "job": "build-42",
        "fallback": "acme/api",
        "literal": "{extract.1}",
    }


def test_a_capture_wins_over_a_fact_of_the_same_name():
    match = evaluate(GO_RENAME, {"stderr": LOG, "job": "j", "repo": "r", "old": "from-facts"})
    assert match.actions[0].params["bare"] == "github.com/imdario/mergo"


def test_a_placeholder_that_cannot_be_bound_means_the_rule_does_not_apply():
    match = evaluate(GO_RENAME, {"stderr": LOG, "repo": "r"})  # no `job` fact
    assert not match.ok
    assert "{facts.job}" in match.reason
    assert match.actions == ()


def test_a_missing_fact_never_matches_not_even_a_negative_operator():
    r = rule("  - {fact: stderr, not_contains: warning}", mode="track")
    assert not evaluate(r, {}).ok
    assert "missing" in evaluate(r, {}).reason
    assert evaluate(r, {"stderr": "all good"}).ok
    assert not evaluate(r, {"stderr": "a warning"}).ok


def test_operators_on_one_fact_are_anded_and_non_strings_compare_as_text():
    r = rule(
        "  - {fact: exit_code, one_of: [137, 143]}\n"
        "  - {fact: stderr, contains: Killed, not_regex: 'exit code 0\\b'}\n"
        "  - {fact: retried, equals: false}",
        mode="track",
    )
    assert evaluate(r, {"exit_code": 137, "stderr": "Killed", "retried": False}).ok
    assert not evaluate(r, {"exit_code": 1, "stderr": "Killed", "retried": False}).ok
    assert not evaluate(r, {"exit_code": 137, "stderr": "Killed", "retried": True}).ok
    assert not evaluate(r, {"exit_code": 143, "stderr": "Killed; exit code 0", "retried": False}).ok


def test_a_backtracking_regex_on_a_long_line_gives_up_quickly_instead_of_stalling():
    r = rule("  - {fact: stderr, regex: '(a+)+$'}", mode="track")
    # Unbounded, this search runs for longer than the universe has existed: an answer at
    # all, naming the timeout, is the search given up.
    match = evaluate(r, {"stderr": "a" * 50_000 + "!"}, regex_timeout=0.05)
    assert not match.ok
    assert "timed out" in match.reason


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"declares its path as: (\S+)", "declares its path as: "),
        (r"No module named '(?P<m>[\w.]+)'", "No module named '"),
        (r"(a|b)cd", None),  # too short
        (r"(?i)error: cannot", None),  # case-insensitive: no literal to trust
        (r"foo|barbaz", None),  # alternation at the top: nothing is required
    ],
)
def test_the_required_literal_is_only_what_every_match_must_contain(pattern, literal):
    assert required_literal(pattern) == literal


def test_an_alternation_needs_one_of_its_literals_and_still_matches_every_wording():
    from theow_workers.core.rules.matching import required_literals

    pattern = r"(?:Could not resolve host|Temporary failure in name resolution): (?P<host>\S+)"
    assert required_literals(pattern) == (
        "Could not resolve host",
        "Temporary failure in name resolution",
    )
    r = rule(f"  - {{fact: stderr, regex: '{pattern}'}}", mode="track")
    assert evaluate(r, {"stderr": "curl: (6) Could not resolve host: example.org"}).ok
    assert evaluate(r, {"stderr": "git: Temporary failure in name resolution: github.com"}).ok
    assert not evaluate(r, {"stderr": "all fine"}).ok
