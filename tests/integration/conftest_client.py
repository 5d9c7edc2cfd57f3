"""Fixtures for the theow_client tests: a dead broker, a clean Redis, a fake resolver.

Imported explicitly by the client's test modules (``from ... import *``), so
that they stay out of the shared conftest files.

The fake resolver is a real Celery worker (``start_worker``, in a thread)
consuming the real ``resolve`` queue with a tiny ``theow.resolve`` task. Each
test tells it what to answer for its own ``scenario`` fact, so a message left
over from another test can never take a test's answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery  # type: ignore[import-untyped]
from celery.contrib.testing.worker import start_worker  # type: ignore[import-untyped]

from tests.conftest import redis_database
from theow_client import names
from theow_client.verdict import BoundAction, Status, Verdict

__all__ = [
    "TOUCH_MARKER_ACTION",
    "FakeResolver",
    "actions_dir",
    "client_redis_url",
    "offline_env",
    "resolver",
    "resolver_worker",
]

Answer = Callable[[dict[str, Any]], dict[str, Any]]

# A client-side action, as a deployment would ship it in actions/*.py.
TOUCH_MARKER_ACTION = '''
from pathlib import Path

from theow_workers import action


@action("touch_marker", client_side=True)
def touch_marker(name: str, workspace: str) -> dict:
    """Create the file the failing step is missing."""
    (Path(workspace) / name).write_text("fixed by theow")
    return {"status": "ok"}
'''


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The environment of a build agent whose broker is down; returns the spool dir."""
    spool = tmp_path / "spool"
    monkeypatch.setenv("THEOW_REDIS_URL", f"redis://127.0.0.1:{closed_port()}/0")
    monkeypatch.setenv("THEOW_SPOOL_DIR", str(spool))
    monkeypatch.delenv("THEOW_AGENT_TOKEN", raising=False)  # an agent without a token
    return spool


@pytest.fixture
def actions_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "actions"
    directory.mkdir()
    (directory / "fix.py").write_text(TOUCH_MARKER_ACTION)
    return directory


@pytest.fixture(scope="module")
def client_redis_url(redis_url: str) -> Iterator[str]:
    """The test Redis of tests/conftest.py, in a database of the client tests' own (the one
    after the session's), flushed before and after the module.

    That fixture uses THEOW_TEST_REDIS_URL when set, else starts Valkey, and
    skips (fails under CI) when neither is available. Real workers of other
    modules listen on its database; one still shutting down would take the fake
    resolver's tasks, so these tests use another database. Only it is flushed.
    """
    url = redis_database(redis_url, 1)  # the second of this xdist worker's two (conftest.py)
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


class FakeResolver:
    """Answers ``theow.resolve`` from per-scenario scripts and records every payload."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.scripts: dict[str, deque[Answer]] = defaultdict(deque)

    def script(self, scenario: str, *answers: Answer) -> None:
        with self.lock:
            self.scripts[scenario].extend(answers)

    def payloads(self, scenario: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.received[scenario])

    def wait_for(self, scenario: str, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
        """The scenario's payloads once ``count`` arrived (sent without waiting, e.g.)."""
        deadline = time.monotonic() + timeout
        while len(self.payloads(scenario)) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.payloads(scenario)

    def answer(self, payload: dict[str, Any]) -> dict[str, Any]:
        facts = json.loads(payload["facts_json"]) if "facts_json" in payload else payload["facts"]
        scenario = str(facts.get("scenario", ""))
        with self.lock:
            self.received[scenario].append(payload)
            script = self.scripts[scenario]
            respond = script.popleft() if script else verdict(Status.UNMATCHED)
        return respond(payload)


def verdict(status: Status, *, delay: float = 0.0, **fields: Any) -> Answer:
    """An answer: the verdict the fake resolver returns for the next payload."""

    def respond(payload: dict[str, Any]) -> dict[str, Any]:
        time.sleep(delay)
        return Verdict(failure_id=payload["failure_id"], status=status, **fields).to_dict()

    return respond


def raises(message: str) -> Answer:
    def respond(payload: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError(message)

    return respond


def fixed_by_touch_marker(name: str = "marker") -> Answer:
    return verdict(
        Status.RESOLVED,
        rule="missing_marker",
        mode="fix",
        actions=(BoundAction("touch_marker", {"name": name}, client_side=True),),
    )


_FAKE = FakeResolver()


@pytest.fixture(scope="module")
def resolver_worker(client_redis_url: str) -> Iterator[Any]:
    # Celery hands every task declared with ``@app.task`` to every app finalized later in
    # the process (tasks are shared by default), so once any test has imported the
    # workers' tasks, the real ``theow.resolve`` could take the fake's name (which one
    # wins depends on set order). Imported here so that it always has, and removed below.
    import theow_workers.tasks  # noqa: F401

    url = client_redis_url
    app = Celery("theow-fake-resolver", broker=url, backend=url, set_as_current=False)
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])
    app.finalize()
    app.tasks.unregister(names.TASK_RESOLVE)

    @app.task(name=names.TASK_RESOLVE, shared=False)  # type: ignore[untyped-decorator]
    def resolve(payload: dict[str, Any]) -> dict[str, Any]:
        return _FAKE.answer(payload)

    assert app.tasks[names.TASK_RESOLVE] is resolve, "the fake resolver must answer, not the real"

    with start_worker(app, perform_ping_check=False, queues=[names.QUEUE_RESOLVE]) as worker:
        yield worker


@pytest.fixture
def resolver(
    resolver_worker: Any, client_redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> FakeResolver:
    """The running fake resolver; the client under test is pointed at its Redis."""
    monkeypatch.setenv("THEOW_REDIS_URL", client_redis_url)
    monkeypatch.setenv("THEOW_SPOOL_DIR", str(tmp_path / "spool"))
    # The fake answers through Celery's results, as workers answer a client without a
    # token; the real fleet's token (left in the environment by a session fixture) is not ours.
    monkeypatch.delenv("THEOW_AGENT_TOKEN", raising=False)
    return _FAKE
