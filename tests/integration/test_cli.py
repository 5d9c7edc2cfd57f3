"""`theow rules check` and `theow rules test`, as a user runs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

pytestmark = pytest.mark.integration


def theow(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
        # PYTHONPATH: this checkout's code, whatever the working directory.
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "COLUMNS": "200",
             "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip


def test_rules_check_passes_on_the_shipped_rules():
    result = theow("rules", "check")
    assert result.returncode == 0, result.stderr
    assert "0 problem(s)" in result.stdout


def test_rules_check_reports_every_broken_file_with_line_and_reason(tmp_path):
    (tmp_path / "empty_when.rule.yaml").write_text("name: empty_when\nmode: track\nwhen: []\n")
    (tmp_path / "typo.rule.yaml").write_text(
        "name: typo\nmode: track\nwhen:\n  - fact: stderr\n    regx: x\n"
    )
    (tmp_path / "fine.rule.yaml").write_text(
        "name: fine\nmode: track\nwhen:\n  - {fact: a, equals: b}\n"
    )
    result = theow("rules", "check", str(tmp_path), "--actions", str(FIXTURES / "actions"))
    assert result.returncode == 1
    assert f"{tmp_path}/empty_when.rule.yaml:3: `when` is empty" in result.stderr
    assert f"{tmp_path}/typo.rule.yaml:5: unknown key 'regx'" in result.stderr
    as_json = json.loads(theow("rules", "check", str(tmp_path), "--json").stdout)
    assert as_json["rules"] == 1 and len(as_json["errors"]) == 2


def test_rules_test_json_is_one_object_explaining_the_decision(tmp_path):
    facts = tmp_path / "failure.json"
    facts.write_text(json.dumps({"stderr": "EXPLODE 7\n", "job": "j"}))
    result = theow(
        "rules", "test", "--facts", str(facts), "--json",
        "--rules", str(FIXTURES / "rules"), "--actions", str(FIXTURES / "actions"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # exactly one JSON object on stdout
    assert set(report) == {
        "matched",
        "rule",
        "mode",
        "actions",
        "evidence",
        "also",
        "candidates",
        "wrapper",
    }
    assert report["matched"] is True
    assert report["rule"] in {"tf_explode", "tf_explode_fallback"}
    # Why: the line the rule matched, and the other rule that validated too.
    assert (report["evidence"]["fact"], report["evidence"]["line"]) == ("stderr", 1)
    assert report["evidence"]["text"] == "EXPLODE 7"  # the whole line the regex matched in
    assert "EXPLODE 7" in report["evidence"]["context"]  # and the lines around it
    assert report["also"] == list({"tf_explode", "tf_explode_fallback"} - {report["rule"]})
    candidates = {c["rule"]: c for c in report["candidates"]}
    assert set(candidates["tf_echo"]) == {"rule", "similarity", "validated", "reason"}
    assert candidates["tf_echo"]["validated"] is False
    assert "did not match" in candidates["tf_echo"]["reason"]
    assert isinstance(candidates["tf_echo"]["similarity"], float)
    assert candidates["tf_explode_fallback"]["validated"] is True
    fallback = {"action": "echo", "params": {"code": "7"}}
    if report["rule"] == "tf_explode_fallback":
        assert report["actions"] == [fallback]


def test_rules_test_explains_in_words_for_a_person(tmp_path):
    facts = tmp_path / "failure.json"
    facts.write_text(json.dumps({"stderr": "missing file app.cfg"}))
    result = theow(
        "rules", "test", "--facts", str(facts),
        "--rules", str(FIXTURES / "rules"), "--actions", str(FIXTURES / "actions"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "matched tf_client_fix" in result.stdout
    assert 'touch_file {"name": "app.cfg"}' in result.stdout
    assert "fact 'stderr' does not contain 'HANG_FOREVER'" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [("[1, 2]", "facts must be a JSON object, got list"), ("{oops", "not JSON")],
)
def test_rules_test_refuses_facts_that_are_not_a_json_object(tmp_path, content, message):
    facts = tmp_path / "failure.json"
    facts.write_text(content)
    result = theow("rules", "test", "--facts", str(facts))
    assert result.returncode == 2
    assert message in result.stderr


def test_rules_list_json_names_every_rule_with_its_mode_and_actions():
    rows = json.loads(theow("rules", "list", "--json").stdout)
    assert len(rows) == len(list((ROOT / "rules").glob("*.rule.yaml")))
    by_name = {r["name"]: r for r in rows}
    assert by_name["network_flake"]["mode"] == "retry"
    assert all(r["actions"] for r in rows if r["mode"] == "fix")


GO_RENAME = """\
name: our_go_rename
description: Our module moved.
when:
  - fact: stderr
    regex: 'module (\\S+) moved to (\\S+)'
    examples: ["module example.com/a moved to example.com/b"]
then:
  - action: go_mod_replace
    params: {old_path: "{extract.1}", new_path: "{extract.2}", version: v1.0.0}
"""


def user_rules(directory: Path) -> Path:
    """A user's layer: a rule calling a shipped action, and its own network_flake."""
    directory.mkdir()
    (directory / "our_go_rename.rule.yaml").write_text(GO_RENAME)
    (directory / "network_flake.rule.yaml").write_text(
        "name: network_flake\ndescription: Ours.\nmode: retry\n"
        "when:\n  - {fact: stderr, contains: FLAKE}\n"
    )
    return directory


def test_rules_check_of_a_user_directory_run_anywhere_knows_the_shipped_actions(tmp_path):
    user_rules(tmp_path / "my-rules")
    result = theow("rules", "check", "my-rules", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ok: 2 rules" in result.stdout and "0 problem(s) in my-rules" in result.stdout


def test_rules_list_shows_each_rule_layer_and_what_it_overrides(tmp_path):
    user_rules(tmp_path / "my-rules")
    env = {"THEOW_RULES_DIRS": "my-rules"}

    rows = json.loads(theow("rules", "list", "--json", cwd=tmp_path, env=env).stdout)
    table = theow("rules", "list", cwd=tmp_path, env=env).stdout

    by_name = {r["name"]: r for r in rows}
    assert len(rows) == len(list((ROOT / "rules").glob("*.rule.yaml"))) + 1
    flake, apt = by_name["network_flake"], by_name["apt_package_not_found"]
    assert (flake["layer"], flake["overrides"]) == ("my-rules", [str(ROOT / "rules")])
    assert (apt["layer"], apt["overrides"]) == (str(ROOT / "rules"), [])
    (line,) = [row for row in table.splitlines() if "network_flake" in row]
    assert "my-rules (overrides shipped)" in line


def test_rules_check_checks_every_layer_and_names_the_file_of_a_problem(tmp_path):
    mine = user_rules(tmp_path / "my-rules")
    (mine / "typo.rule.yaml").write_text(
        "name: typo\nmode: track\nwhen:\n  - fact: stderr\n    regx: x\n"
    )
    result = theow("rules", "check", cwd=tmp_path, env={"THEOW_RULES_DIRS": str(mine)})
    assert result.returncode == 1
    assert f"{mine}/typo.rule.yaml:5: unknown key 'regx'" in result.stderr
    assert f"1 problem(s) in {ROOT / 'rules'}, {mine}" in result.stdout


def test_a_missing_rules_layer_or_both_kinds_of_setting_are_one_line_errors(tmp_path):
    missing = theow("rules", "check", cwd=tmp_path, env={"THEOW_RULES_DIRS": "gone"})
    both = theow(
        "rules", "list", cwd=tmp_path, env={"THEOW_RULES_DIR": "a", "THEOW_RULES_DIRS": "b"}
    )
    assert missing.returncode == 1
    assert "gone: rules directory does not exist" in missing.stderr
    assert both.returncode == 2 and "Traceback" not in both.stderr
    assert len(both.stderr.strip().splitlines()) == 1 and "THEOW_RULES_DIRS" in both.stderr


def test_installed_without_its_checkout_the_error_says_how_to_name_rule_directories(tmp_path):
    site = tmp_path / "site"  # the packages alone, as a wheel installs them
    for package in ("theow_workers", "theow_client"):
        shutil.copytree(
            ROOT / package, site / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    user_rules(tmp_path / "my-rules")

    bare = theow("rules", "check", cwd=tmp_path, env={"PYTHONPATH": str(site)})
    named = theow(
        "rules", "check", cwd=tmp_path,
        env={"PYTHONPATH": str(site), "THEOW_RULES_DIRS": "my-rules",
             "THEOW_ACTIONS_DIRS": str(ROOT / "actions")},
    )  # fmt: skip

    assert bare.returncode == 1 and "Traceback" not in bare.stderr
    assert "actions: actions directory does not exist (THEOW_ACTIONS_DIRS" in bare.stderr
    assert named.returncode == 0, named.stderr
    assert "ok: 2 rules" in named.stdout and "in my-rules" in named.stdout
