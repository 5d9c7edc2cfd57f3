"""`@mark` never makes a build fail because of Theow."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest_client import *  # noqa: F403
from theow_client import mark
from theow_client.actions import ActionError
from theow_client.mark import exception_facts, run_client_actions, should_rerun
from theow_client.verdict import BoundAction, Status, Verdict


class BuildBroke(Exception):
    pass


def test_a_passing_step_returns_its_value_and_never_talks_to_theow(offline_env: Path) -> None:
    @mark(tags=["go"])
    def step(x: int) -> int:
        return x * 2

    assert step(21) == 42
    assert not offline_env.exists()


def test_broker_down_reraises_the_steps_own_exception_after_spooling_it(
    offline_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls = []
    original = BuildBroke("go: module not found")

    @mark(lambda target: {"target": target}, max_retries=3, wait_timeout=5)
    def step(target: str) -> None:
        calls.append(target)
        raise original

    with caplog.at_level(logging.INFO, logger="theow.client"), pytest.raises(BuildBroke) as raised:
        step("./...")

    assert raised.value is original
    assert calls == ["./..."]
    (spooled,) = offline_env.glob("*.json")
    assert json.loads(json.loads(spooled.read_text())["facts_json"])["target"] == "./..."
    assert "BuildBroke: go: module not found" in spooled.read_text()
    assert "spooled" in caplog.text


def test_a_broken_facts_from_still_reraises_the_original(offline_env: Path) -> None:
    def facts_from() -> dict[str, Any]:
        raise KeyError("oops")

    @mark(facts_from)
    def step() -> None:
        raise BuildBroke("real failure")

    with pytest.raises(BuildBroke, match="real failure"):
        step()
    assert len(list(offline_env.glob("*.json"))) == 1


def test_no_retries_left_submits_without_waiting(offline_env: Path) -> None:
    @mark(max_retries=0, wait_timeout=30)
    def step() -> None:
        raise BuildBroke("x")

    with pytest.raises(BuildBroke):
        step()
    assert len(list(offline_env.glob("*.json"))) == 1


def test_exception_facts_name_the_error_and_bound_the_traceback() -> None:
    def recurse(n: int) -> None:
        if n == 0:
            raise ValueError("deep")
        recurse(n - 1)

    with pytest.raises(ValueError) as raised:
        recurse(500)
    facts = exception_facts(raised.value)
    assert facts["exception"] == "ValueError: deep"
    assert facts["traceback"].rstrip().endswith("ValueError: deep")
    assert len(facts["traceback"]) < 17_000


def test_client_side_actions_run_in_the_workspace(actions_dir: Path, tmp_path: Path) -> None:
    verdict = Verdict(
        failure_id="f",
        status=Status.RESOLVED,
        actions=(
            BoundAction("worker_only", {"x": 1}),
            BoundAction("touch_marker", {"name": "done"}, client_side=True),
        ),
    )
    outputs = run_client_actions(verdict, {}, actions_dir=actions_dir, workspace=str(tmp_path))
    assert outputs == [{"action": "touch_marker", "output": {"status": "ok"}}]
    assert (tmp_path / "done").read_text() == "fixed by theow"


def test_an_unknown_client_side_action_is_an_error_naming_it(tmp_path: Path) -> None:
    verdict = Verdict("f", Status.RESOLVED, actions=(BoundAction("nope", client_side=True),))
    with pytest.raises(ActionError, match="'nope' is not defined"):
        run_client_actions(verdict, {}, actions_dir=tmp_path, workspace=str(tmp_path))


@pytest.mark.parametrize(
    ("status", "rerun"),
    [
        (Status.RESOLVED, True),
        (Status.RETRY, True),
        (Status.TRACKED, False),
        (Status.UNMATCHED, False),
        (Status.UNEXPLAINED, False),  # only a wrapper matched: nothing known to run again for
        (Status.SPOOLED, False),
        (Status.ERROR, False),
        (Status.SUGGESTED, False),  # advice only: nothing here changed, a re-run fails the same
        ("pondering", False),  # a status from a newer worker
    ],
)
def test_only_resolved_and_retry_verdicts_rerun_the_step(
    status: Status, rerun: bool, tmp_path: Path
) -> None:
    assert (should_rerun(Verdict("f", status), {}, actions_dir=tmp_path) is not None) is rerun


def test_a_suggested_client_side_fix_runs_here_and_the_step_runs_again(
    actions_dir: Path, tmp_path: Path
) -> None:
    fix = BoundAction("touch_marker", {"name": "done"}, client_side=True)
    verdict = Verdict("f", Status.SUGGESTED, rule="r", actions=(fix,))
    rerun = should_rerun(verdict, {}, actions_dir=actions_dir, workspace=str(tmp_path))
    assert rerun is not None
    assert rerun.outputs == [{"action": "touch_marker", "output": {"status": "ok"}}]
    assert (tmp_path / "done").read_text() == "fixed by theow"


def test_a_failed_command_sends_what_it_printed_as_the_log() -> None:
    # check=True with capture_output: the output rules read sits on the exception.
    with pytest.raises(subprocess.CalledProcessError) as raised:
        subprocess.run(
            [
                "sh",
                "-c",
                "echo compiling; echo \"ModuleNotFoundError: No module named 'x'\" >&2; exit 3",
            ],
            check=True,
            capture_output=True,
        )
    facts = exception_facts(raised.value)
    assert facts["log"] == "compiling\nModuleNotFoundError: No module named 'x'\n"
    assert facts["stderr"] == "ModuleNotFoundError: No module named 'x'\n"
    assert facts["stdout"] == "compiling\n"
    assert facts["exit_code"] == 3
    assert facts["command"].startswith("sh -c ")


def test_a_command_whose_output_was_not_captured_sends_its_traceback_as_the_log() -> None:
    with pytest.raises(subprocess.CalledProcessError) as raised:
        subprocess.run(["sh", "-c", "exit 2"], check=True)
    facts = exception_facts(raised.value)
    assert "stdout" not in facts and "stderr" not in facts
    assert facts["exit_code"] == 2
    assert "CalledProcessError" in facts["log"]


def test_any_other_exception_sends_its_traceback_as_the_log() -> None:
    facts = exception_facts(BuildBroke("disk full"))
    assert facts["log"] == facts["traceback"]
    assert "BuildBroke: disk full" in facts["log"]
