"""One contract for both Deliveries: the in-memory one and the Redis one.

Every test runs against each implementation; the Redis one talks to a real
Valkey/Redis server, and several Deliveries objects stand for several workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from theow_workers.adapters.memory import InMemoryDeliveries
from theow_workers.core.ports import Deliveries, OwnerTimeout

# A factory builds one "worker's" Deliveries; every one from one factory shares the keys.
Factory = Callable[[], Deliveries]


@pytest.fixture(params=["memory", "redis"])
def workers(request: pytest.FixtureRequest) -> Iterator[Factory]:
    if request.param == "memory":
        shared = InMemoryDeliveries()  # one process: the workers are threads
        yield lambda: shared
        return

    import redis

    from theow_workers.adapters.deliveries import RedisDeliveries

    url = request.getfixturevalue("redis_url")
    request.getfixturevalue("redis_client")  # a flushed database
    clients: list[Any] = []

    def real() -> RedisDeliveries:
        client = redis.Redis.from_url(url)  # a connection per worker
        clients.append(client)
        return RedisDeliveries(client)

    yield real
    for client in clients:
        client.close()


def _duplicate(
    worker: Deliveries, key: str, outcome: Callable[[], Any]
) -> tuple[Any, dict[str, Any]]:
    """A second delivery of ``key``, waiting in a thread: (thread, what it saw)."""
    seen: dict[str, Any] = {}

    def run() -> None:
        with worker.claim(key) as claim:
            seen["outcome"] = claim.wait(outcome, timeout=60)
            seen["held"] = claim.held

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, seen


def test_a_second_delivery_waits_for_the_first_ones_outcome_instead_of_running(workers):
    first, second = workers(), workers()
    outcomes: dict[str, str] = {}
    polled = threading.Event()

    def verdict() -> str | None:
        polled.set()
        return outcomes.get("f1")

    with first.claim("f1") as owner:
        assert owner.wait(verdict, timeout=5) is None and owner.held
        polled.clear()
        thread, seen = _duplicate(second, "f1", verdict)
        assert polled.wait(30)  # the duplicate is waiting on the owner
        outcomes["f1"] = "resolved by the first delivery"
        thread.join(30)

    assert seen == {"outcome": "resolved by the first delivery", "held": False}


def test_when_the_owner_lets_go_without_an_outcome_the_waiting_delivery_takes_over(workers):
    first, second = workers(), workers()
    polled = threading.Event()

    def nothing_yet() -> None:
        polled.set()

    with first.claim("f1") as owner:
        assert owner.try_take()
        thread, seen = _duplicate(second, "f1", nothing_yet)
        assert polled.wait(30)
    thread.join(30)

    assert seen == {"outcome": None, "held": True}


def test_an_owner_holding_the_key_too_long_ends_the_wait(workers):
    first, second = workers(), workers()
    with first.claim("f1") as owner:
        assert owner.try_take()
        with second.claim("f1") as claim, pytest.raises(OwnerTimeout, match="f1"):
            claim.wait(lambda: None, timeout=0.3)

    assert not claim.held


def test_of_many_deliveries_claiming_at_once_exactly_one_holds_the_key(workers):
    claims = [workers().claim("f1") for _ in range(6)]
    start = threading.Barrier(len(claims))
    taken: list[bool] = []

    def take(claim: Any) -> None:
        start.wait()
        taken.append(claim.try_take())

    threads = [threading.Thread(target=take, args=(c,)) for c in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for claim in claims:
        claim.release()

    assert sorted(taken) == [False] * 5 + [True]
    with workers().claim("f1") as again:
        assert again.try_take()  # released: free again


def test_deliveries_are_counted_across_workers_and_a_put_off_one_is_taken_back(workers):
    a, b = workers(), workers()

    assert [a.count("f1"), b.count("f1"), a.count("f1")] == [1, 2, 3]
    b.uncount("f1")  # that delivery waits for valid rules: it did not crash
    assert a.count("f1") == 3
    assert b.count("replay-chunk:7") == 1  # every key has its own count


def test_concurrent_deliveries_each_get_their_own_number(workers):
    numbers: list[int] = []
    lock = threading.Lock()

    def deliver(worker: Deliveries) -> None:
        for _ in range(25):
            number = worker.count("f1")
            with lock:
                numbers.append(number)

    threads = [threading.Thread(target=deliver, args=(workers(),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(numbers) == list(range(1, 101))


def test_a_killed_workers_claim_lapses_so_the_redelivery_takes_over(redis_url, redis_client):
    from theow_workers.adapters.deliveries import RedisDeliveries

    holder = (
        "import sys, redis, time\n"
        "from theow_workers.adapters.deliveries import RedisDeliveries\n"
        "claim = RedisDeliveries(redis.Redis.from_url(sys.argv[1]), claim_ttl=1.0).claim('f1')\n"
        "assert claim.try_take()\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    worker = subprocess.Popen(
        [sys.executable, "-c", holder, redis_url], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "held"
        redelivered = RedisDeliveries(redis_client).claim("f1")
        assert not redelivered.try_take()  # alive: its claim is kept fresh
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(30)

        assert redelivered.wait(lambda: None, timeout=30) is None
        assert redelivered.held
        redelivered.release()
    finally:
        worker.kill()
        worker.wait(30)


def test_an_owner_whose_claim_lapsed_cannot_end_or_extend_the_next_owners(redis_client):
    from theow_client import names
    from theow_workers.adapters.deliveries import RedisDeliveries

    stalled = RedisDeliveries(redis_client, claim_ttl=0.3).claim("f1")
    assert stalled.try_take()
    stalled._stop.set()  # a worker stalled past its TTL (its refresher got no CPU)
    deadline = time.monotonic() + 10
    while redis_client.exists(names.key_resolving("f1")) and time.monotonic() < deadline:
        time.sleep(0.05)
    taker = RedisDeliveries(redis_client).claim("f1")
    assert taker.try_take()

    stalled.release()  # late: the key is the next owner's now
    assert redis_client.get(names.key_resolving("f1")) == taker.token.encode()
    assert not RedisDeliveries(redis_client).claim("f1").try_take()
    taker.release()
    assert RedisDeliveries(redis_client).claim("f1").try_take()
