"""Build agent → Redis → resolver worker → SQL, with real processes throughout."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.conftest import pid_written, wait_until
from theow_client import Status
from theow_workers.store.schema import AttemptRow, FailureRow, VerdictRow

pytestmark = pytest.mark.integration

# The core path runs on PostgreSQL as well as SQLite (see tests/integration/conftest.py).
FLEET_DATABASES = ("sqlite", "postgresql")


def count(store, model, **where) -> int:
    with store.session() as s:
        query = select(func.count()).select_from(model)
        for key, value in where.items():
            query = query.where(getattr(model, key) == value)
        return int(s.execute(query).scalar_one())


def test_a_failure_is_resolved_by_a_worker_and_everything_lands_in_sql(fleet):
    fleet.start_worker()
    client = fleet.client()
    verdict = client.submit({"stderr": "step 3\nECHO hello\n", "job": "build-1"}).wait(60)
    assert verdict.status is Status.RESOLVED
    assert verdict.rule == "tf_echo"
    assert verdict.outputs[0]["output"]["params"] == {"word": "hello", "job": "build-1"}

    store = fleet.store()
    assert count(store, FailureRow, id=verdict.failure_id) == 1
    assert count(store, AttemptRow, failure_id=verdict.failure_id, outcome="success") == 1
    assert count(store, VerdictRow, failure_id=verdict.failure_id, status="resolved") == 1
    assert store.rule_stats()["tf_echo"].successes == 1


def test_one_idempotency_key_submitted_twice_gives_one_failure_and_one_verdict(fleet):
    fleet.start_worker(concurrency=2)
    client = fleet.client()
    facts = {"stderr": "ECHO twice", "job": "build-2"}
    first = client.submit(facts, idempotency_key="build-2/step-4")
    second = client.submit(facts, idempotency_key="build-2/step-4")
    assert first.failure_id == second.failure_id
    a, b = first.wait(60), second.wait(60)
    assert a == b
    store = fleet.store()
    assert count(store, FailureRow) == 1
    assert count(store, VerdictRow) == 1
    assert count(store, AttemptRow) == 1


def test_a_worker_process_killed_mid_task_still_gives_the_failure_exactly_one_verdict(
    fleet, tmp_path
):
    fleet.start_worker(concurrency=1)
    client = fleet.client()
    marker = tmp_path / "crash-marker"
    ticket = client.submit({"stderr": "CRASH_ONCE", "marker": str(marker)})
    pid = wait_until(lambda: pid_written(marker), what="the action to write its pid")
    os.kill(pid, signal.SIGKILL)  # the pool process running the action

    verdict = ticket.wait(90)
    assert verdict.status is Status.RESOLVED
    assert verdict.outputs[0]["output"]["pid"] != pid
    store = fleet.store()
    assert count(store, VerdictRow, failure_id=ticket.failure_id) == 1
    assert count(store, FailureRow, id=ticket.failure_id) == 1


def test_a_backtracking_regex_does_not_stall_the_worker(fleet):
    fleet.start_worker(concurrency=1)
    client = fleet.client()
    slow = client.submit({"stderr": "a" * 60_000 + "!"})
    quick = client.submit({"stderr": "ECHO after", "job": "j"})
    assert slow.wait(60).status is Status.UNMATCHED
    assert quick.wait(60).status is Status.RESOLVED


def test_a_hanging_action_is_stopped_and_recorded(fleet):
    fleet.start_worker()
    verdict = fleet.client().submit({"stderr": "HANG_FOREVER"}).wait(60)
    assert verdict.status is Status.FAILED
    assert "timed out after 2s" in verdict.reason
    assert count(fleet.store(), AttemptRow, outcome="timeout") == 1


def test_workers_pick_up_a_new_rule_without_a_restart(fleet, monkeypatch):
    # The worker looks at the rules directory on every failure, not every 0.5 s:
    # the next failure sees the new rule, with no interval to wait out.
    monkeypatch.setenv("THEOW_RULES_POLL_SECONDS", "0")
    fleet.start_worker()
    client = fleet.client()
    facts = {"stderr": "E: Unable to locate package libfoo-dev"}
    assert client.submit(facts).wait(60).status is Status.UNMATCHED

    rules_dir = Path(fleet.settings.rules_dir)
    (rules_dir / "apt_missing_package.rule.yaml").write_text(
        "name: apt_missing_package\n"
        "description: apt cannot find a package\n"
        "mode: track\n"
        "when:\n"
        "  - fact: stderr\n"
        "    regex: 'Unable to locate package (?P<package>\\S+)'\n"
    )
    verdict = client.submit(facts).wait(60)
    assert (verdict.status, verdict.rule) == (Status.TRACKED, "apt_missing_package")


def test_a_failure_that_keeps_killing_workers_is_recorded_as_an_error_not_retried_forever(
    fleet, tmp_path, monkeypatch
):
    monkeypatch.setenv("THEOW_MAX_DELIVERIES", "1")
    fleet.start_worker(concurrency=1)
    marker = tmp_path / "crash-marker"
    ticket = fleet.client().submit({"stderr": "CRASH_ONCE", "marker": str(marker)})
    os.kill(wait_until(lambda: pid_written(marker), what="the action's pid"), signal.SIGKILL)

    verdict = ticket.wait(90)
    assert verdict.status is Status.ERROR
    assert "delivered 2 times" in verdict.reason
    assert count(fleet.store(), VerdictRow, failure_id=ticket.failure_id) == 1


def test_an_unmatched_400000_line_log_points_at_its_last_error_by_the_builds_line_number(fleet):
    fleet.start_worker()
    lines = [f"step {n}: compiled module_{n}.c" for n in range(1, 400_001)]
    lines[399_988] = "Traceback (most recent call last):"
    lines[399_989] = "KeyError: 'DATABASE_URL'"
    verdict = fleet.client().submit({"log": "\n".join(lines)}).wait(60)
    assert verdict.status is Status.UNMATCHED
    assert (verdict.where[0].line, verdict.where[0].text) == (399_990, "KeyError: 'DATABASE_URL'")
    # The verdict stored in SQL says the same.
    assert fleet.store().verdict(verdict.failure_id).where == verdict.where
