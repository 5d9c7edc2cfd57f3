"""One contract for the History port: a list in memory and the SQL ledger (SQLite, PostgreSQL).

Given the same runs, I expect both to answer the classifier's two questions
alike: a job's runs in a time window, oldest first, and a cause's failures
across repositories and jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.conftest import prepared_database
from theow_workers.core.history.model import Outcome, Run
from theow_workers.core.history.ports import History


class ListHistory:
    """The History port over a plain list: what ``theow history eval`` needs, nothing more."""

    def __init__(self) -> None:
        self.runs: list[Run] = []

    def add(self, run: Run) -> None:
        self.runs.append(run)

    def job_runs(self, repo: str, job: str, *, since: float, until: float) -> Sequence[Run]:
        found = [r for r in self.runs if (r.repo, r.job) == (repo, job)]
        return sorted(
            (r for r in found if since <= r.finished_at <= until),
            key=lambda r: (r.finished_at, r.id),
        )

    def cause_failures(self, cause: str, *, since: float, until: float) -> Sequence[Run]:
        found = [r for r in self.runs if r.failed and r.cause == cause]
        return sorted(
            (r for r in found if since <= r.finished_at <= until),
            key=lambda r: (r.finished_at, r.id),
        )


Adder = Callable[[Run], None]


@pytest.fixture(params=["list", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def history(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[History, Adder]]:
    if request.param == "list":
        listed = ListHistory()
        yield listed, listed.add
        return
    from theow_workers.store.runs import LedgerRun, SqlRuns
    from theow_workers.store.schema import make_engine

    engine = make_engine(prepared_database(request.param, tmp_path))
    runs = SqlRuns(engine)
    yield runs, lambda run: runs.record(LedgerRun(run, agent="ci-1", source="client"))
    engine.dispose()


def run(run_id: str, at: float, outcome: Outcome = Outcome.PASSED, **given: object) -> Run:
    fields: dict[str, object] = {"repo": "o/r", "job": "test", "branch": "main", "sha": "a" * 40}
    fields.update(given)
    if outcome is Outcome.FAILED:
        fields.setdefault("cause", "pytest|e assert <n> == <n>")
    return Run(id=run_id, outcome=outcome, finished_at=at, **fields)  # type: ignore[arg-type]


def test_a_jobs_runs_come_oldest_first_within_the_window_passed_and_failed(history):
    answers, add = history
    for item in (
        run("r3", 300.0, Outcome.FAILED, sha="c" * 40, pr="7", base_sha="b" * 40, attempt=2),
        run("r1", 100.0),
        run("r2", 200.0, branch="feature"),
        run("r4", 400.0),
        run("other-job", 250.0, job="lint"),
        run("other-repo", 250.0, repo="o/s"),
    ):
        add(item)

    found = answers.job_runs("o/r", "test", since=100.0, until=300.0)

    assert [r.id for r in found] == ["r1", "r2", "r3"]  # both ends inclusive
    failed = found[-1]
    assert failed.failed and failed.cause == "pytest|e assert <n> == <n>"
    assert (failed.pr, failed.base_sha, failed.attempt, failed.sha) == ("7", "b" * 40, 2, "c" * 40)
    assert not found[0].failed and found[0].cause is None
    assert answers.job_runs("o/r", "test", since=401.0, until=500.0) == []


def test_a_causes_failures_span_repositories_and_jobs_but_not_passes_or_other_causes(history):
    answers, add = history
    add(run("a", 10.0, Outcome.FAILED, cause="infra|no space left on device"))
    add(
        run(
            "b",
            20.0,
            Outcome.FAILED,
            repo="x/y",
            job="build",
            cause="infra|no space left on device",
        )
    )
    add(run("c", 30.0, Outcome.FAILED, cause="pytest|other"))
    add(run("d", 40.0))
    add(run("e", 50.0, Outcome.FAILED, cause="infra|no space left on device"))

    found = answers.cause_failures("infra|no space left on device", since=0.0, until=45.0)

    assert [(r.id, r.repo, r.job) for r in found] == [("a", "o/r", "test"), ("b", "x/y", "build")]
    assert all(r.failed for r in found)
