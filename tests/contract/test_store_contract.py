"""One contract for the Store and StepStore ports: in memory, on SQLite and on PostgreSQL.

Every test runs against each implementation. A factory builds one worker's
store; for SQL each is its own engine and connections, so concurrent
workers are concurrent database clients.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import prepared_database
from theow_client.verdict import BoundAction, Status, Verdict
from theow_workers.adapters.memory import InMemoryStore
from theow_workers.core.ports import CLIENT_PENDING, SUGGESTED, AttemptRecord, FailureRecord

Factory = Callable[[], Any]


@pytest.fixture(
    params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]
)
def workers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    if request.param == "memory":
        shared = InMemoryStore()
        yield lambda: shared
        return

    from theow_workers.store.results import SqlStore

    url = prepared_database(request.param, tmp_path)
    stores: list[SqlStore] = []

    def real() -> SqlStore:
        stores.append(SqlStore(url))
        return stores[-1]

    yield real
    for store in stores:
        store.dispose()


def failure(failure_id: str) -> FailureRecord:
    return FailureRecord(
        id=failure_id,
        fingerprint="fp",
        facts={"stderr": "boom", "exit_code": 2},
        problem_type="build_failure",
        source="test",
        received_at=datetime.now(UTC),
    )


def attempt(failure_id: str, rule: str, outcome: str = "success") -> AttemptRecord:
    return AttemptRecord(failure_id, rule, [{"action": "a", "params": {"x": "1"}}], outcome)


RESOLVED = Verdict(
    "f1",
    Status.RESOLVED,
    rule="r",
    mode="fix",
    actions=(BoundAction("a", {"x": "1"}),),
    reason="ok",
    evidence={"fact": "stderr", "line": 1, "text": "boom"},
    also=("other",),
)


def test_a_new_failure_has_no_verdict_and_a_duplicate_gets_the_stored_one(workers):
    store = workers()

    assert store.record_failure(failure("f1")) is None
    assert store.record_failure(failure("f1")) is None  # recorded twice, still undecided
    store.record_outcome(RESOLVED, [attempt("f1", "r")])

    assert store.record_failure(failure("f1")) == RESOLVED
    assert store.verdict("f1") == RESOLVED
    assert store.verdict("never-seen") is None


def test_the_first_verdict_stands_whatever_a_redelivery_decides(workers):
    store = workers()
    store.record_failure(failure("f1"))

    assert store.record_outcome(RESOLVED) == RESOLVED
    later = Verdict("f1", Status.ERROR, reason="a redelivery decided differently")

    assert store.record_outcome(later) == RESOLVED
    assert store.verdict("f1") == RESOLVED


def test_an_outcome_counts_its_attempts_but_not_those_the_agent_has_yet_to_run(workers):
    store = workers()
    store.record_failure(failure("f1"))

    store.record_outcome(
        Verdict("f1", Status.RESOLVED, rule="works", attempts=3),
        [
            attempt("f1", "broken", "error"),
            attempt("f1", "slow", "timeout"),
            attempt("f1", "works"),
            attempt("f1", "on_agent", CLIENT_PENDING),
        ],
    )

    stats = store.rule_stats()
    assert {r: (s.successes, s.failures) for r, s in stats.items()} == {
        "broken": (0, 1),
        "slow": (0, 1),
        "works": (1, 0),
    }


def suggested_to_agent(store, failure_id: str = "f1") -> None:
    """A failure whose fix waits for its build agent, as the resolver records it."""
    store.record_failure(failure(failure_id))
    store.record_outcome(
        Verdict(failure_id, Status.SUGGESTED, rule="on_agent", mode="fix", reason="matched"),
        [attempt(failure_id, "on_agent", CLIENT_PENDING)],
    )


def test_a_suggested_outcome_is_never_counted(workers):
    store = workers()
    store.record_failure(failure("f1"))
    store.record_outcome(
        Verdict("f1", Status.SUGGESTED, rule="advice"), [attempt("f1", "advice", SUGGESTED)]
    )
    assert store.rule_stats() == {}
    assert store.verdict("f1").status is Status.SUGGESTED


def test_a_client_fix_whose_rerun_passed_resolves_its_failure_and_counts_once(workers):
    store = workers()
    suggested_to_agent(store)
    output = [{"action": "a", "output": {"changed": ["go.mod"]}}]

    assert store.settle_client_attempt("f1", "on_agent", True, "", output) is True
    assert store.settle_client_attempt("f1", "on_agent", True, "", output) is False  # repeated
    assert store.settle_client_attempt("f1", "on_agent", False, "late", []) is False

    assert store.verdict("f1").status is Status.RESOLVED
    assert store.verdict("f1").reason == "matched"
    stats = store.rule_stats()["on_agent"]
    assert (stats.successes, stats.failures) == (1, 0)


def test_a_client_fix_that_did_not_work_fails_its_failure_and_counts_once(workers):
    store = workers()
    suggested_to_agent(store)

    assert store.settle_client_attempt("f1", "on_agent", False, "re-run failed", []) is True
    assert store.settle_client_attempt("f1", "on_agent", True, "", []) is False

    verdict = store.verdict("f1")
    assert verdict.status is Status.FAILED
    assert "re-run failed" in verdict.reason
    stats = store.rule_stats()["on_agent"]
    assert (stats.successes, stats.failures) == (0, 1)


def test_a_report_for_a_rule_or_failure_that_waits_for_nothing_changes_nothing(workers):
    store = workers()
    suggested_to_agent(store)
    assert store.settle_client_attempt("f1", "another_rule", True, "", []) is False
    assert store.settle_client_attempt("nope", "on_agent", True, "", []) is False
    assert store.verdict("f1").status is Status.SUGGESTED
    assert store.rule_stats() == {}


def test_concurrent_workers_never_lose_a_count(workers):
    views = [workers() for _ in range(6)]
    start = threading.Barrier(len(views))
    errors: list[BaseException] = []

    def worker(n: int, store: Any) -> None:
        try:
            start.wait()
            for i in range(12):
                failure_id = f"w{n}-{i}"
                store.record_failure(failure(failure_id))
                outcome = "success" if i % 3 else "error"
                store.record_outcome(
                    Verdict(failure_id, Status.RESOLVED, rule="busy"),
                    [attempt(failure_id, "busy", outcome)],
                )
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n, v)) for n, v in enumerate(views)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)

    assert errors == []
    stats = views[0].rule_stats()["busy"]
    assert (stats.successes, stats.failures) == (6 * 8, 6 * 4)


def test_workers_racing_on_one_failure_all_return_the_one_stored_verdict(workers):
    views = [workers() for _ in range(4)]
    start = threading.Barrier(len(views))
    returned: list[Verdict] = []

    def worker(n: int, store: Any) -> None:
        start.wait()
        if store.record_failure(failure("f1")) is None:
            returned.append(store.record_outcome(Verdict("f1", Status.RESOLVED, rule=f"r{n}")))
        else:
            returned.append(store.verdict("f1"))

    threads = [threading.Thread(target=worker, args=(n, v)) for n, v in enumerate(views)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)

    stored = views[0].verdict("f1")
    assert stored is not None
    assert returned == [stored] * len(views)


# One step at a time: the StepStore port, which the replay's chunk store reads through


def test_a_failure_is_added_once_whatever_the_deliveries(workers):
    store = workers()

    assert store.add_failure(failure("f1")) is True
    assert store.add_failure(failure("f1")) is False
    assert store.verdict("f1") is None


def test_added_steps_give_the_same_verdict_and_counts_as_a_whole_outcome(workers):
    store = workers()
    store.add_failure(failure("f1"))
    store.add_attempt(attempt("f1", "broken", "error"))
    store.count_attempt("broken", False)
    store.add_attempt(attempt("f1", "r"))
    store.count_attempt("r", True)

    assert store.add_verdict(RESOLVED) == RESOLVED
    assert store.add_verdict(Verdict("f1", Status.ERROR, reason="redelivered")) == RESOLVED
    assert store.verdict("f1") == RESOLVED
    stats = store.rule_stats()
    assert {r: (s.successes, s.failures) for r, s in stats.items()} == {
        "broken": (0, 1),
        "r": (1, 0),
    }


def test_concurrent_workers_counting_one_step_at_a_time_never_lose_a_count(workers):
    views = [workers() for _ in range(6)]
    start = threading.Barrier(len(views))
    errors: list[BaseException] = []

    def worker(store: Any) -> None:
        try:
            start.wait()
            for i in range(12):
                store.count_attempt("busy", bool(i % 3))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(v,)) for v in views]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)

    assert errors == []
    stats = views[0].rule_stats()["busy"]
    assert (stats.successes, stats.failures) == (6 * 8, 6 * 4)


def test_a_rule_that_failed_then_worked_in_one_outcome_counts_both(workers):
    store = workers()
    store.record_failure(failure("f1"))

    store.record_outcome(
        Verdict("f1", Status.RESOLVED, rule="flaky", attempts=2),
        [attempt("f1", "flaky", "error"), attempt("f1", "flaky"), attempt("f1", "other", "error")],
    )

    stats = store.rule_stats()
    assert {r: (s.successes, s.failures) for r, s in stats.items()} == {
        "flaky": (1, 1),
        "other": (0, 1),
    }


# What the wire sees on PostgreSQL


@pytest.mark.postgresql
def test_a_resolved_failure_costs_two_round_trips_to_postgresql(tmp_path):
    from theow_workers.store.results import SqlStore

    store = SqlStore(prepared_database("postgresql", tmp_path))
    try:
        store.record_failure(failure("warm-up"))  # connecting has queries of its own
        with wire(store) as sent:
            assert store.record_failure(failure("f1")) is None
            store.record_outcome(RESOLVED, [attempt("f1", "broken", "error"), attempt("f1", "r")])
        assert sent() == 2
        with wire(store) as sent:  # a duplicate reads its verdict: the rare case
            assert store.record_failure(failure("f1")) == RESOLVED
            assert store.record_outcome(Verdict("f1", Status.ERROR)) == RESOLVED
        assert sent() == 4
    finally:
        store.dispose()


@pytest.mark.postgresql
def test_a_connection_the_database_dropped_fails_as_unavailable_and_a_retry_writes(tmp_path):
    """A pooled connection used in the last 10 s is not pinged: a restart shows on its
    statement, as StoreUnavailable (the resolve task retries), and the pool replaces it."""
    import psycopg
    from sqlalchemy.engine import make_url

    from theow_workers.store import StoreUnavailable
    from theow_workers.store.results import SqlStore

    url = prepared_database("postgresql", tmp_path)
    store = SqlStore(url)
    try:
        store.record_failure(failure("warm-up"))
        with store.engine.connect() as conn:
            pid = conn.connection.dbapi_connection.info.backend_pid
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])

        with pytest.raises(StoreUnavailable):
            store.record_failure(failure("f1"))
        assert store.record_failure(failure("f1")) is None, "the retry records it, once"
        assert store.record_outcome(RESOLVED) == RESOLVED
    finally:
        store.dispose()


@contextmanager
def wire(store: Any) -> Iterator[Callable[[], int]]:
    """Count the requests a store's connection sends (libpq's trace: Query and Sync messages).

    Each is answered by one ReadyForQuery before the client goes on: one round trip.
    """
    from psycopg import pq

    with store.engine.connect() as conn:
        pgconn = conn.connection.dbapi_connection.pgconn  # the pool's one idle connection
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        count = [0]
        try:
            yield lambda: count[0]
        finally:
            pgconn.untrace()
            trace.seek(0)
            frames = [line.rstrip("\n").split("\t")[2] for line in trace if line[:2] == "F\t"]
            count[0] = sum(frame in ("Query", "Sync") for frame in frames)
