"""Rules written for the single-process library, and a library whose rules confuse
each other, through `theow rules test` and `theow rules check` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_ACTIONS = ROOT / "tests" / "fixtures" / "actions"

pytestmark = pytest.mark.integration

# As the library's users write them: no mode, a fact on stderr, an action bound to a capture.
LIBRARY_RULES = {
    "go_test_package_failed": (r"^FAIL\s+(?P<pkg>\S+)", "pkg"),
    "go_panic": (r"panic:.*goroutine (?P<gid>\d+)", "gid"),
}


def theow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "COLUMNS": "200",
             "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def library_rule(name: str, pattern: str, group: str) -> str:
    return (
        f"name: {name}\ndescription: written for the single-process library\n"
        f"when:\n  - fact: stderr\n    regex: '{pattern}'\n"
        f"then:\n  - action: echo\n    params: {{{group}: '{{extract.{group}}}'}}\n"
    )


@pytest.mark.parametrize(
    ("stderr", "rule", "params"),
    [
        ("ok  a/b 0.1s\nFAIL github.com/x/y [build failed]", "go_test_package_failed",
         {"pkg": "github.com/x/y"}),
        ("panic: runtime error\n\ngoroutine 7 [running]:", "go_panic", {"gid": "7"}),
    ],
)  # fmt: skip
def test_a_library_rule_matches_with_the_librarys_captures(tmp_path, stderr, rule, params):
    for name, (pattern, group) in LIBRARY_RULES.items():
        (tmp_path / f"{name}.rule.yaml").write_text(library_rule(name, pattern, group))
    facts = tmp_path / "failure.json"
    facts.write_text(json.dumps({"stderr": stderr}))
    result = theow(
        "rules", "test", "--facts", str(facts), "--json",
        "--rules", str(tmp_path), "--actions", str(FIXTURE_ACTIONS),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["rule"], report["actions"]) == (rule, [{"action": "echo", "params": params}])


def test_rules_check_names_the_rule_the_example_and_the_winner(tmp_path):
    (tmp_path / "any_error.rule.yaml").write_text(
        "name: any_error\nmode: track\nwhen:\n  - fact: log\n"
        "    regex: 'error: (?P<message>[^\\n]+)'\n    examples: ['error: boom']\n"
    )
    (tmp_path / "c_error.rule.yaml").write_text(
        "name: c_error\nmode: track\nwhen:\n  - fact: log\n"
        "    regex: '(?m)^\\w+\\.c:\\d+:\\d+: '\n"
        "    examples: [\"main.c:5:12: error: expected ';' before 'return'\"]\n"
    )
    result = theow("rules", "check", str(tmp_path), "--actions", str(FIXTURE_ACTIONS))
    assert result.returncode == 1
    assert (
        f"{tmp_path}/c_error.rule.yaml:6: when[0].examples[0] of c_error is won by any_error:"
        " \"main.c:5:12: error: expected ';' before 'return'\""
    ) in result.stderr
    # Declared, it is what the author meant.
    declared = (tmp_path / "any_error.rule.yaml").read_text() + "supersedes: [c_error]\n"
    (tmp_path / "any_error.rule.yaml").write_text(declared)
    result = theow("rules", "check", str(tmp_path), "--actions", str(FIXTURE_ACTIONS))
    assert result.returncode == 0, result.stderr
