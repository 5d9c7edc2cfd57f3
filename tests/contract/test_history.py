"""One contract for the History the classifier asks: a job's runs and a cause's failures.

The in-memory history runs it here; the SQL ledger joins it as a second
implementation (the ``history`` fixture's params).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from theow_workers.core.history.memory import MemoryHistory
from theow_workers.core.history.model import Outcome, Run
from theow_workers.core.history.ports import History

Factory = Callable[[Iterable[Run]], History]


@pytest.fixture(params=["memory"])
def history(request: pytest.FixtureRequest) -> Factory:
    return MemoryHistory


def run(id: str, at: float, *, job: str = "test", cause: str | None = None) -> Run:
    outcome = Outcome.FAILED if cause else Outcome.PASSED
    return Run(
        id=id,
        repo="o/r",
        job=job,
        branch="main",
        sha=id,
        outcome=outcome,
        finished_at=at,
        cause=cause,
    )


def test_a_jobs_runs_in_a_window_come_oldest_first_with_both_ends_included(history):
    h = history([run("c", 30, cause="x"), run("a", 10), run("b", 20), run("d", 40)])

    assert [r.id for r in h.job_runs("o/r", "test", since=10, until=30)] == ["a", "b", "c"]


def test_a_job_or_cause_never_seen_has_nothing(history):
    h = history([run("a", 10)])

    assert list(h.job_runs("o/r", "deploy", since=0, until=99)) == []
    assert list(h.cause_failures("never", since=0, until=99)) == []


def test_a_causes_failures_span_jobs_and_leave_out_passes_and_other_causes(history):
    h = history(
        [
            run("a", 1, cause="x"),
            run("b", 2, job="lint", cause="x"),
            run("c", 3),
            run("d", 4, cause="y"),
        ]
    )

    assert [r.id for r in h.cause_failures("x", since=0, until=99)] == ["a", "b"]
    assert [r.id for r in h.cause_failures("x", since=1.5, until=99)] == ["b"]
