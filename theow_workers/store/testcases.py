"""Each test's outcomes in the ledger's runs, in SQL: written cheaply, read per job.

A run that came with a JUnit report is one ``test_reports`` row (its counts) and
one ``test_outcomes`` row per test that did not simply pass: ``failed``, ``flaky``
(it failed, then passed on a rerun within the run). A passed test is no row: the
report's counts say it ran, and every test it does not list passed. A run that
passes a test which failed on the same commit in an earlier run of its job
(a retry) writes that test's ``passed-after-rerun``, so a test's own rows tell its
story. Keyed by the sending agent and the run's id, as ``runs`` is: a redelivered
report writes nothing twice. Rows older than the runs' retention go with them
(``SqlRuns.purge``, ``theow runs purge``).

The screens' read (``views.tests.OutcomeReads``) is one range read per job on the
indexed ``(repo, job, at)``: the job's runs from the ledger, the runs that came
with a complete report, and its tests' outcomes, for ``core.testcases.flakiness``.

>>> tests = SqlTestcases(make_engine("sqlite://"))  # doctest: +SKIP
>>> tests.record("ci-1", run, lines, Counts(tests=240, failed=1))  # doctest: +SKIP
1
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from theow_workers.core.history.model import Run
from theow_workers.core.testcases.fact import Counts, TestLine
from theow_workers.core.testcases.flakiness import (
    FAILED,
    FLAKY,
    PASSED_AFTER_RERUN,
    JobTests,
    TestOutcome,
)
from theow_workers.store.runs import SqlRuns
from theow_workers.store.schema import TestOutcomeRow, TestReportRow

MESSAGE_CHARS = 300
TEST_CHARS = 700
MAX_JOBS = 200  # jobs one read answers for, those with the newest outcomes first
MAX_OUTCOMES = 200_000  # outcomes one job's read holds, the newest


class SqlTestcases:
    """The tests' outcomes on one engine (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.runs = SqlRuns(engine)
        self._dialect: Any = postgresql if engine.dialect.name == "postgresql" else sqlite

    # Writing

    def record(self, agent: str, run: Run, tests: Sequence[TestLine], counts: Counts | None) -> int:
        """Keep what a run's report said of its tests (``counts`` None: the run came without
        one), and the tests it passed again after they failed on its commit; how many
        outcome rows are new."""
        failed = {t.name[:TEST_CHARS] for t in tests if t.outcome == FAILED}
        rows: dict[str, dict[str, object]] = {}
        for test in tests:
            name = test.name[:TEST_CHARS]
            if test.outcome not in (FAILED, FLAKY) or (name in rows and test.outcome == FLAKY):
                continue  # a test failed in one report and flaky in another: failed
            rows[name] = self._row(agent, run, name, test.outcome, test.message)
        with self.engine.begin() as conn:
            if counts is not None:
                conn.execute(
                    self._dialect.insert(TestReportRow)
                    .values(
                        agent=agent,
                        run_id=run.id,
                        repo=run.repo,
                        job=run.job,
                        at=run.finished_at,
                        **{k: getattr(counts, k) for k in _COUNTS},
                    )
                    .on_conflict_do_nothing(index_elements=["agent", "run_id"])
                )
            if counts is not None or not run.failed:  # what this run passed is known
                for name in self._failed_before(conn, run) - failed:
                    rows.setdefault(name, self._row(agent, run, name, PASSED_AFTER_RERUN, ""))
            if not rows:
                return 0
            done = conn.execute(
                self._dialect.insert(TestOutcomeRow)
                .values(list(rows.values()))
                .on_conflict_do_nothing(index_elements=["agent", "run_id", "test"])
                .returning(TestOutcomeRow.test)
            )
            return len(done.all())

    @staticmethod
    def _row(agent: str, run: Run, name: str, outcome: str, message: str) -> dict[str, object]:
        return {
            "agent": agent,
            "run_id": run.id,
            "test": name,
            "repo": run.repo,
            "job": run.job,
            "sha": run.sha,
            "branch": run.branch,
            "outcome": outcome,
            "at": run.finished_at,
            "message": message[:MESSAGE_CHARS] or None,
        }

    @staticmethod
    def _failed_before(conn: Any, run: Run) -> set[str]:
        """The tests that failed the job on the run's commit in its earlier runs."""
        query = (
            select(TestOutcomeRow.test)
            .where(TestOutcomeRow.repo == run.repo, TestOutcomeRow.job == run.job)
            .where(TestOutcomeRow.sha == run.sha, TestOutcomeRow.outcome == FAILED)
            .where(TestOutcomeRow.run_id != run.id, TestOutcomeRow.at <= run.finished_at)
            .distinct()
        )
        return {str(name) for name in conn.execute(query).scalars()}

    # Reading (views.tests.OutcomeReads)

    def job_tests(
        self,
        since: float,
        until: float,
        *,
        repo: str | None = None,
        job: str | None = None,
        test: str | None = None,
    ) -> list[JobTests]:
        """The jobs whose tests failed or were flaky in [since, until] (only ``repo``'s,
        ``job``'s, those of ``test``: a ``classname::name``, or a name after its ``::``),
        each with its runs, its reported runs and those tests' outcomes."""
        window = (TestOutcomeRow.at >= since, TestOutcomeRow.at <= until)
        wanted = [*window, TestOutcomeRow.outcome.in_((FAILED, FLAKY))]
        if repo is not None:
            wanted.append(TestOutcomeRow.repo == repo)
        if job is not None:
            wanted.append(TestOutcomeRow.job == job)
        named = _named(test) if test is not None else None
        if named is not None:
            wanted.append(named)
        with self.engine.connect() as conn:
            jobs = conn.execute(
                select(TestOutcomeRow.repo, TestOutcomeRow.job)
                .where(*wanted)
                .group_by(TestOutcomeRow.repo, TestOutcomeRow.job)
                .order_by(func.max(TestOutcomeRow.at).desc())
                .limit(MAX_JOBS)
            ).all()
            found = []
            for job_repo, job_name in jobs:
                outcomes = conn.execute(
                    select(*_OUTCOME_COLUMNS)
                    .where(TestOutcomeRow.repo == job_repo, TestOutcomeRow.job == job_name)
                    .where(*window, *([named] if named is not None else []))
                    .order_by(TestOutcomeRow.at.desc())
                    .limit(MAX_OUTCOMES)
                ).all()
                reported = conn.execute(
                    select(TestReportRow.run_id).where(
                        TestReportRow.repo == job_repo,
                        TestReportRow.job == job_name,
                        TestReportRow.at >= since,
                        TestReportRow.at <= until,
                        TestReportRow.unlisted == 0,
                    )
                ).scalars()
                found.append((job_repo, job_name, frozenset(reported), outcomes))
        return [
            JobTests(
                repo=job_repo,
                job=job_name,
                runs=self.runs.job_runs(job_repo, job_name, since=since, until=until),
                reported=reported,
                outcomes=[_outcome(row) for row in reversed(outcomes)],
            )
            for job_repo, job_name, reported, outcomes in found
        ]


_COUNTS = ("tests", "failed", "errors", "skipped", "flaky", "unlisted")
_OUTCOME_COLUMNS = (
    TestOutcomeRow.test,
    TestOutcomeRow.run_id,
    TestOutcomeRow.outcome,
    TestOutcomeRow.at,
    TestOutcomeRow.message,
)


def _named(test: str) -> Any:
    """A test by its whole ``classname::name``, or by the name after its ``::``."""
    escaped = test.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return or_(TestOutcomeRow.test == test, TestOutcomeRow.test.like(f"%::{escaped}", escape="\\"))


def _outcome(row: Sequence[Any]) -> TestOutcome:
    test, run_id, outcome, at, message = row
    return TestOutcome(test, run_id, outcome, at, message or "")
