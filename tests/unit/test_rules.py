"""Rule files: what loads, and how a broken one is reported."""

from pathlib import Path

import pytest

from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import Mode, RuleError, load_rules, parse_rule

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

REFERENCE_RULE = """\
name: module_path_rename
description: >
  Module had a URL rename. Build fails because the required
  path doesn't match the module's declared path.
tags: [go, dep_resolution, rename, manual]
collection: go_rules
notes: written for the single-process Theow library

when:
  - fact: problem_type
    equals: dep_resolution
  - fact: stderr
    regex: 'declares its path as: (\\S+)\\s+but was required as: (\\S+)'
    examples:
      - |
        github.com/imdario/mergo@v1.0.2: parsing go.mod:
              module declares its path as: dario.cat/mergo
              but was required as: github.com/imdario/mergo

then:
  - action: fix_path_rename
    params:
      new_path: "{extract.1}"
      old_path: "{extract.2}"
"""

PROBABILISTIC_RULE = """\
name: build_failure_unknown
description: Build fails with an error not covered by deterministic rules.
tags: [go, build, catchall, manual]
when:
  - fact: problem_type
    equals: build_failure
llm_config:
  prompt_template: file://prompts/investigate_build_failure.md
  tools: [read_file, write_file, run_command]
  constraints:
    max_tool_calls: 15
    max_tokens: 8192
  use_secondary: true
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.rule.yaml"
    path.write_text(text)
    return path


def test_a_rule_written_for_the_reference_library_loads_unchanged(tmp_path):
    write(tmp_path, "module_path_rename", REFERENCE_RULE)
    write(tmp_path, "build_failure_unknown", PROBABILISTIC_RULE)
    ruleset = load_rules(tmp_path)
    assert ruleset.errors == ()
    rules = ruleset.by_name()
    assert rules["module_path_rename"].mode is Mode.FIX
    assert rules["module_path_rename"].collection == "go_rules"
    assert rules["build_failure_unknown"].type == "probabilistic"
    assert rules["build_failure_unknown"].llm_config.use_secondary is True


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        (
            "name: r\nmode: track\nwhen:\n  - fact: stderr\n    regx: boom\n",
            5,
            "unknown key 'regx'",
        ),
        (
            "name: r\nmode: track\nsurprise: 1\nwhen:\n  - {fact: a, equals: b}\n",
            3,
            "unknown key 'surprise'",
        ),
        ("name: r\nmode: track\nwhen: []\n", 3, "`when` is empty"),
        (
            "name: r\nmode: track\nwhen:\n  - fact: stderr\n    regex: '(unclosed'\n",
            5,
            "does not compile",
        ),
        (
            "name: r\nwhen:\n  - {fact: a, equals: b}\nthen:\n  - action: nowhere\n",
            5,
            "unknown action 'nowhere'",
        ),
        (
            "name: other\nmode: track\nwhen:\n  - {fact: a, equals: b}\n",
            1,
            "differs from file name 'r'",
        ),
        ("name: r\nmode: sometimes\nwhen:\n  - {fact: a, equals: b}\n", 2, "mode"),
        ("name: r\nwhen:\n  - {fact: a, equals: b}\n", 1, "needs at least one action"),
        ("name: r\nwhen: [unclosed\n", 3, "invalid YAML"),
        (
            "name: r\nwhen:\n  - {fact: s, regex: 'x (a)'}\nthen:\n  - action: echo\n    params: {v: '{extract.2}'}\n",
            6,
            "1 group(s)",
        ),
    ],
)
def test_a_broken_rule_file_is_reported_with_file_line_and_reason(tmp_path, text, line, reason):
    path = write(tmp_path, "r", text)
    with pytest.raises(RuleError) as caught:
        parse_rule(text, path, known_actions=frozenset({"echo"}))
    assert caught.value.path == str(path)
    assert caught.value.line == line
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"{path}:{line}: ")


def test_loading_a_directory_collects_every_problem_and_keeps_the_good_rules(tmp_path):
    write(tmp_path, "good", "name: good\nmode: track\nwhen:\n  - {fact: a, equals: b}\n")
    write(tmp_path, "bad", "name: bad\nmode: track\nwhen: []\n")
    write(tmp_path, "worse", "name: nope\nmode: track\nwhen:\n  - {fact: a, equals: b}\n")
    ruleset = load_rules(tmp_path)
    assert [r.name for r in ruleset.rules] == ["good"]
    assert sorted(Path(e.path).name for e in ruleset.errors) == ["bad.rule.yaml", "worse.rule.yaml"]


def test_the_content_hash_changes_with_the_rule_and_with_the_model():
    rule = parse_rule(REFERENCE_RULE)
    edited = parse_rule(REFERENCE_RULE.replace("dep_resolution", "dependency_resolution"))
    assert rule.content_hash("m1") == parse_rule(REFERENCE_RULE).content_hash("m1")
    assert rule.content_hash("m1") != edited.content_hash("m1")
    assert rule.content_hash("m1") != rule.content_hash("m2")


def test_the_fixture_rules_all_load():
    from theow_workers.core.actions import load_actions

    actions = load_actions(FIXTURES / "actions")
    ruleset = load_rules(FIXTURES / "rules", known_actions=frozenset(actions.names()))
    assert ruleset.errors == ()
    assert len(ruleset.rules) >= 8


def test_a_condition_without_an_operator_holds_when_the_fact_is_present():
    # The library spec's form: `- fact: exit_code` means "the step reported an exit code".
    rule = parse_rule("name: r\nmode: track\nwhen:\n  - fact: exit_code\n")
    assert evaluate(rule, {"exit_code": 2}).ok
    assert evaluate(rule, {"exit_code": 0}).ok
    assert not evaluate(rule, {"stderr": "boom"}).ok


def test_rules_check_holds_each_rule_to_its_examples_and_counter_examples(tmp_path):
    from theow_workers.core.rules.examples import check_examples

    path = write(
        tmp_path,
        "r",
        "name: r\nmode: track\nwhen:\n  - fact: log\n    regex: 'error: (\\w+)'\n"
        "    examples: ['error: boom', 'warning only']\n"
        "    counter_examples: ['no error: here is fine']\n",
    )
    problems = [str(p) for p in check_examples(path)]
    assert len(problems) == 2
    assert problems[0].startswith(f"{path}:6: when[0].examples[1] does not match")
    assert problems[1].startswith(f"{path}:7: when[0].counter_examples[0] matches, but must not")


def test_params_are_bound_against_the_actions_signatures(tmp_path):
    import inspect

    def replace(workspace: str, old_path: str, version: str, note: str = "") -> dict:
        return {}

    def anything(facts: dict, **params: str) -> dict:
        return {}

    (tmp_path / "short.rule.yaml").write_text(
        "name: short\nwhen:\n  - {fact: a, equals: b}\nthen:\n"
        "  - action: replace\n    params: {old_path: x, workspace: /tmp}\n"
        "  - action: anything\n    params: {whatever: 1}\n"
    )
    (tmp_path / "full.rule.yaml").write_text(
        "name: full\nwhen:\n  - {fact: a, equals: b}\nthen:\n"
        "  - action: replace\n    params: {old_path: x, version: v1}\n"
    )
    signatures = {"replace": inspect.signature(replace), "anything": inspect.signature(anything)}
    ruleset = load_rules(tmp_path, signatures=signatures)
    assert [r.name for r in ruleset.rules] == ["full"]
    assert [str(e) for e in ruleset.errors] == [
        f"{tmp_path}/short.rule.yaml:6: action 'replace' is missing a required argument: 'version'",
        f"{tmp_path}/short.rule.yaml:6: action 'replace' takes no argument 'workspace'",
    ]


@pytest.mark.parametrize(
    "text", ["[" * 5000 + "]" * 5000, "- " * 5000 + "x", "{a: " * 3000 + "1" + "}" * 3000]
)
def test_yaml_nested_too_deeply_is_a_rule_error_not_a_crash(text):
    from theow_workers.core.resolve.plan import RuleBook
    from theow_workers.review.teach import rule_problems

    with pytest.raises(RuleError, match="nested too deeply"):
        parse_rule(text)
    # A reviewer's edit of that text is refused with the reason (the console showed a 500).
    rule, problems = rule_problems(text, {"log": "x"}, RuleBook((), "empty"))
    assert rule is None and problems == ["line 1: invalid YAML: nested too deeply to be a rule"]
