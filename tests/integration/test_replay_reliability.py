"""A replay loses nothing and counts nothing twice, and never starves live failures."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.conftest import pid_written
from tests.integration.conftest_replay import *  # noqa: F403
from tests.integration.conftest_replay import ReplayFleet, counted_once, history_lines
from theow_client import Status

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def assert_each_failure_counted_once(replay_fleet: ReplayFleet, job_id: str, replayed: int) -> None:
    counted_once(replay_fleet.jobs(), replay_fleet.fleet.store(), job_id, replayed)


def test_ctrl_c_then_resume_finishes_the_rest_with_nothing_counted_twice(replay_fleet):
    replay_fleet.start_replay_worker()
    history = replay_fleet.write("history.jsonl", history_lines(400))
    run = replay_fleet.start_cli(str(history))
    job_id = replay_fleet.latest_job_id()
    replay_fleet.job_when(job_id, lambda j: j.processed >= 60)
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stderr
    assert f"theow replay resume {job_id}" in stderr
    stopped = replay_fleet.jobs().get(job_id)
    assert stopped.status == "interrupted" and stopped.processed < 400

    status = json.loads(replay_fleet.cli("status", job_id, "--json").stdout)
    assert status["status"] == "interrupted"
    resumed = replay_fleet.cli("resume", job_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["summary"]["processed"] == 400
    assert_each_failure_counted_once(replay_fleet, job_id, replayed=400)


def test_killing_a_replay_worker_mid_chunk_loses_nothing(replay_fleet, tmp_path, monkeypatch):
    """Given a chunk whose 6th failure's action kills its worker process, mid-chunk."""
    monkeypatch.setenv("THEOW_REPLAY_CHUNK_SIZE", "20")
    replay_fleet.start_replay_worker()
    marker = tmp_path / "crash-marker"
    lines = [{"stderr": f"ECHO w{i}", "job": f"b{i}"} for i in range(30)]
    lines[5] = {"stderr": "CRASH_ONCE", "marker": str(marker)}
    history = replay_fleet.write("history.jsonl", lines)
    run = replay_fleet.start_cli(str(history), "--execute", "--json")
    pid = replay_fleet.wait(lambda: pid_written(marker), timeout=120)
    os.kill(pid, signal.SIGKILL)  # the pool process, mid-chunk

    stdout, stderr = run.communicate(timeout=180)
    assert run.returncode == 0, stderr
    report = json.loads(stdout)
    assert report["summary"]["matched"] == 30
    assert {r["rule"]: r["matched"] for r in report["rules"]} == {"tf_echo": 29, "tf_crash_once": 1}
    assert_each_failure_counted_once(replay_fleet, report["job"]["id"], replayed=30)
    stats = replay_fleet.fleet.store().rule_stats()
    assert (stats["tf_echo"].successes, stats["tf_crash_once"].successes) == (29, 1)


def test_a_live_failure_gets_its_verdict_promptly_during_a_replay(replay_fleet):
    """Given resolver and replay workers as `theow up` starts them, and a replay running."""
    fleet = replay_fleet.fleet
    fleet.start_worker()
    replay_fleet.start_replay_worker(nice=10)
    client = fleet.client()
    client.submit({"stderr": "ECHO warm", "job": "j"}).wait(60)
    history = replay_fleet.write("history.jsonl", history_lines(3000))
    run = replay_fleet.start_cli(str(history))
    job_id = replay_fleet.latest_job_id()
    replay_fleet.job_when(job_id, lambda j: j.processed >= 100)

    latencies = []
    for i in range(5):
        start = time.monotonic()
        verdict = client.submit({"stderr": f"ECHO live{i}", "job": "live"}).wait(30)
        latencies.append(time.monotonic() - start)
        assert verdict.status is Status.RESOLVED
    during = replay_fleet.jobs().get(job_id)
    assert during.processed < during.total, "the replay finished before the live failures"
    # Each answered while the replay still ran: not queued behind its 3,000 failures.
    # How promptly: benchmarks/replay.py's live latency.
    print(f"live latencies during the replay: {[round(x, 3) for x in latencies]}")
    replay_fleet.cli("cancel", job_id)
    run.communicate(timeout=120)
    assert run.returncode == 1  # cancelled


def test_cancel_stops_the_replay_and_resume_finishes_it(replay_fleet):
    replay_fleet.start_replay_worker()
    history = replay_fleet.write("history.jsonl", history_lines(2500))  # outlasts `cancel`
    run = replay_fleet.start_cli(str(history))
    job_id = replay_fleet.latest_job_id()
    replay_fleet.job_when(job_id, lambda j: j.processed >= 30)
    cancel = replay_fleet.cli("cancel", job_id)
    assert cancel.returncode == 0 and "cancelled" in cancel.stdout
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1 and "was cancelled" in stderr
    cancelled = replay_fleet.jobs().get(job_id)
    assert cancelled.status == "cancelled" and cancelled.processed < 2500

    resumed = replay_fleet.cli("resume", job_id)
    assert resumed.returncode == 0, resumed.stderr
    assert_each_failure_counted_once(replay_fleet, job_id, replayed=2500)
