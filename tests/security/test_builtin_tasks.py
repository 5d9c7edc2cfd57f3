"""Only Theow's tasks run from a queue: Celery's built-ins are not reachable by an agent.

Before, ``celery.group``, ``celery.chord_unlock``, ``celery.accumulate``... were
registered on every worker: pushed onto ``resolve`` by an agent in a normal
protocol-2 envelope, they ran, and some published with the worker's admin
login to whatever queue or key the message named. Here each task name the
running worker knows (its own registry, built-ins included) and each built-in
a stock Celery app registers is pushed from an agent's broker login.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from tests.security.edge_corpus import body, envelope, raw
from theow_client import Status, names
from theow_workers.edge.dead_letters import counts
from theow_workers.ops.acl import agent_url, create_agent_user

pytestmark = pytest.mark.integration

AGENT, TOKEN = "builtin-agent", "tw1.builtin-agent.not-a-real-secret"
PROBE = "edge-probe"  # a queue no Theow code writes: a built-in that ran would publish here

# Arguments that would make each built-in do something visible, were it run.
_PROBE_TASK = {
    "task": names.TASK_RESOLVE,
    "args": [{}],
    "kwargs": {},
    "options": {"queue": PROBE},
    "subtask_type": None,
    "immutable": True,
}
ARGS: dict[str, list[Any]] = {
    "celery.accumulate": [1, 2, 3],
    "celery.group": [[_PROBE_TASK], [], "g-1"],
    "celery.chain": [_PROBE_TASK],
    "celery.chord": [[_PROBE_TASK], _PROBE_TASK],
    "celery.map": [_PROBE_TASK, [[1]]],
    "celery.starmap": [_PROBE_TASK, [[1]]],
    "celery.chunks": [_PROBE_TASK, [[1]], 1],
    "celery.chord_unlock": ["g-1", _PROBE_TASK],
    "celery.backend_cleanup": [],
}


@pytest.fixture
def agent(fleet: Any) -> Iterator[Any]:
    create_agent_user(fleet.settings, AGENT, TOKEN)
    client = redis.Redis.from_url(agent_url(fleet.settings.redis_url, AGENT, TOKEN))
    yield client
    client.close()


def registered(fleet: Any, worker: str) -> list[str]:
    """Every task name the running worker's registry holds, built-ins included."""
    app = Celery(broker=fleet.settings.redis_url)
    node = f"{worker}@{socket.gethostname()}"
    try:
        replies = app.control.broadcast(
            "registered",
            arguments={"builtins": True, "taskinfoitems": ["name"]},
            destination=[node],
            reply=True,
            timeout=5,
        )
    finally:
        app.close()
    (reply,) = replies
    return sorted(name.split(" ")[0] for name in reply[node])


def stock_builtins() -> list[str]:
    app = Celery()
    app.finalize()
    return sorted(name for name in app.tasks if name.startswith("celery."))


def test_no_task_but_theows_is_registered_on_a_worker(fleet):
    fleet.start_worker()
    assert registered(fleet, "resolver") == sorted(names.TASK_ROUTES)


def test_remote_control_replies_pass_the_edge(fleet):
    """An operator's `celery -A theow_workers.celery_app inspect ping` reads replies through it."""
    from theow_workers.celery_app import EDGE_TRANSPORT

    fleet.start_worker()
    app = Celery(broker=fleet.settings.redis_url)
    app.conf.broker_transport = EDGE_TRANSPORT
    node = f"resolver@{socket.gethostname()}"
    try:
        assert app.control.ping([node], timeout=5) == [{node: {"ok": "pong"}}]
    finally:
        app.close()
    assert not redis.Redis.from_url(fleet.settings.redis_url).llen(names.KEY_DEAD_LETTERS)


def test_every_task_name_a_worker_knows_pushed_by_an_agent_runs_nothing(fleet, agent, redis_client):
    fleet.start_worker()
    bindings = set(redis_client.keys("_kombu.binding.*"))
    known = sorted(set(registered(fleet, "resolver")) | set(stock_builtins()))
    assert {"celery.group", "celery.chord_unlock", "celery.accumulate"} <= set(known)
    pushed = {}
    for name in known:
        message = envelope(names.QUEUE_RESOLVE, task=name, body=body(args=ARGS.get(name, [{}])))
        agent.lpush(names.QUEUE_RESOLVE, raw(message))
        pushed[message["headers"]["id"]] = name

    # FIFO, one worker: once a real submission has its verdict, every message before it was read.
    verdict = fleet.client().submit({"stderr": "ECHO after\n", "job": "builtins"}).wait(60)
    assert verdict.status == Status.RESOLVED

    ran = {
        name
        for task_id, name in pushed.items()
        if name.startswith("celery.") and redis_client.exists(f"celery-task-meta-{task_id}")
    }
    assert ran == set()
    assert not redis_client.exists(PROBE)
    assert set(redis_client.keys("_kombu.binding.*")) == bindings
    builtins = [name for name in known if name.startswith("celery.")]
    edge = counts(redis_client).refused
    assert edge.get(("celery", "not-a-theow-task")) == len(builtins)
    # Theow's own tasks, unsigned or on another task's queue, are refused, never acted on.
    unverified = sum(int(n) for n in redis_client.hvals(names.KEY_REFUSED))
    theirs = len(known) - len(builtins)
    assert unverified + sum(edge.values()) - len(builtins) == theirs
