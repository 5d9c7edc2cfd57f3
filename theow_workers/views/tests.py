"""Tests as the screens show them: each test's history and the flaky ones, from the ledger.

The ledger keeps runs and each test's outcomes in them (``store.testcases``); a
test's history and whether it is flaky is what ``core.testcases.flakiness``
derives from the runs of the last ``WINDOW_DAYS`` on each read. ``OutcomeReads`` is
the port: the SQL ledger answers it, :class:`MemoryOutcomeReads` is its in-memory
twin (``tests/contract/test_outcome_reads.py``). The CLI (``theow tests``) and
``GET /api/v1/tests/flaky`` read these functions and nothing else.

>>> flaky_list(MemoryOutcomeReads(), now=0.0)
[]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from theow_client.jsontypes import JsonObject
from theow_workers.core.history.model import Run
from theow_workers.core.testcases.flakiness import (
    FAILED,
    FLAKY,
    JobTests,
    TestHistory,
    TestOutcome,
    flaky_tests,
    histories,
)

WINDOW_DAYS = 30
SHOWN = 50
MAX_SHOWN = 1000
MAX_NAME = 700


class OutcomeReads(Protocol):
    def job_tests(
        self,
        since: float,
        until: float,
        *,
        repo: str | None = None,
        job: str | None = None,
        test: str | None = None,
    ) -> list[JobTests]:
        """The jobs whose tests failed or were flaky in [since, until] (narrowed to ``repo``,
        ``job``, or one ``test`` by its ``classname::name`` or the name after its ``::``),
        each with its runs in the window, oldest first, the runs among them that came with
        a complete report, and the outcomes of its tests (those of ``test`` only, when
        given), oldest first."""
        ...


class BadTestQuery(ValueError):
    """A value the screens cannot use: one line saying which and why."""


def flaky_list(
    reads: OutcomeReads,
    now: float,
    *,
    repo: str | None = None,
    job: str | None = None,
    limit: int = SHOWN,
) -> list[TestHistory]:
    """The flaky tests of the window, the costliest first (runs failed, then minutes)."""
    if not 1 <= limit <= MAX_SHOWN:
        raise BadTestQuery(f"limit {limit}: use a number from 1 to {MAX_SHOWN:,}")
    jobs = reads.job_tests(_since(now), now, repo=repo, job=job)
    return flaky_tests(jobs)[:limit]


def api_flaky(
    reads: OutcomeReads,
    now: float,
    *,
    repo: str | None = None,
    job: str | None = None,
    limit: int = SHOWN,
) -> JsonObject:
    """``GET /api/v1/tests/flaky``: the list with the filter it was read with."""
    found = flaky_list(reads, now, repo=repo, job=job, limit=limit)
    return {
        "tests": [h.to_dict() for h in found],
        "repo": repo,
        "job": job,
        "window_days": WINDOW_DAYS,
    }


def histories_of(reads: OutcomeReads, name: str, now: float) -> list[TestHistory]:
    """The history of the test called ``name`` in each job it failed in, flaky ones first."""
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise BadTestQuery(f"test name {name[:60]!r}: give its classname::name or its name")
    found = [h for job in reads.job_tests(_since(now), now, test=name) for h in histories(job)]
    return sorted(found, key=lambda h: (not h.flaky, -h.last_seen, h.repo, h.job, h.test))


def _since(now: float) -> float:
    return now - WINDOW_DAYS * 24 * 3600


@dataclass
class MemoryOutcomeReads:
    """The :class:`OutcomeReads` of runs and outcomes held in memory (the SQL ledger's twin)."""

    runs: list[Run] = field(default_factory=list)
    reported: set[str] = field(default_factory=set)
    outcomes: list[tuple[str, str, TestOutcome]] = field(default_factory=list)  # repo, job, it

    def job_tests(
        self,
        since: float,
        until: float,
        *,
        repo: str | None = None,
        job: str | None = None,
        test: str | None = None,
    ) -> list[JobTests]:
        def named(outcome: TestOutcome) -> bool:
            return test is None or outcome.test == test or outcome.test.endswith(f"::{test}")

        kept = [
            (r, j, o)
            for r, j, o in self.outcomes
            if since <= o.at <= until
            and (repo is None or r == repo)
            and (job is None or j == job)
            and named(o)
        ]
        newest: dict[tuple[str, str], float] = {}
        for r, j, o in kept:
            if o.outcome in (FAILED, FLAKY):
                newest[(r, j)] = max(newest.get((r, j), o.at), o.at)
        found = []
        for r, j in sorted(newest, key=lambda key: -newest[key]):
            runs = sorted(
                (
                    run
                    for run in self.runs
                    if (run.repo, run.job) == (r, j) and since <= run.finished_at <= until
                ),
                key=lambda run: run.finished_at,
            )
            outcomes = sorted((o for rr, jj, o in kept if (rr, jj) == (r, j)), key=_at)
            reported = frozenset(run.id for run in runs if run.id in self.reported)
            found.append(JobTests(r, j, runs, reported, outcomes))
        return found


def _at(outcome: TestOutcome) -> float:
    return outcome.at
