"""`@mark` end to end, and client-side fixes counted only when the build agent ran them."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from theow_client import mark
from theow_workers.store.schema import AttemptRow, VerdictRow

pytestmark = pytest.mark.integration

# Settling a client-side attempt is an UPDATE whose row count decides the count: both databases.
FLEET_DATABASES = ("sqlite", "postgresql")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def eventually(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def verdicts(store) -> list[VerdictRow]:
    with store.session() as s:
        return list(s.execute(select(VerdictRow)).scalars())


def attempts(store, rule: str) -> list[AttemptRow]:
    with store.session() as s:
        return list(s.execute(select(AttemptRow).where(AttemptRow.rule == rule)).scalars())


def test_mark_around_a_failing_command_resolves_by_the_rule_its_stderr_names(fleet, tmp_path):
    # A shipped rule that reads the log the step printed, and its worker-side action.
    rules_dir, actions_dir = fleet.settings.rules_dir, fleet.settings.actions_dir
    shutil.copy(ROOT / "rules" / "python_module_not_found.rule.yaml", rules_dir)
    shutil.copy(ROOT / "actions" / "python.py", actions_dir)
    fleet.start_worker()
    runs = tmp_path / "runs"

    @mark(client=fleet.client(), wait_timeout=60, actions_dir=actions_dir)
    def render() -> str:
        with runs.open("a") as log:
            log.write("run\n")
        if runs.read_text().count("run") == 1:
            subprocess.run(
                [
                    "sh",
                    "-c",
                    "echo rendering; echo \"ModuleNotFoundError: No module named 'yaml'\" >&2; exit 1",
                ],
                check=True,
                capture_output=True,
            )
        return "rendered"

    assert render() == "rendered"
    assert runs.read_text().count("run") == 2  # failed, resolved, ran again
    (verdict,) = verdicts(fleet.store())
    assert (verdict.status, verdict.rule) == ("resolved", "python_module_not_found")
    assert verdict.outputs[0]["output"]["package"] == "PyYAML"


def failing_step(marker: Path):
    def step() -> None:
        if not marker.exists():
            subprocess.run(
                ["sh", "-c", f"echo 'missing file {marker.name}' >&2; exit 2"],
                check=True,
                capture_output=True,
            )

    return step


def test_a_client_side_fix_counts_as_a_success_only_once_the_agent_ran_it(fleet, tmp_path):
    fleet.start_worker()
    store = fleet.store()
    step = mark(client=fleet.client(), wait_timeout=60, actions_dir=FIXTURES / "actions",
                workspace=str(tmp_path))(failing_step(tmp_path / "app.cfg"))  # fmt: skip
    step()
    assert (tmp_path / "app.cfg").read_text() == "fixed by theow\n"
    stats = eventually(lambda: store.rule_stats().get("tf_client_fix"))
    assert stats is not None, "the agent's report was never counted"
    assert (stats.successes, stats.failures) == (1, 0)
    (attempt,) = attempts(store, "tf_client_fix")
    assert attempt.outcome == "success"
    assert attempt.params[0]["output"]["changed"] == [str(tmp_path / "app.cfg")]


def test_a_client_side_fix_the_agent_could_not_run_counts_as_a_failure(fleet, tmp_path):
    fleet.start_worker()
    store = fleet.store()
    no_actions = tmp_path / "no-actions"
    no_actions.mkdir()
    step = mark(client=fleet.client(), wait_timeout=60, actions_dir=no_actions,
                workspace=str(tmp_path))(failing_step(tmp_path / "app.cfg"))  # fmt: skip
    with pytest.raises(subprocess.CalledProcessError):
        step()
    stats = eventually(lambda: store.rule_stats().get("tf_client_fix"))
    assert stats is not None, "the agent's report was never counted"
    assert (stats.successes, stats.failures) == (0, 1)
    (attempt,) = attempts(store, "tf_client_fix")
    assert attempt.outcome == "error"
    assert "'touch_file' is not defined" in attempt.error
