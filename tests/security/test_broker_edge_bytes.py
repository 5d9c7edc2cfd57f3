"""Whatever bytes reach a worker's queues, it sets them aside and goes on consuming.

Before, ``LPUSH resolve garbage`` with an agent's broker login stopped the
resolver (``Unrecoverable error: JSONDecodeError`` in kombu's Redis
transport), and ``theow up`` then stopped the whole stack. Here every kind of
bad message in ``edge_corpus`` is pushed onto every queue a worker reads:
from an agent's login where its ACL lets it push (``resolve``, ``passing``),
from the admin's elsewhere (no agent can, but a worker must not depend on it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.conftest import wait_until
from tests.security.edge_corpus import KINDS, envelope, raw
from theow_client import Status, names
from theow_workers.edge.dead_letters import counts, newest
from theow_workers.ops.acl import agent_url, create_agent_user
from theow_workers.ops.checks import WARN, Context, check_edge, check_redis
from theow_workers.ops.metrics import RulesCollector

pytestmark = pytest.mark.integration

AGENT, TOKEN = "edge-agent", "tw1.edge-agent.not-a-real-secret"
AGENT_QUEUES = (names.QUEUE_RESOLVE, names.QUEUE_PASSING)


@pytest.fixture
def agent(fleet: Any) -> Iterator[Any]:
    """The broker login a build agent holds (the ACL profile of ``ops.acl``)."""
    create_agent_user(fleet.settings, AGENT, TOKEN)
    client = redis.Redis.from_url(agent_url(fleet.settings.redis_url, AGENT, TOKEN))
    yield client
    client.close()


@pytest.fixture
def every_queue(fleet: Any) -> Any:
    """One worker consuming every queue a worker reads."""
    proc = fleet.stack.start_worker(list(names.QUEUES), concurrency=1, name="all")
    fleet.wait_for_worker("all")
    return proc


def push(agent: Any, admin: Any, queue: str, message: bytes) -> None:
    (agent if queue in AGENT_QUEUES else admin).lpush(queue, message)


def verdict_of(fleet: Any, n: int) -> Any:
    client = fleet.client()
    return client.submit({"stderr": f"ECHO word{n}\n", "job": f"edge-{n}"}).wait(60)


def test_every_kind_of_bad_bytes_on_every_queue_is_set_aside_and_the_worker_goes_on(
    fleet, every_queue, agent, redis_client
):
    for queue in names.QUEUES:
        for make, _ in KINDS.values():
            push(agent, redis_client, queue, make(queue))
    pushed = len(names.QUEUES) * len(KINDS)

    assert verdict_of(fleet, 1).status == Status.RESOLVED  # a real submission after them all
    found = wait_until(
        lambda: (c := counts(redis_client)).total == pushed and c, 60, "every refusal counted"
    )
    assert every_queue.poll() is None  # the same worker process, never restarted
    assert "Unrecoverable error" not in fleet.worker_log("all")
    expected: dict[tuple[str, str], int] = {}
    for name, (_, reason) in KINDS.items():
        for queue in names.QUEUES:
            task = {"built-in task": "celery", "task a list": "unknown"}.get(name)
            if task is None:
                task = _task_read(name, queue)
            expected[(task, reason)] = expected.get((task, reason), 0) + 1
    assert found.refused == expected
    assert found.kept == pushed
    letters = newest(redis_client, 1000)
    assert {(e["queue"], e["reason"]) for e in letters} == {
        (q, reason) for q in names.QUEUES for _, reason in KINDS.values()
    }
    assert all(
        len(e["head"]) <= names.DEAD_LETTER_HEAD and "\n" not in e["detail"] for e in letters
    )
    # Nothing reached Celery: no task it could not run was rejected, none left unacked.
    assert not redis_client.hlen("unacked")
    ctx = Context(fleet.settings)
    check_redis(ctx)
    (doctor,) = check_edge(ctx)
    assert doctor.status == WARN
    assert f"{pushed} messages refused at the broker edge" in doctor.detail


def _task_read(kind: str, queue: str) -> str:
    """The task label a refusal of ``kind`` on ``queue`` is counted under."""
    unreadable = {
        "not JSON",
        "empty",
        "a JSON array",
        "null",
        "invalid UTF-8",
        "no task header",
        "an object, not an envelope",
        "headers a list",
        "nested 100,000 deep",
        "unknown task",
    }
    if kind in unreadable:
        return "unknown"
    return envelope(queue)["headers"]["task"]


def test_a_dead_letter_keeps_a_bounded_head_with_secrets_masked(fleet, every_queue, agent):
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    message = envelope(names.QUEUE_RESOLVE, body="not base64 " + secret + "!" * 5_000_000)
    agent.lpush(names.QUEUE_RESOLVE, raw(message))
    admin = redis.Redis.from_url(fleet.settings.redis_url)
    try:
        (letter,) = wait_until(lambda: newest(admin, 10), 60, "the dead letter")
    finally:
        admin.close()
    assert (letter["queue"], letter["reason"]) == (names.QUEUE_RESOLVE, "bad-base64")
    assert letter["size"] > 5_000_000 and len(letter["head"]) <= names.DEAD_LETTER_HEAD
    assert secret not in json.dumps(letter)
    assert verdict_of(fleet, 2).status == Status.RESOLVED

    # What an operator runs to see it, and what Prometheus scrapes.
    env = {**os.environ, **fleet.stack.environment()}
    shown = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "dead-letters", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    listed = json.loads(shown.stdout)
    assert listed["kept"] == 1 and listed["dead_letters"] == [letter]
    assert listed["refused"] == [{"task": "theow.resolve", "reason": "bad-base64", "count": 1}]
    assert secret not in shown.stdout
    samples = {
        (s.name, s.labels.get("task"), s.labels.get("reason")): s.value
        for family in RulesCollector(fleet.settings.redis_url).collect()
        for s in family.samples
    }
    assert samples[("theow_refused_messages_total", "theow.resolve", "bad-base64")] == 1
    assert samples[("theow_broker_dead_letters", None, None)] == 1

    # Bytes that would act on the operator's terminal (write its clipboard, clear it) do not.
    agent.lpush(names.QUEUE_RESOLVE, b"\x1b]52;c;ZWNobyBoaQ==\x07\x1b[2Jgarbage")
    wait_until(lambda: len(newest(redis.Redis.from_url(fleet.settings.redis_url), 10)) == 2, 60)
    table = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "dead-letters"],
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "2 message(s) refused" in table.stdout and "garbage" in table.stdout
    assert "\x1b" not in table.stdout and secret not in table.stdout


def test_a_message_larger_than_the_bound_is_set_aside_unread(fleet, every_queue, agent):
    agent.lpush(names.QUEUE_PASSING, b"[" + b" " * (33 * 1024 * 1024) + b"]")
    admin = redis.Redis.from_url(fleet.settings.redis_url)
    try:
        (letter,) = wait_until(lambda: newest(admin, 10), 60, "the dead letter")
    finally:
        admin.close()
    assert (letter["queue"], letter["reason"]) == (names.QUEUE_PASSING, "too-large")
    assert verdict_of(fleet, 3).status == Status.RESOLVED


def test_the_dead_letter_list_holds_at_most_its_cap_and_expires(redis_client):
    from theow_workers.edge.dead_letters import set_aside
    from theow_workers.edge.envelope import Refusal

    refusal = Refusal("not-json", "not JSON", "unknown")
    for n in range(names.DEAD_LETTER_CAP + 50):
        set_aside(redis_client, names.QUEUE_RESOLVE, f"garbage {n}".encode(), refusal)
    assert redis_client.llen(names.KEY_DEAD_LETTERS) == names.DEAD_LETTER_CAP
    assert 0 < redis_client.ttl(names.KEY_DEAD_LETTERS) <= names.DEAD_LETTER_TTL
    assert newest(redis_client, 1)[0]["head"] == f"garbage {names.DEAD_LETTER_CAP + 49}"
    assert counts(redis_client).refused == {("unknown", "not-json"): names.DEAD_LETTER_CAP + 50}


# The soak: bad bytes between real submissions. The suite runs 200 + 200; the figure is
#   THEOW_EDGE_SOAK=1000 pytest -p no:randomly tests/security/test_broker_edge_bytes.py -k soak
SOAK = int(os.environ.get("THEOW_EDGE_SOAK", "200"))
MAKERS = [make for make, _ in KINDS.values()]


def test_a_soak_of_bad_bytes_between_real_submissions_costs_no_verdict_and_no_restart(
    fleet, every_queue, agent, redis_client
):
    client = fleet.client()
    tickets: list[Any] = []
    for i in range(SOAK):
        queue = names.QUEUES[(i // len(MAKERS)) % len(names.QUEUES)]
        bad = MAKERS[i % len(MAKERS)](queue)
        (agent if queue in AGENT_QUEUES else redis_client).lpush(queue, bad)
        facts = {"stderr": f"step {i}\nECHO word{i}\n", "job": f"soak-{i}"}
        tickets.append(client.submit(facts, idempotency_key=f"soak-{i}"))

    statuses = [ticket.wait(120).status for ticket in tickets]
    assert statuses == [Status.RESOLVED] * SOAK
    found = wait_until(
        lambda: (c := counts(redis_client)).total == SOAK and c, 60, "every refusal counted"
    )
    assert every_queue.poll() is None
    assert "Unrecoverable error" not in fleet.worker_log("all")
    assert found.kept == min(SOAK, names.DEAD_LETTER_CAP)
    ctx = Context(fleet.settings)
    check_redis(ctx)
    (doctor,) = check_edge(ctx)
    assert doctor.status == WARN and f"{SOAK} messages refused" in doctor.detail


def test_a_message_a_worker_gives_back_goes_to_its_own_queue_never_where_it_says(
    fleet, agent, redis_client
):
    from datetime import UTC, datetime, timedelta

    worker = fleet.stack.start_worker([names.QUEUE_RESOLVE], concurrency=1, name="holder")
    fleet.wait_for_worker("holder")
    message = envelope(names.QUEUE_RESOLVE)
    # Held by the worker, unacked, until its ETA: then the worker is stopped and gives it back.
    message["headers"]["eta"] = (datetime.now(UTC) + timedelta(seconds=120)).isoformat()
    message["properties"]["delivery_info"] = {"exchange": "", "routing_key": names.QUEUE_EXPLORE}
    agent.lpush(names.QUEUE_RESOLVE, raw(message))
    wait_until(lambda: redis_client.hlen("unacked") == 1, 60, "the worker to hold the message")
    worker.terminate()  # a warm shutdown: what it holds goes back to the broker
    worker.wait(60)
    assert redis_client.llen(names.QUEUE_EXPLORE) == 0  # no agent may write there
    assert redis_client.llen(names.QUEUE_RESOLVE) == 1
