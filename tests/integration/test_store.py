"""The SQL store on SQLite and PostgreSQL: idempotent, and no count is lost."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime

import pytest

from theow_client.verdict import BoundAction, Status, Verdict
from theow_workers.adapters.sql import SqlStore
from theow_workers.core.ports import AttemptRecord, FailureRecord

pytestmark = pytest.mark.integration


def failure(failure_id: str) -> FailureRecord:
    return FailureRecord(
        id=failure_id,
        fingerprint="fp",
        facts={"stderr": "boom", "exit_code": 2},
        problem_type="build_failure",
        source="test",
        received_at=datetime.now(UTC),
    )


def test_a_failure_and_its_verdict_are_stored_once_whatever_the_retries(sql_url):
    store = SqlStore(sql_url)
    assert store.add_failure(failure("f1")) is True
    assert store.add_failure(failure("f1")) is False
    first = Verdict(
        "f1",
        Status.RESOLVED,
        rule="r",
        mode="fix",
        actions=(BoundAction("a", {"x": "1"}),),
        reason="ok",
    )
    assert store.add_verdict(first) == first
    later = Verdict("f1", Status.ERROR, reason="a redelivery decided differently")
    assert store.add_verdict(later) == first  # the first verdict stands
    assert store.verdict("f1") == first
    store.add_attempt(AttemptRecord("f1", "r", [{"action": "a", "params": {}}], "success"))
    store.dispose()


def _count(url: str, n: int) -> None:
    store = SqlStore(url)
    for i in range(n):
        store.count_attempt("busy_rule", success=i % 3 != 0)
    store.dispose()


def test_concurrent_workers_never_lose_a_count(sql_url):
    processes = [
        multiprocessing.get_context("spawn").Process(target=_count, args=(sql_url, 60))
        for _ in range(4)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
        assert p.exitcode == 0
    stats = SqlStore(sql_url).rule_stats()["busy_rule"]
    assert (stats.successes, stats.failures) == (4 * 40, 4 * 20)
