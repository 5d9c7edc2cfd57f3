"""The in-memory rate limiter (adapters.memory), on a clock the tests move."""

from __future__ import annotations

import threading

import pytest

from theow_workers.adapters.memory import InMemoryLimiter
from theow_workers.core.llm.model import QuotaExhausted

MODEL = "gemini-2.5-flash"


class Clock:
    """Time that passes only when the limiter sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def limiter(clock: Clock, rpm: int | None = None, tpm: int | None = None) -> InMemoryLimiter:
    return InMemoryLimiter(rpm, tpm, clock=clock, sleep=clock.sleep)


def test_without_limits_nothing_waits() -> None:
    clock = Clock()
    unlimited = limiter(clock)

    for _ in range(100):
        unlimited.acquire(MODEL, 10_000, max_wait=0)

    assert clock.slept == []


def test_requests_beyond_the_per_minute_limit_wait_for_the_window() -> None:
    clock = Clock()
    limited = limiter(clock, rpm=2)

    limited.acquire(MODEL, 1, max_wait=120)
    clock.now += 10
    limited.acquire(MODEL, 1, max_wait=120)
    limited.acquire(MODEL, 1, max_wait=120)

    assert clock.slept == [50.0]  # the first request left the window 60s after it was sent


def test_a_wait_longer_than_allowed_is_refused_at_once() -> None:
    clock = Clock()
    limited = limiter(clock, rpm=1)
    limited.acquire(MODEL, 1, max_wait=0)

    with pytest.raises(QuotaExhausted) as refused:
        limited.acquire(MODEL, 1, max_wait=30)

    assert not refused.value.daily
    assert refused.value.retry_after == 60
    assert "requests per minute" in refused.value.reason
    assert clock.slept == []


def test_tokens_per_minute_count_what_requests_really_used() -> None:
    clock = Clock()
    limited = limiter(clock, tpm=1000)

    limited.acquire(MODEL, 600, max_wait=0)
    with pytest.raises(QuotaExhausted, match="tokens per minute"):
        limited.acquire(MODEL, 600, max_wait=0)

    limited.settle(MODEL, estimated=600, actual=100)  # the request used far less
    limited.acquire(MODEL, 600, max_wait=0)
    assert clock.slept == []

    clock.now += 5
    limited.acquire(MODEL, 500, max_wait=120)
    assert clock.slept == [55.0]  # until the first request (100 tokens) left the window


def test_a_request_larger_than_the_token_limit_goes_alone() -> None:
    clock = Clock()
    limited = limiter(clock, tpm=1000)
    limited.acquire(MODEL, 10, max_wait=0)

    limited.acquire(MODEL, 5000, max_wait=120)

    assert clock.slept == [60.0]


def test_a_back_off_holds_every_request_for_the_model_until_it_ends() -> None:
    clock = Clock()
    limited = limiter(clock)

    limited.back_off(MODEL, 12, daily=False, reason="429")
    limited.acquire("gemini-2.5-pro", 1, max_wait=0)  # other models are not held
    limited.acquire(MODEL, 1, max_wait=60)

    assert clock.slept == [12.0]
    limited.back_off(MODEL, 90, daily=False, reason="429")
    with pytest.raises(QuotaExhausted, match="backing off after a 429"):
        limited.acquire(MODEL, 1, max_wait=60)


def test_a_daily_stop_refuses_requests_until_it_ends() -> None:
    clock = Clock()
    limited = limiter(clock)

    limited.back_off(MODEL, 3600, daily=True, reason="per-day quota exhausted")
    with pytest.raises(QuotaExhausted) as refused:
        limited.acquire(MODEL, 1, max_wait=86_400)

    assert refused.value.daily
    assert refused.value.reason == "per-day quota exhausted"
    assert refused.value.retry_after == 3600
    assert clock.slept == []
    clock.now += 3600
    limited.acquire(MODEL, 1, max_wait=0)


def test_concurrent_requests_never_exceed_the_limit() -> None:
    limited = InMemoryLimiter(requests_per_minute=5)
    allowed: list[int] = []

    def one(i: int) -> None:
        try:
            limited.acquire(MODEL, 1, max_wait=0)
        except QuotaExhausted:
            return
        allowed.append(i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(allowed) == 5
