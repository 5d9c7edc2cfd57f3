"""Replay's SQL on SQLite and PostgreSQL: idempotent inserts, counters, selections, comparisons."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from theow_client.messages import SubmitRequest
from theow_client.verdict import Status, Verdict
from theow_workers.core.ports import FailureRecord
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.service import ResolveService, ResolveSettings
from theow_workers.replay import report as reports
from theow_workers.replay.jobs import replay_failure_id
from theow_workers.replay.runner import ReplayRunner
from theow_workers.replay.sources import StoredSource
from theow_workers.store.replay import DONE, ItemRecord, ReplayStore
from theow_workers.store.replay_chunk import ChunkStore
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import AttemptRow, FailureRow, VerdictRow

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

pytestmark = pytest.mark.integration


@pytest.fixture
def sql(sql_url: str) -> SqlStore:
    return SqlStore(sql_url)


@pytest.fixture
def runner(sql: SqlStore) -> ReplayRunner:
    knowledge = Library.load(FIXTURES / "rules", FIXTURES / "actions")
    services = {}

    def service_for(dry_run: bool):
        if dry_run not in services:
            writes = ChunkStore(sql, count_rules=not dry_run)
            settings = dataclasses.replace(ResolveSettings(action_timeout=1.0), dry_run=dry_run)
            service = ResolveService(
                writes, lambda: knowledge.book, lambda: knowledge.actions, settings=settings
            )
            services[dry_run] = (service, writes)
        return services[dry_run]

    return ReplayRunner(ReplayStore(sql.engine), service_for)


def rows(sql: SqlStore, model) -> int:
    with sql.session() as s:
        return int(s.execute(select(func.count()).select_from(model)).scalar_one())


def chunk(job_id: str, *stderrs: str) -> dict:
    items = [
        {"key": str(n), "line": n, "facts": {"stderr": text, "job": f"j{n}"}}
        for n, text in enumerate(stderrs, start=1)
    ]
    return {"job_id": job_id, "items": items}


def test_a_chunk_recorded_twice_is_stored_and_counted_once(runner, sql):
    jobs = runner.store
    job = jobs.create(kind="file", source="h", source_key="k", total=3, dry_run=False)
    work = chunk(job.id, "ECHO hi", "EXPLODE 3", "nobody knows")
    assert runner.run(work)["recorded"] == 3
    assert runner.run(work, delivery=2)["recorded"] == 0
    job = jobs.get(job.id)
    assert (job.processed, job.matched, job.unmatched) == (3, 2, 1)
    assert (rows(sql, FailureRow), rows(sql, VerdictRow), rows(sql, AttemptRow)) == (3, 3, 3)
    stats = sql.rule_stats()
    assert (stats["tf_echo"].successes, stats["tf_explode"].failures) == (1, 1)


def test_two_deliveries_of_one_chunk_flushing_the_same_rows_write_them_once(runner, sql):
    """Given a chunk resolved twice before either committed (a resume racing a worker)."""
    jobs = runner.store
    job = jobs.create(kind="file", source="h", source_key="k", total=1, dry_run=False)
    service, writes = runner.service_for(False)
    fid = replay_failure_id(job.id, "1")
    payload = {"failure_id": fid, "facts": {"stderr": "ECHO hi", "job": "j"}}
    for _ in range(2):
        writes.begin([fid])
        verdict = service.resolve(SubmitRequest.from_wire(payload), fid)
        jobs.record(job.id, [ItemRecord("1", verdict.status.value, line=1, failure_id=fid, rule=verdict.rule)], writes.flush)  # fmt: skip
    assert (rows(sql, VerdictRow), rows(sql, AttemptRow), jobs.get(job.id).processed) == (1, 1, 1)
    assert sql.rule_stats()["tf_echo"].successes == 1


def test_stored_failures_are_selected_by_time_verdict_and_rule(sql):
    now = datetime.now(UTC)
    for fid, hours, source in (
        ("a", 1, "ci"),
        ("b", 2, "ci"),
        ("c", 48, "ci"),
        ("d", 1, "replay:x"),
    ):
        sql.add_failure(FailureRecord(fid, "fp", {"stderr": fid}, None, source, now - timedelta(hours=hours)))  # fmt: skip
    sql.add_verdict(Verdict("a", Status.RESOLVED, rule="tf_echo"))
    sql.add_verdict(Verdict("b", Status.UNMATCHED))

    def keys(**selection) -> list[str]:
        source = StoredSource.select(ReplayStore(sql.engine), **selection)
        found = [p.key for batch in source.batches() for p in batch]
        assert source.total() == len(found)
        return found

    assert keys(since=None, unmatched_only=False, rule=None) == ["a", "b", "c"]
    assert keys(since="24h", unmatched_only=False, rule=None) == ["a", "b"]
    assert keys(since="24h", unmatched_only=True, rule=None) == ["b"]
    assert keys(since=None, unmatched_only=False, rule="tf_echo") == ["a"]


def test_the_report_compares_with_the_previous_replay_of_the_same_source(sql):
    jobs = ReplayStore(sql.engine)
    before = jobs.create(kind="file", source="h", source_key="same", total=2, created_at=datetime.now(UTC) - timedelta(days=1))  # fmt: skip
    jobs.record(before.id, [ItemRecord("1", "resolved", line=1, rule="r1"), ItemRecord("2", "resolved", line=2, rule="r2")])  # fmt: skip
    jobs.update(before.id, status=DONE)
    now = jobs.create(kind="file", source="h", source_key="same", total=2, rules=["r1", "r2"])
    jobs.record(now.id, [ItemRecord("1", "resolved", line=1, rule="r1"), ItemRecord("2", "unmatched", line=2, fingerprint="f", sample="x", basis="x")])  # fmt: skip
    data = reports.build(jobs, jobs.get(now.id), reports.Pricing("m", 1, 1, 0.0, 0.0))
    cmp = data["comparison"]
    assert cmp["previous_job"] == before.id
    assert [c["rule"] for c in cmp["stopped_matching"]] == ["r2"]
    assert cmp["lost_matches"]["sample"][0]["key"] == "2"
