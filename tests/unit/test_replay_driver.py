"""Driving a replay: passes, Ctrl-C, resume, cancel and stored failures, without a broker.

Chunks are "sent" to the real runner in the same process (a synchronous
stand-in for Celery); everything else is the real driver, sources and SQL.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.unit.replay_fixtures import *  # noqa: F403
from tests.unit.replay_fixtures import assert_counters_match_item_rows
from theow_workers.core.ports import FailureRecord
from theow_workers.replay.driver import Driver
from theow_workers.replay.sources import FileSource, SourceError, StoredSource, parse_since
from theow_workers.store.replay import CANCELLED, DONE, INCOMPLETE, INTERRUPTED


class Sent:
    def __init__(self, outcome: Any = None, error: Exception | None = None, ready=True) -> None:
        self.id, self.result, self._error = str(uuid.uuid4()), error or outcome, error
        self._ready = ready

    def ready(self) -> bool:
        return self._ready

    def failed(self) -> bool:
        return self._error is not None

    def forget(self) -> None:
        pass


class Broker:
    """Runs each chunk at once; ``lose`` chunks are never run (their worker vanished)."""

    def __init__(self, runner, lose: int = 0, interrupt_at: int | None = None, on_send=None):
        self.runner, self.lose, self.interrupt_at, self.on_send = (
            runner,
            lose,
            interrupt_at,
            on_send,
        )
        self.chunks: list[dict] = []

    def __call__(self, chunk: dict) -> Sent:
        self.chunks.append(chunk)
        if self.interrupt_at is not None and len(self.chunks) == self.interrupt_at:
            raise KeyboardInterrupt
        if self.on_send:
            self.on_send(len(self.chunks))
        if self.lose:
            self.lose -= 1
            return Sent(error=RuntimeError("worker lost"))
        return Sent(self.runner.run(chunk))


def driver(jobs, send) -> Driver:
    return Driver(jobs, send, Console(quiet=True), chunk_size=3, in_flight=2, poll=0.001, show_progress=False)  # fmt: skip


def history(tmp_path: Path, n: int = 10) -> FileSource:
    path = tmp_path / "history.jsonl"
    lines = [
        json.dumps({"stderr": f"ECHO w{i}" if i % 2 else f"no rule for {i}", "job": "j"})
        for i in range(n)
    ]
    lines[4] = "{broken"
    lines[7] = lines[1]
    path.write_text("\n".join(lines) + "\n")
    return FileSource(path, fact_limit=65536, max_line_bytes=1 << 20)


def start(jobs, source):
    return jobs.create(kind=source.kind, source=source.description, source_key=source.identity(),
                       options=source.options(), total=source.total())  # fmt: skip


def test_a_file_with_bad_lines_is_replayed_to_the_end(jobs, runner, tmp_path):
    source = history(tmp_path)
    job = driver(jobs, Broker(runner)).run(start(jobs, source), source)
    assert job.status == DONE
    assert (job.total, job.processed, job.invalid, job.duplicates) == (10, 10, 1, 1)
    assert (job.matched, job.unmatched) == (4, 4)
    assert_counters_match_item_rows(jobs, job.id)


def test_a_lost_chunk_is_sent_again_in_a_second_pass(jobs, runner, tmp_path):
    source = history(tmp_path)
    broker = Broker(runner, lose=1)
    job = driver(jobs, broker).run(start(jobs, source), source)
    assert job.status == DONE and job.processed == 10
    assert broker.chunks[-1]["items"] == broker.chunks[0]["items"]  # the lost one, again
    assert_counters_match_item_rows(jobs, job.id)


def test_chunks_that_always_fail_leave_the_job_incomplete_with_the_reason(jobs, runner, tmp_path):
    source = history(tmp_path)
    job = driver(jobs, Broker(runner, lose=10**6)).run(start(jobs, source), source)
    assert job.status == INCOMPLETE
    assert (
        "8 item(s) still undecided after 3 passes without progress: RuntimeError: worker lost"
        in job.message
    )


def test_ctrl_c_then_resume_finishes_the_rest_and_counts_nothing_twice(jobs, runner, tmp_path):
    source = history(tmp_path, n=30)
    job = start(jobs, source)
    with pytest.raises(KeyboardInterrupt):
        driver(jobs, Broker(runner, interrupt_at=3)).run(job, source)
    stopped = jobs.get(job.id)
    assert stopped.status == INTERRUPTED and 0 < stopped.processed < 30
    again = Broker(runner)
    resumed = FileSource.for_job(stopped, fact_limit=65536, max_line_bytes=1 << 20)
    job = driver(jobs, again).run(stopped, resumed)
    assert job.status == DONE and job.processed == 30
    sent_again = sum(len(c["items"]) for c in again.chunks)
    # Only what was not decided: the bad and the duplicate line are recorded by the driver.
    assert sent_again == 30 - stopped.processed - 2
    assert_counters_match_item_rows(jobs, job.id)


def test_resuming_a_file_that_changed_is_refused(jobs, runner, tmp_path):
    source = history(tmp_path)
    job = start(jobs, source)
    (tmp_path / "history.jsonl").write_text('{"stderr": "other"}\n')
    with pytest.raises(SourceError, match="changed since job"):
        FileSource.for_job(job, fact_limit=65536, max_line_bytes=1 << 20)


def test_a_cancel_stops_the_driver_and_keeps_what_was_decided(jobs, runner, tmp_path):
    source = history(tmp_path, n=30)
    job = start(jobs, source)
    cancel = lambda n: n == 2 and jobs.update(job.id, status=CANCELLED)  # noqa: E731
    job = driver(jobs, Broker(runner, on_send=cancel)).run(job, source)
    assert job.status == CANCELLED and job.processed < 30
    assert job.finished_at is not None


def test_stored_failures_are_selected_by_time_verdict_and_rule(jobs, runner, sql):
    now = datetime.now(UTC)

    def stored(fid: str, stderr: str, age_h: float, source: str = "theow-client") -> None:
        sql.add_failure(
            FailureRecord(
                fid,
                "fp",
                {"stderr": stderr, "job": "j"},
                None,
                source,
                now - timedelta(hours=age_h),
            )
        )

    stored("old", "ECHO old", 48)
    stored("echo", "ECHO new", 1)
    stored("unknown", "nobody knows", 2)
    stored("replayed", "ECHO again", 1, source="replay:abc")
    from theow_client.verdict import Status, Verdict

    sql.add_verdict(Verdict("echo", Status.RESOLVED, rule="tf_echo"))
    sql.add_verdict(Verdict("unknown", Status.UNMATCHED))
    sql.add_verdict(Verdict("old", Status.RESOLVED, rule="tf_echo"))

    def keys(**selection) -> list[str]:
        source = StoredSource.select(jobs, **selection)
        return [p.key for batch in source.batches() for p in batch]

    assert keys(since=None, unmatched_only=False, rule=None) == ["echo", "old", "unknown"]
    assert keys(since="24h", unmatched_only=False, rule=None) == ["echo", "unknown"]
    assert keys(since="24h", unmatched_only=True, rule=None) == ["unknown"]
    assert keys(since=None, unmatched_only=False, rule="tf_echo") == ["echo", "old"]

    source = StoredSource.select(jobs, since="24h", unmatched_only=False, rule=None)
    job = driver(jobs, Broker(runner)).run(start(jobs, source), source)
    assert (job.status, job.processed, job.matched, job.unmatched) == (DONE, 2, 1, 1)


def test_since_accepts_durations_and_dates():
    now = datetime(2026, 11, 22, 12, tzinfo=UTC)
    assert parse_since("24h", now) == now - timedelta(days=1)
    assert parse_since("2w", now) == now - timedelta(days=14)
    assert parse_since("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(SourceError, match="use a duration"):
        parse_since("yesterday", now)


def test_a_chunk_over_its_time_budget_stops_and_the_driver_sends_the_rest(jobs, runner, tmp_path):
    """Slow actions under --execute: chunks give back what they cannot finish in time."""
    runner.time_budget = 0.0  # every chunk decides one item, then stops
    source = history(tmp_path)
    broker = Broker(runner)
    job = driver(jobs, broker).run(start(jobs, source), source)
    assert job.status == DONE and job.processed == 10
    assert len(broker.chunks) > 4  # the items came back in later passes
    assert_counters_match_item_rows(jobs, job.id)


def test_chunks_lost_with_a_killed_worker_are_sent_again_after_a_silence(
    jobs, runner, tmp_path, monkeypatch
):
    """A worker killed whole keeps its chunks unacked for an hour: do not wait for them."""
    from theow_workers.replay import driver as driver_module

    monkeypatch.setattr(driver_module, "LOST_SECONDS", 0.3)
    source = history(tmp_path)
    vanished = []

    def send(chunk: dict) -> Sent:
        if not vanished:  # the first chunk goes to a worker that is then killed
            vanished.append(chunk)
            return Sent(ready=False)
        return Sent(runner.run(chunk))

    job = driver(jobs, send).run(start(jobs, source), source)
    assert job.status == DONE and job.processed == 10
    assert_counters_match_item_rows(jobs, job.id)


def test_a_replayed_log_longer_than_the_limit_points_at_its_own_line_numbers(
    jobs, runner, sql, tmp_path
):
    from theow_workers.replay import report as reports

    lines = [f"step {n}: compiled module_{n}.c" for n in range(1, 400_001)]
    lines[399_989] = "KeyError: 'DATABASE_URL'"
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps({"log": "\n".join(lines)}) + "\n")
    source = FileSource(path, fact_limit=65536, max_line_bytes=64 << 20)
    job = driver(jobs, Broker(runner)).run(start(jobs, source), source)
    assert job.status == DONE and job.unmatched == 1
    pricing = reports.Pricing("m", 1, 1, 0.0, 0.0)
    (group,) = reports.build(jobs, job, pricing)["unmatched_groups"]
    assert group["where"][0] == {"fact": "log", "line": 399_990, "text": "KeyError: 'DATABASE_URL'"}
