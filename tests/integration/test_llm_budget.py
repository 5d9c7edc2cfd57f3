"""A budget of N dollars a day, shared by every worker through Redis, is never exceeded.

Reservations race from many threads, each on its own connection, as workers
would; then explain runs against the fake OpenAI-compatible server until the
day's budget stops it, and ``theow doctor`` and the console say until when.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from tests.integration.test_explain import explain_one, scripted  # noqa: F401 (a fixture)
from theow_client import names
from theow_workers.adapters.memory import MICRO, day_and_rest
from theow_workers.adapters.redis_state import RedisSpend
from theow_workers.core.llm.model import BudgetReached

pytestmark = pytest.mark.integration


def test_concurrent_reservations_never_pass_the_daily_budget(redis_url: str) -> None:
    import redis

    # A day of its own (in 2101), so no other test's spending counts here.
    now = 4_134_000_000.0 + random.randrange(10_000) * 86_400
    day, _ = day_and_rest(now)
    key = names.key_llm_spend(day)
    cap = 1.0
    watcher = redis.Redis.from_url(redis_url)
    seen: list[int] = []
    granted: list[int] = []
    refused = threading.Event()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(int(watcher.get(key) or 0))

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        spend = RedisSpend(redis.Redis.from_url(redis_url), cap, clock=lambda: now)
        for _ in range(150):
            most = rng.uniform(0.001, 0.03)
            try:
                ticket = spend.reserve(most)
            except BudgetReached:
                refused.set()
                continue
            # What the call cost: up to its most; a timeout keeps all of it.
            spent = most if rng.random() < 0.2 else rng.uniform(0, most)
            spend.settle(ticket, spent)
            granted.append(round(spent * MICRO))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    monitor = threading.Thread(target=watch)
    monitor.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    monitor.join()
    try:
        final = int(watcher.get(key) or 0)
        assert refused.is_set()  # the budget was reached: the test reached the cap
        assert max(seen) <= cap * MICRO  # reserved and spent together, at every moment
        assert final <= cap * MICRO
        assert abs(final - sum(granted)) <= len(granted)  # each settles to its cost (µ$ rounding)
        assert watcher.get(names.key_llm_budget_reached(day)) is not None
    finally:
        watcher.delete(key, names.key_llm_budget_reached(day))
        watcher.close()


@pytest.fixture
def budgeted(monkeypatch: pytest.MonkeyPatch, redis_client: Any) -> Any:
    """Today's spend forgotten before and after: the session's Redis outlives the test."""
    monkeypatch.setenv("THEOW_LLM_DAILY_BUDGET", "0.0004")
    day, _ = day_and_rest(__import__("time").time())
    keys = (names.key_llm_spend(day), names.key_llm_budget_reached(day))
    redis_client.delete(*keys)
    yield keys
    redis_client.delete(*keys)


def test_explain_stops_at_the_daily_budget_and_doctor_and_console_say_until_when(
    budgeted,
    scripted,  # noqa: F811
) -> None:
    from theow_workers.ops.checks import Context, check_budget, check_redis
    from theow_workers.web.pages import budget_notice

    stack = scripted
    wire = stack.wire
    stack.fake.brain = lambda model, body: wire.text(
        '{"explanation": "It broke.", "cause": "code", "next_step": "Look."}'
    )
    states = [explain_one(stack, word)["state"] for word in ("golf", "hotel", "india", "juliet")]

    explained = states.count("explained")
    assert explained >= 1 and "budget" in states
    assert len(stack.fake.requests) == explained  # a refused call is never sent
    assert states[states.index("budget") :] == ["budget"] * (len(states) - states.index("budget"))
    spent = int(stack.runtime.redis.get(budgeted[0]) or 0)
    assert 0 < spent <= 0.0004 * MICRO

    ctx = Context(stack.settings)
    check_redis(ctx)
    (finding,) = check_budget(ctx)
    assert finding.status == "fail"
    assert "daily LLM budget of $0.0004 is reached" in finding.detail
    assert "no model call is sent until" in finding.detail and "00:00 UTC" in finding.detail
    assert budget_notice(stack.settings) == finding.detail
