"""One contract for both rate limiters: the in-memory one and the Redis one with its Lua scripts.

Every test runs against each implementation; the Redis one talks to a real
Valkey/Redis server, and several limiter objects stand for several workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from theow_workers.adapters.memory import InMemoryLimiter
from theow_workers.core.llm.model import QuotaExhausted

MODEL = "gemini-2.5-flash"
OTHER = "gemini-2.5-pro"

# A factory builds one "worker's" limiter; every limiter from one factory shares the limit.
Factory = Callable[..., Any]


@pytest.fixture(params=["memory", "redis"])
def workers(request: pytest.FixtureRequest) -> Iterator[Factory]:
    if request.param == "memory":
        shared: dict[tuple[int | None, int | None], InMemoryLimiter] = {}

        def memory(rpm: int | None = None, tpm: int | None = None) -> InMemoryLimiter:
            # One process: the workers are threads sharing one limiter.
            return shared.setdefault((rpm, tpm), InMemoryLimiter(rpm, tpm))

        yield memory
        return

    import redis

    from theow_workers.adapters.redis_state import RedisLimiter

    url = request.getfixturevalue("redis_url")
    request.getfixturevalue("redis_client")  # a flushed database
    clients: list[Any] = []

    def real(rpm: int | None = None, tpm: int | None = None) -> RedisLimiter:
        client = redis.Redis.from_url(url)  # a connection per worker
        clients.append(client)
        return RedisLimiter(client, rpm or 1_000_000, tpm or 1_000_000_000)

    yield real
    for client in clients:
        client.close()


def test_the_request_over_the_per_minute_limit_is_refused_when_it_may_not_wait(workers):
    limiter = workers(rpm=2)
    limiter.acquire(MODEL, 10, max_wait=0)
    limiter.acquire(MODEL, 10, max_wait=0)

    with pytest.raises(QuotaExhausted) as refused:
        limiter.acquire(MODEL, 10, max_wait=0)

    assert not refused.value.daily
    assert 0 < refused.value.retry_after <= 60


def test_tokens_per_minute_hold_a_request_that_would_exceed_them(workers):
    limiter = workers(tpm=1000)
    limiter.acquire(MODEL, 600, max_wait=0)

    with pytest.raises(QuotaExhausted):
        limiter.acquire(MODEL, 600, max_wait=0)
    limiter.acquire(MODEL, 300, max_wait=0)  # what still fits goes through


def test_each_model_has_its_own_window(workers):
    limiter = workers(rpm=1)
    limiter.acquire(MODEL, 10, max_wait=0)

    limiter.acquire(OTHER, 10, max_wait=0)


def test_settling_a_request_at_its_real_size_frees_the_tokens_it_did_not_use(workers):
    limiter = workers(tpm=1000)
    limiter.acquire(MODEL, 900, max_wait=0)
    limiter.settle(MODEL, estimated=900, actual=100)

    limiter.acquire(MODEL, 800, max_wait=0)


def test_after_a_429_every_worker_backs_off_then_goes_on(workers):
    first, second = workers(rpm=100), workers(rpm=100)
    first.back_off(MODEL, seconds=0.5, daily=False, reason="429 per minute")

    with pytest.raises(QuotaExhausted) as refused:
        second.acquire(MODEL, 10, max_wait=0)
    assert not refused.value.daily
    started = time.monotonic()
    second.acquire(MODEL, 10, max_wait=30)  # waits the back-off out

    assert time.monotonic() - started >= 0.2


def test_a_per_day_429_stops_every_worker_with_its_reason(workers):
    first, second = workers(rpm=100), workers(rpm=100)
    first.back_off(MODEL, seconds=3600, daily=True, reason="per-day quota exhausted")

    with pytest.raises(QuotaExhausted) as refused:
        second.acquire(MODEL, 10, max_wait=600)

    assert refused.value.daily
    assert "per-day quota exhausted" in str(refused.value)
    assert refused.value.retry_after > 3000


def test_concurrent_workers_never_send_more_than_the_limit(workers):
    granted: list[int] = []
    refused: list[int] = []
    limiters = [workers(rpm=5) for _ in range(12)]
    start = threading.Barrier(len(limiters))

    def worker(n: int) -> None:
        start.wait()
        try:
            limiters[n].acquire(MODEL, 1, max_wait=0)
            granted.append(n)
        except QuotaExhausted:
            refused.append(n)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(len(limiters))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert (len(granted), len(refused)) == (5, 7)
