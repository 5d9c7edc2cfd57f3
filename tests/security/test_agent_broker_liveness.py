"""Liveness without remote control: a queue nothing consumes shows in `theow doctor` at once.

Workers write a heartbeat per queue they consume; the doctor and `theow replay`
read them. Before, `cancel_consumer('resolve')` stopped every verdict while
the doctor still said everything was fine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from celery import Celery

from tests.conftest import wait_until
from theow_client import names
from theow_workers.heartbeat import consumers
from theow_workers.ops.checks import FAIL, OK, WARN, Context, check_consumers, check_redis
from theow_workers.stack import EmbeddedStack

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def doctor(stack: EmbeddedStack) -> dict[str, tuple[str, str]]:
    """The doctor's findings about Redis and the consumers: check -> (status, detail)."""
    ctx = Context(stack.settings)
    findings = check_redis(ctx) + check_consumers(ctx)
    return {f.check: (f.status, f.detail) for f in findings}


@pytest.fixture
def resolver(embedded_valkey: EmbeddedStack, monkeypatch) -> EmbeddedStack:
    """A real resolver worker consuming resolve and passing on the embedded Valkey."""
    monkeypatch.setenv("THEOW_RULES_DIR", str(FIXTURES / "rules"))
    monkeypatch.setenv("THEOW_ACTIONS_DIR", str(FIXTURES / "actions"))
    embedded_valkey.start_worker(["resolve", "passing"], concurrency=1)
    admin = redis.Redis.from_url(embedded_valkey.settings.redis_url)
    wait_until(lambda: consumers(admin, names.QUEUE_RESOLVE), 90, "the resolver's heartbeat")
    admin.close()
    return embedded_valkey


def test_a_cancelled_resolve_consumer_is_a_doctor_failure_naming_the_queue(resolver):
    before = doctor(resolver)
    assert before["consumers.resolve"][0] == OK
    assert "resolver@" in before["consumers.resolve"][1]
    assert before["consumers.replay"] == (WARN, before["consumers.replay"][1])

    app = Celery(broker=resolver.settings.redis_url)
    try:
        app.control.cancel_consumer(names.QUEUE_RESOLVE, reply=True, timeout=5)
    finally:
        app.close()
    after = wait_until(
        lambda: (found := doctor(resolver))["consumers.resolve"][0] == FAIL and found,
        names.CONSUMER_BEAT * 2,
        "the doctor to see the cancelled consumer",
    )
    assert (
        after["consumers.resolve"][1]
        == "the resolve queue has no consumer: no failure gets a verdict"
    )
    assert after["consumers.passing"][0] == OK  # the worker still consumes the other queue


def test_a_stopped_worker_leaves_no_heartbeat_behind(resolver):
    resolver.stop(timeout=20)
    resolver.start_valkey()
    assert doctor(resolver)["consumers.resolve"][0] == FAIL


def test_a_crashed_worker_shows_once_its_heartbeat_expires(resolver):
    ((_, worker),) = [
        (what, proc) for what, proc in resolver.processes if what.startswith("worker")
    ]
    worker.kill()  # SIGKILL: no shutdown, nothing deleted
    worker.wait(10)
    wait_until(
        lambda: doctor(resolver)["consumers.resolve"][0] == FAIL,
        names.CONSUMER_TTL + names.CONSUMER_BEAT,
        "the crashed worker's heartbeat to expire",
    )


def test_a_replay_with_no_replay_worker_says_so(resolver, tmp_path):
    history = tmp_path / "history.jsonl"
    history.write_text('{"stderr": "ECHO w"}\n')
    env = {**os.environ, **resolver.environment(), "THEOW_REDIS_URL": resolver.settings.redis_url}
    subprocess.run([sys.executable, "-m", "theow_workers.cli", "db", "upgrade"], env=env, check=True,
                   capture_output=True)  # fmt: skip
    replay = subprocess.Popen(
        [sys.executable, "-m", "theow_workers.cli", "replay", str(history)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        first = replay.stderr.readline()  # before the job starts: it would wait for a worker
    finally:
        replay.kill()  # only its first line is under test (Ctrl-C has tests of its own)
        replay.communicate(timeout=60)
    assert "no worker consumes the replay queue" in first
