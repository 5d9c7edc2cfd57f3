"""When the broker is down the failure is kept on disk, and `flush` sends it later."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis

from tests.integration.conftest_client import *  # noqa: F403
from theow_client import names
from theow_client.client import TheowClient, failure_id_for
from theow_client.spool import Spool
from theow_client.verdict import Status


def test_spool_files_are_whole_and_listed_oldest_first(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    first = spool.put({"failure_id": "b-first", "facts": {}})
    time.sleep(0.01)  # distinct file times: the spool lists oldest first
    spool.put({"failure_id": "a-second", "facts": {"x": "é"}})
    assert [p.name for p in spool.pending()] == ["b-first.json", "a-second.json"]
    assert spool.load(first) == {"failure_id": "b-first", "facts": {}}
    assert not list(tmp_path.glob(".tmp-*"))


class HangingUp:
    """A broker address that takes each connection and closes it at once, counting them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.attempts = 0
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.attempts += 1
            conn.close()


def test_submit_with_broker_down_spools_at_the_first_refusal_and_says_so(
    offline_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = HangingUp()
    monkeypatch.setenv("THEOW_REDIS_URL", broker.url)
    try:
        ticket = TheowClient().submit({"stderr": "x" * 200_000, "step": "go build"}, rules=["r1"])
    finally:
        broker.sock.close()
    # Spooled after one connection: no reconnect loop (Celery's would retry for ~20 s).
    # How long it takes: benchmarks/offline_spool.py.
    assert broker.attempts == 1

    assert ticket.spooled
    path = offline_env / f"{ticket.failure_id}.json"
    payload = json.loads(path.read_text())
    assert set(payload) == {
        "failure_id", "facts_json", "explore", "source", "submitted_at", "hints", "notes",
        "job", "idempotency_key", "nonce", "kept_lines",
    }  # fmt: skip
    assert payload["failure_id"] == ticket.failure_id
    assert payload["hints"] == {"rules": ["r1"], "tags": [], "fallback": True, "max_retries": 3}
    assert len(json.loads(payload["facts_json"])["stderr"]) < 70_000
    assert payload["notes"]["truncated"]["stderr"]["original_chars"] == 200_000
    assert payload["submitted_at"].endswith("+00:00")

    warning = capsys.readouterr().err.strip()
    assert len(warning.splitlines()) == 1
    assert warning.startswith("theow: broker unreachable at redis://127.0.0.1:")
    assert f"spooled failure {ticket.failure_id} to {path}" in warning
    assert "theow-client flush" in warning

    verdict = ticket.wait(timeout=1)
    assert verdict.status is Status.SPOOLED
    assert verdict.failure_id == ticket.failure_id


def test_same_idempotency_key_gives_same_failure_id(offline_env: Path) -> None:
    one = TheowClient().submit({"a": 1}, idempotency_key="build-7/step-2")
    two = TheowClient().submit({"a": 1}, idempotency_key="build-7/step-2")
    assert one.failure_id == two.failure_id
    assert one.failure_id == failure_id_for("build-7/step-2", facts_json='{"a": 1}')
    assert uuid.UUID(one.failure_id).version == 5
    assert len(list(offline_env.glob("*.json"))) == 1


def test_the_same_idempotency_key_with_other_facts_is_another_failure(offline_env: Path) -> None:
    one = TheowClient().submit({"a": 1}, idempotency_key="build-7/step-2")
    two = TheowClient().submit({"a": 2}, idempotency_key="build-7/step-2")
    assert one.failure_id != two.failure_id
    assert len(list(offline_env.glob("*.json"))) == 2


def test_facts_that_are_not_an_object_are_the_callers_bug(offline_env: Path) -> None:
    with pytest.raises(ValueError, match="facts must be a JSON object"):
        TheowClient().submit(["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"facts\.nested\.path: a value of type PosixPath, not JSON"
    ):
        TheowClient().submit({"nested": {"path": Path("/tmp")}})
    assert not offline_env.exists()


def test_flush_with_broker_still_down_keeps_everything(offline_env: Path) -> None:
    client = TheowClient()
    client.submit({"a": 1})
    client.submit({"a": 2})
    assert client.flush() == (0, 2)
    assert len(list(offline_env.glob("*.json"))) == 2


@pytest.mark.integration
def test_flush_sends_spooled_failures_into_redis_and_empties_the_spool(
    offline_env: Path, client_redis_url: str
) -> None:
    down = TheowClient()
    ids = []
    for n in range(3):
        ids.append(down.submit({"n": n}).failure_id)
        time.sleep(0.02)  # distinct file times: the spool is sent oldest first
    (offline_env / "garbage.json").write_text("{not json")

    sent, remaining = TheowClient(redis_url=client_redis_url).flush()

    assert (sent, remaining) == (3, 0)
    assert list(offline_env.glob("*.json")) == []
    assert (offline_env / "garbage.json.bad").exists()
    queued = redis.Redis.from_url(client_redis_url).lrange(names.QUEUE_RESOLVE, 0, -1)
    bodies = [json.loads(message) for message in queued]
    # The resolve queue is a Redis list that workers pop from the right.
    assert [body["headers"]["id"] for body in reversed(bodies)] == ids
    assert all(body["headers"]["task"] == names.TASK_RESOLVE for body in bodies)
    redis.Redis.from_url(client_redis_url).delete(names.QUEUE_RESOLVE)


def test_a_hung_broker_costs_one_timeout_not_minutes(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        ticket = TheowClient(url, spool_dir=tmp_path, timeout=1.0).submit({"a": 1})
        assert ticket.spooled
        # One connection, one timeout: a client that retried would have connected again.
        assert len(accepted(silent)) == 1


def accepted(listening: socket.socket) -> list[socket.socket]:
    """The connections waiting on ``listening``, taken (and closed) without blocking."""
    listening.setblocking(False)
    taken = []
    while True:
        try:
            connection, _ = listening.accept()
        except BlockingIOError:
            return taken
        connection.close()
        taken.append(connection)
