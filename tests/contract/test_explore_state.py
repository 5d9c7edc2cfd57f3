"""One contract for the explorer's shared state: in memory and in Redis (Lua session budget)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from theow_workers.adapters.memory import InMemoryExploreState

Factory = Callable[[], Any]


@pytest.fixture(params=["memory", "redis"])
def workers(request: pytest.FixtureRequest) -> Iterator[Factory]:
    """Builds one worker's view of the state; all views share it."""
    if request.param == "memory":
        shared = InMemoryExploreState()
        yield lambda: shared
        return

    import redis

    from theow_workers.adapters.redis_state import RedisExploreState

    url = request.getfixturevalue("redis_url")
    request.getfixturevalue("redis_client")  # a flushed database
    clients: list[Any] = []

    def real() -> RedisExploreState:
        client = redis.Redis.from_url(url)
        clients.append(client)
        return RedisExploreState(client)

    yield real
    for client in clients:
        client.close()


def test_a_session_budget_hands_out_numbered_sessions_then_refuses(workers):
    state = workers()

    taken = [state.take_session("replay:job-1", limit=3, ttl=60) for _ in range(5)]

    assert taken == [1, 2, 3, -1, -1]
    assert state.take_session("replay:job-2", limit=3, ttl=60) == 1  # another budget


def test_concurrent_workers_never_take_more_sessions_than_the_budget(workers):
    views = [workers() for _ in range(10)]
    results: list[int] = []
    start = threading.Barrier(len(views))

    def worker(state: Any) -> None:
        start.wait()
        results.append(state.take_session("replay:job", limit=4, ttl=60))

    threads = [threading.Thread(target=worker, args=(view,)) for view in views]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(n for n in results if n > 0) == [1, 2, 3, 4]
    assert results.count(-1) == 6


def test_one_worker_explores_a_root_cause_and_the_others_learn_who(workers):
    first, second = workers(), workers()

    assert first.take_flight("fp-1", "failure-a", ttl=60) is None
    assert second.take_flight("fp-1", "failure-b", ttl=60) == "failure-a"
    first.land("fp-1")
    assert second.take_flight("fp-1", "failure-b", ttl=60) is None


def test_a_finished_exploration_is_seen_by_every_worker(workers):
    first, second = workers(), workers()
    assert second.finished("fp-1") is None

    first.finish("fp-1", {"proposal_id": "p-1", "outcome": "proposed"})

    assert second.finished("fp-1") == {"proposal_id": "p-1", "outcome": "proposed"}


def test_the_session_cache_is_shared(workers):
    first, second = workers(), workers()

    first.remember("p-1", [0.1, 0.2], "name: r\n")

    (entry,) = second.cached()
    assert entry["proposal_id"] == "p-1"
    assert entry["rule_yaml"] == "name: r\n"
    assert entry["vector"] == pytest.approx([0.1, 0.2])


def test_a_redelivered_failure_is_not_held_off_by_its_own_flight(workers):
    first, second = workers(), workers()
    first.take_flight("fp-1", "failure-a", ttl=60)

    owner = second.take_flight("fp-1", "failure-a", ttl=60)

    assert owner in (None, "failure-a")  # either way the explorer goes on: it is its own


def test_the_session_cache_holds_each_proposal_once_and_its_latest_rule(workers):
    first, second = workers(), workers()
    assert second.cached() == []

    first.remember("p-1", [0.1, 0.2], "name: r\n")
    first.remember("p-2", [0.3, 0.4], "name: s\n")
    second.remember("p-1", [0.5, 0.6], "name: r2\n")

    entries = {e["proposal_id"]: e for e in first.cached()}
    assert set(entries) == {"p-1", "p-2"}
    assert entries["p-1"]["rule_yaml"] == "name: r2\n"
    assert entries["p-1"]["vector"] == pytest.approx([0.5, 0.6])
