"""Fixtures for the replay tests: the ``fleet`` plus a replay worker and the ``theow replay`` CLI.

Imported explicitly by the replay test modules (``from ... import *``), so
they stay out of the shared conftest files. The replay worker is started as
``theow up`` starts it: a separate ``celery worker`` consuming only the
``replay`` queue; the CLI runs as a subprocess, as a user types it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Fleet

__all__ = ["ReplayFleet", "counted_once", "history_lines", "replay_fleet"]


@dataclass
class ReplayFleet:
    fleet: Fleet
    running: list[subprocess.Popen[str]] = field(default_factory=list)

    def start_replay_worker(self, concurrency: int = 1, nice: int = 0) -> subprocess.Popen[bytes]:
        proc = self.fleet.stack.start_worker(
            ["replay"], concurrency=concurrency, name="replay", nice=nice
        )
        self.fleet.wait_for_worker("replay")
        return proc

    def write(self, name: str, lines: list[Any]) -> Path:
        path = self.fleet.home / name
        path.write_text(
            "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines)
        )
        return path

    def cli(
        self, *args: str, timeout: float = 300, stdin: Any = None
    ) -> subprocess.CompletedProcess[str]:
        """``theow replay ARGS``; ``stdin``: a file opened for reading, piped in."""
        return subprocess.run(
            self._argv(args), capture_output=True, text=True, timeout=timeout, stdin=stdin
        )

    def start_cli(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            self._argv(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.running.append(proc)
        return proc

    def _argv(self, args: tuple[str, ...]) -> list[str]:
        return [sys.executable, "-m", "theow_workers.cli", "replay", *args]

    def jobs(self) -> Any:
        from theow_workers.store.replay import ReplayStore
        from theow_workers.store.schema import make_engine

        return ReplayStore(make_engine(self.fleet.settings.store_url))

    def wait(self, what: Any, timeout: float = 120, every: float = 0.1) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = what()
            if value:
                return value
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    def job_when(self, job_id: str, check: Any, timeout: float = 120) -> Any:
        store = self.jobs()
        return self.wait(lambda: (lambda j: j if check(j) else None)(store.get(job_id)), timeout)

    def latest_job_id(self, timeout: float = 60) -> str:
        store = self.jobs()
        return self.wait(lambda: next((j.id for j in store.recent(1)), None), timeout)


def rows(store: Any, model: Any, **where: Any) -> int:
    from sqlalchemy import func, select

    with store.session() as s:
        query = select(func.count()).select_from(model)
        for key, value in where.items():
            query = query.where(getattr(model, key) == value)
        return int(s.execute(query).scalar_one())


def counted_once(jobs: Any, store: Any, job_id: str, replayed: int) -> None:
    """The job is done, each input decided and counted once, each failure recorded once.

    ``jobs``: the ``ReplayStore``; ``store``: the ``SqlStore`` the workers record in.
    """
    from sqlalchemy import func, select

    from theow_workers.store.replay import COUNTER_OF
    from theow_workers.store.schema import AttemptRow, FailureRow, ReplayItemRow, VerdictRow

    job = jobs.get(job_id)
    assert job.status == "done" and job.processed == job.total
    assert rows(jobs, ReplayItemRow, job_id=job_id) == job.total
    per_counter: dict[str, int] = {}
    for status, n in jobs.counts(job_id).items():
        per_counter[COUNTER_OF[status]] = per_counter.get(COUNTER_OF[status], 0) + n
    assert (job.matched, job.unmatched) == (
        per_counter.get("matched", 0),
        per_counter.get("unmatched", 0),
    )
    assert rows(store, FailureRow, source=f"replay:{job_id}") == replayed
    with store.session() as s:
        verdicts = s.execute(
            select(func.count())
            .select_from(VerdictRow)
            .join(FailureRow, FailureRow.id == VerdictRow.failure_id)
            .where(FailureRow.source == f"replay:{job_id}")
        ).scalar_one()
        attempts = s.execute(
            select(AttemptRow.failure_id, func.count())
            .join(FailureRow, FailureRow.id == AttemptRow.failure_id)
            .where(FailureRow.source == f"replay:{job_id}")
            .group_by(AttemptRow.failure_id)
        ).all()
    assert verdicts == replayed
    assert all(n == 1 for _, n in attempts), "a failure was attempted twice"


def history_lines(n: int) -> list[dict[str, Any]]:
    """A fleet-like history over the fixture rules: mostly known causes, some unknown."""
    lines: list[dict[str, Any]] = []
    for i in range(n):
        kind = i % 10
        if kind < 5:
            lines.append({"stderr": f"step {i}\nECHO w{i}", "job": f"build-{i}"})
        elif kind < 7:
            lines.append({"stderr": f"fetching deps {i}\nread: Connection reset by peer"})
        elif kind < 9:
            lines.append({"stderr": f"run {i}\nfatal: disk quota exceeded on /data/{i}"})
        else:
            lines.append({"stderr": f"run {i}\npanic: nil map write in worker {i}"})
    return lines


@pytest.fixture
def replay_fleet(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReplayFleet]:
    monkeypatch.setenv("THEOW_REPLAY_CHUNK_SIZE", "10")
    monkeypatch.setenv("THEOW_REPLAY_IN_FLIGHT", "4")
    made = ReplayFleet(fleet)
    try:
        yield made
    finally:
        for proc in made.running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
