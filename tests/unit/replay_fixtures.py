"""Fixtures for the replay unit tests: a migrated SQLite file, the fixture rules, a runner.

Imported explicitly by the replay test modules (``from ... import *``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import func, select

from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.service import ResolveService, ResolveSettings
from theow_workers.delivery import DeliveryPolicy
from theow_workers.replay.runner import ReplayRunner
from theow_workers.store.replay import COUNTER_OF, ReplayStore
from theow_workers.store.replay_chunk import ChunkStore
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import ReplayItemRow, migrate

__all__ = ["assert_counters_match_item_rows", "count", "jobs", "knowledge", "runner", "sql"]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def knowledge() -> Library:
    return Library.load(FIXTURES / "rules", FIXTURES / "actions")


@pytest.fixture
def sql(tmp_path) -> SqlStore:
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    return SqlStore(url)


@pytest.fixture
def jobs(sql) -> ReplayStore:
    return ReplayStore(sql.engine)


@pytest.fixture
def runner(sql, jobs, knowledge) -> ReplayRunner:
    services = {}

    def service_for(dry_run: bool):
        if dry_run not in services:
            writes = ChunkStore(sql, count_rules=not dry_run)
            service = ResolveService(
                writes,
                rulebook=lambda: knowledge.book,
                actions=lambda: knowledge.actions,
                settings=dataclasses.replace(ResolveSettings(action_timeout=1.0), dry_run=dry_run),
            )
            services[dry_run] = (service, writes)
        return services[dry_run]

    counts: dict[str, int] = {}

    def deliveries(key: str) -> int:
        counts[key] = counts.get(key, 0) + 1
        return counts[key]

    return ReplayRunner(
        jobs, service_for, deliveries=deliveries, policy=DeliveryPolicy.replay(2, time_limit=300)
    )


def count(store, model, **where) -> int:
    with store.session() as s:
        query = select(func.count()).select_from(model)
        for key, value in where.items():
            query = query.where(getattr(model, key) == value)
        return int(s.execute(query).scalar_one())


def assert_counters_match_item_rows(jobs: ReplayStore, job_id: str) -> None:
    job = jobs.get(job_id)
    per_counter: dict[str, int] = {}
    for status, n in jobs.counts(job_id).items():
        per_counter[COUNTER_OF[status]] = per_counter.get(COUNTER_OF[status], 0) + n
    assert job.processed == count(jobs, ReplayItemRow, job_id=job_id)
    for counter in ("matched", "unmatched", "failed", "errors", "invalid", "duplicates"):
        assert getattr(job, counter) == per_counter.get(counter, 0), counter
