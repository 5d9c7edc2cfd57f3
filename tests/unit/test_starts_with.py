"""Given a rule whose condition says `starts_with`, I expect it to load, to hold when a line of
the log starts with the operand (as a regex `^` would, MULTILINE) and not otherwise, its examples
to be held to it by `theow rules check`, and the explorer's prompt to offer the operator."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from theow_workers.cli import app
from theow_workers.core.explore.context import INSTRUCTIONS
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.scanner import Scanner
from theow_workers.core.rules.schema import parse_rule

RULE = """\
name: npm_err
description: npm says why it gave up
mode: track
when:
  - fact: log
    starts_with: "npm ERR! "
    examples: ["npm ERR! code ERESOLVE"]
    counter_examples: [{counter}]
"""


def test_a_starts_with_rule_loads_matches_is_checked_and_is_offered(tmp_path: Path) -> None:
    rule = parse_rule(RULE.format(counter='"warning: npm ERR! is quoted here"'))
    assert rule.when[0].operators() == ["starts_with"]
    scanner = Scanner([rule])
    for log, holds in [
        ("> build\nnpm ERR! code ERESOLVE\nnpm ERR! done", True),  # any line, as `^` does
        ("npm ERR! first line", True),
        ("warning: npm ERR! is quoted here", False),  # contains it, no line starts with it
        ("npm err! code E404", False),
    ]:
        facts = {"log": log}
        hits = scanner.scan(facts)
        for match in (evaluate(rule, facts), evaluate(rule, facts, hits=hits)):
            assert match.ok is holds, (log, match.reason)
        assert bool(scanner.candidates(hits)) or not holds  # the scanner never hides a match
    found = evaluate(rule, {"log": "> build\nnpm ERR! code ERESOLVE"})
    assert found.evidence is not None and found.evidence.line == 2  # the line it starts
    assert "has no line starting with 'npm ERR! '" in evaluate(rule, {"log": "ok"}).reason

    rules, actions = tmp_path / "rules", tmp_path / "actions"
    rules.mkdir(), actions.mkdir()
    path = rules / "npm_err.rule.yaml"
    runner = CliRunner()
    path.write_text(RULE.format(counter='"warning: npm ERR! is quoted here"'))
    result = runner.invoke(app, ["rules", "check", str(rules), "--actions", str(actions), "--json"])
    assert result.exit_code == 0, result.output
    path.write_text(RULE.format(counter='"npm ERR! a counter-example that starts with it"'))
    result = runner.invoke(app, ["rules", "check", str(rules), "--actions", str(actions), "--json"])
    assert result.exit_code == 1
    reasons = [e["reason"] for e in json.loads(result.stdout)["errors"]]
    assert any("counter_examples[0] matches, but must not" in r for r in reasons), reasons

    assert "starts_with" in INSTRUCTIONS.split("when: [{fact, ")[1].split(", examples}]")[0]
