"""After `theow review approve`, a person is told whether the running workers resolve with the rule.

Given a running worker and a rule taught from a failure, when a person approves
it, I expect one line saying the rule is live on the worker once it is (and the
next failure then matched by it), or that it is written but not loaded yet and
why (and `theow doctor` to say which worker serves other rules), or that no
worker runs to load it. Given a failure a worker is still deciding, I expect
`theow failures show` to say so instead of `verdict: -`, and of one no worker took
yet, that it waits in the queue and for whom.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import wait_until
from theow_workers.core.ports import FailureRecord
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import ExplorationRow, ProposalRow

pytestmark = pytest.mark.integration

CLIENT = Path(sys.executable).parent / "theow-client"
UNKNOWN = "echo 'zorbulator: the flux manifold at bay 3 is misaligned'; exit 1"


def theow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real `theow` command, with the fleet's settings (its environment), unwrapped."""
    env = {**os.environ, "COLUMNS": "1000"}
    return subprocess.run([sys.executable, "-m", "theow_workers.cli", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def client_run(command: str, cwd: Path, *options: str) -> str:
    """`theow-client run` of a failing shell command: what it printed."""
    done = subprocess.run([str(CLIENT), "run", "--no-passing", *options, "--", "sh", "-c", command],
                          cwd=cwd, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout + done.stderr


def failure_id(output: str) -> str:
    ids = [line.split()[-1] for line in output.splitlines() if line.startswith("theow: failure:")]
    assert ids, output
    return ids[0]


def taught(fleet, tmp_path: Path, name: str) -> str:
    """A rule taught from an unknown failure the worker saw: its proposal's id."""
    output = client_run(UNKNOWN, tmp_path, "--wait-timeout", "120")
    assert "theow: status:  unmatched" in output, output + fleet.worker_log()[-3000:]
    teach = theow("teach", failure_id(output), "--lines", "1-1", "--name", name, "--json",
                  cwd=tmp_path)  # fmt: skip
    assert teach.returncode == 0, teach.stdout + teach.stderr
    return str(json.loads(teach.stdout)["proposal_id"])


def test_approve_says_the_rule_is_live_and_the_next_failure_is_matched_by_it(fleet, tmp_path):
    fleet.start_worker()
    proposal = taught(fleet, tmp_path, "flux_manifold_misaligned")

    approved = theow("review", "approve", proposal, cwd=tmp_path)

    assert approved.returncode == 0, approved.stderr
    assert "rule flux_manifold_misaligned live on 1 worker(s)" in approved.stdout.splitlines(), (
        approved.stdout + approved.stderr
    )
    # Live means live: the very next failure is matched by it.
    output = client_run(UNKNOWN, tmp_path, "--wait-timeout", "60")
    assert "theow: rule:    flux_manifold_misaligned (mode track)" in output, output


def test_approve_says_when_the_workers_have_not_loaded_the_rule(fleet, tmp_path, monkeypatch):
    fleet.start_worker()
    proposal = taught(fleet, tmp_path, "flux_elsewhere")
    # Approved on another machine: the file lands in rules the worker does not read.
    elsewhere = tmp_path / "elsewhere-rules"
    shutil.copytree(fleet.settings.rules_dir, elsewhere)
    monkeypatch.setenv("THEOW_RULES_DIR", str(elsewhere))

    approved = theow("review", "approve", proposal, "--wait", "3", cwd=tmp_path)

    assert approved.returncode == 0, approved.stderr
    assert (elsewhere / "flux_elsewhere.rule.yaml").is_file()
    (said,) = [line for line in approved.stderr.splitlines() if line.startswith("rule ")]
    assert said.startswith(
        "rule flux_elsewhere written; workers have not loaded it yet "
        "(0 of 1 worker(s) serve it after 3 s). "
    ), said
    assert "another machine needs the file in its own rules directory" in said
    assert "live on" not in approved.stdout
    # `theow doctor` here says the same of the worker.
    doctor = theow("doctor", "--json", cwd=tmp_path)
    (served,) = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "rules.served"]
    assert served["status"] == "warn", served
    assert "serve(s) another rules version than these files" in served["detail"], served


def test_approve_with_no_worker_running_says_nothing_will_load_it(fleet, tmp_path):
    store = SqlStore(fleet.settings.store_url)
    store.add_failure(
        FailureRecord(id="f-nobody", fingerprint="f" * 64, facts={"log": "ECHO hello"},
                      problem_type=None, source="live", received_at=datetime.now(UTC))
    )  # fmt: skip
    rule = (
        "name: echo_nobody\ndescription: A proposed rule.\nmode: track\nwhen:\n"
        "  - fact: log\n    regex: 'ECHO (?P<word>\\w+)'\n    examples: ['ECHO hello']\n"
    )
    with store.session.begin() as s:
        s.add(ExplorationRow(id="x-nobody", failure_id="f-nobody", fingerprint="f" * 64,
                             outcome="proposal", proposal_id="p-nobody"))  # fmt: skip
        s.flush()
        s.add(ProposalRow(id="p-nobody", exploration_id="x-nobody", failure_id="f-nobody",
                          rule_name="echo_nobody", rule_yaml=rule, diffs=[]))  # fmt: skip

    approved = theow("review", "approve", "p-nobody", cwd=tmp_path)

    assert approved.returncode == 0, approved.stderr
    assert "rule echo_nobody written; no resolver worker is running to load it" in (
        approved.stderr
    ), approved.stderr


def test_failures_show_of_a_failure_being_decided_says_a_worker_is_on_it(
    fleet, tmp_path, monkeypatch
):
    monkeypatch.setenv("THEOW_ACTION_TIMEOUT", "90")  # tf_hang's action holds the worker
    fleet.start_worker()
    output = client_run("echo HANG_FOREVER; exit 1", tmp_path, "--no-wait")
    failure = output.split("reported failure ")[1].split(";")[0]

    def shown() -> str | None:
        result = theow("failures", "show", failure, cwd=tmp_path)
        return result.stdout if result.returncode == 0 else None

    text = wait_until(shown, timeout=120, what=f"failure {failure} recorded")
    (verdict,) = [line for line in text.splitlines() if line.startswith("verdict:")]
    assert verdict.startswith("verdict: pending: a worker is resolving it (received "), text
    assert verdict.endswith(" s ago)"), verdict


def test_failures_show_of_a_failure_no_worker_took_says_it_waits_and_for_whom(fleet, tmp_path):
    output = client_run(UNKNOWN, tmp_path, "--no-wait")  # no worker runs: it stays queued
    failure = output.split("reported failure ")[1].split(";")[0]

    shown = theow("failures", "show", failure, cwd=tmp_path)

    assert shown.returncode == 1
    assert shown.stderr.startswith(f"error: no failure {failure!r} recorded yet; "), shown.stderr
    assert "wait in the resolve queue and no resolver worker is running to take them" in (
        shown.stderr
    ), shown.stderr
