"""`@mark` end to end, and client-side fixes counted only when the build agent ran them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from theow_client import Status, mark
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


def test_mark_around_a_failing_command_gets_the_advice_of_the_rule_its_stderr_names(
    fleet, tmp_path
):
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

    # The rule's action only names the package: nothing was installed, so the
    # failure is suggested, and running the step again would only fail again.
    with pytest.raises(subprocess.CalledProcessError):
        render()
    assert runs.read_text().count("run") == 1
    (verdict,) = verdicts(fleet.store())
    assert (verdict.status, verdict.rule) == ("suggested", "python_module_not_found")
    assert verdict.outputs[0]["output"]["package"] == "PyYAML"
    assert fleet.store().rule_stats() == {}


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
    (verdict,) = verdicts(store)
    assert verdict.status == "resolved"  # the fix ran, and the step passed when run again


def test_a_client_side_fix_after_which_the_step_still_fails_is_a_failed_fix(fleet, tmp_path):
    fleet.start_worker()
    store = fleet.store()

    def still_broken() -> None:  # the fix creates the file; the step fails all the same
        subprocess.run(["sh", "-c", "echo 'missing file app.cfg' >&2; exit 2"],
                       check=True, capture_output=True)  # fmt: skip

    step = mark(client=fleet.client(), wait_timeout=60, actions_dir=FIXTURES / "actions",
                workspace=str(tmp_path), max_retries=1)(still_broken)  # fmt: skip
    with pytest.raises(subprocess.CalledProcessError):
        step()
    stats = eventually(lambda: store.rule_stats().get("tf_client_fix"))
    assert stats is not None, "the agent's report was never counted"
    assert (stats.successes, stats.failures) == (0, 1)
    # The last run's failure is sent without waiting (no re-run left): its verdict may come later.
    assert eventually(lambda: len(verdicts(store)) == 2)
    first, last = sorted(verdicts(store), key=lambda v: v.decided_at)
    assert eventually(lambda: store.verdict(first.failure_id).status.value == "failed")
    assert "failed again" in store.verdict(first.failure_id).reason
    # The last failure was sent for the record, with no re-run left: its fix is only offered.
    assert last.status == "suggested"
    outcomes = sorted(a.outcome for a in attempts(store, "tf_client_fix"))
    assert outcomes == ["client_pending", "error"]


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


@pytest.mark.parametrize(
    ("script", "status", "counts"),
    [
        ("test -f app.cfg || { echo 'missing file app.cfg' >&2; exit 2; }", "resolved", (1, 0)),
        ("echo 'missing file app.cfg' >&2; exit 2", "failed", (0, 1)),  # the fix cures nothing
    ],
    ids=["passes-after-the-fix", "still-fails-after-the-fix"],
)
def test_run_reports_whether_the_command_passed_after_the_client_side_fix(
    fleet, tmp_path, monkeypatch, script, status, counts
):
    from theow_client.cli import main

    fleet.start_worker()
    store = fleet.store()
    monkeypatch.chdir(tmp_path)
    options = ["--retries", "1", "--wait-timeout", "60", "--actions-dir", str(FIXTURES / "actions")]
    main(["run", "--no-passing", *options, "--", "sh", "-c", script])

    stats = eventually(lambda: store.rule_stats().get("tf_client_fix"))
    assert stats is not None, "the agent's report was never counted"
    assert (stats.successes, stats.failures) == counts
    first = min(verdicts(store), key=lambda v: v.decided_at)
    assert eventually(lambda: store.verdict(first.failure_id).status.value == status)


def theow(*args: str) -> subprocess.CompletedProcess[str]:
    """``theow ARGS`` as a user runs it, on the fleet's settings (its THEOW_* environment)."""
    return subprocess.run([sys.executable, "-m", "theow_workers.cli", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_meow_after_a_demo_shows_client_side_fixes_as_pending_not_struggling(fleet):
    fleet.start_worker()
    client = fleet.client()
    # As `make demo` does: failures submitted and their verdicts waited for; no agent runs a fix.
    pending = [client.submit({"stderr": f"missing file app{n}.cfg"}, source="theow-demo")
               for n in range(3)]  # fmt: skip
    broken = client.submit({"stderr": "EXPLODE without a number"}, source="theow-demo")
    assert {t.wait(60).status for t in pending} == {Status.SUGGESTED}
    assert broken.wait(60).status is Status.FAILED

    result = theow("meow", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert [r["rule"] for r in stats["struggling_rules"]] == ["tf_explode"]  # ran, and failed
    (waiting,) = stats["pending_rules"]
    assert (waiting["rule"], waiting["pending"], waiting["failures"]) == ("tf_client_fix", 3, 0)
    assert (stats["client_pending"], stats["suggested"], stats["resolved"]) == (3, 3, 0)

    shown = theow("meow").stdout
    struggling = shown[shown.index("struggling") : shown.index("pending (waiting")]
    assert "tf_explode" in struggling and "tf_client_fix" not in struggling
    assert "3 client-side fixes pending" in shown
