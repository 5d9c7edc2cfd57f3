"""One contract for the tests' read of the ledger (``views.tests.OutcomeReads``): the in-memory
twin and the SQL ledger (SQLite, PostgreSQL), and what the SQL ledger writes of a run's tests.

Given the same runs and test outcomes, I expect both to name the same flaky tests, the
costliest first, and the same history of one test found by its name; the SQL ledger to note
a test passed after a rerun, write a redelivered report once, and purge tests with their runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import prepared_database
from theow_workers.core.history.model import Outcome, Run
from theow_workers.core.testcases.fact import Counts, TestLine
from theow_workers.core.testcases.flakiness import FAILED, FLAKY, TestOutcome
from theow_workers.views.tests import MemoryOutcomeReads, OutcomeReads, flaky_list, histories_of

DAY = 86400.0
NOW = 1_780_000_000.0
UPLOAD, TOTAL = "tests.test_upload::test_upload", "tests.test_cart::test_total"
# (run, outcome) of each test by (id, finished days ago, passed?, sha)
RUNS = [("r1", 9.0, True, "a"), ("r2", 8.0, False, "b"), ("r3", 7.0, True, "b"),
        ("r4", 6.0, False, "c"), ("r5", 5.0, False, "d"), ("r6", 4.0, True, "e"),
        ("r7", 3.0, True, "f"), ("old", 45.0, False, "z")]  # fmt: skip
TESTS = {"r2": [(UPLOAD, FAILED)], "r4": [(TOTAL, FAILED)], "r5": [(TOTAL, FAILED)],
         "r7": [(UPLOAD, FLAKY)], "old": [(UPLOAD, FAILED)]}  # fmt: skip

Adder = Callable[[Run, list[tuple[str, str]]], None]


def run(rid: str, days_ago: float, passed: bool, sha: str, job: str = "test") -> Run:
    return Run(id=rid, repo="acme/app", job=job, branch="main", sha=sha,
               outcome=Outcome.PASSED if passed else Outcome.FAILED,
               finished_at=NOW - days_ago * DAY, started_at=NOW - days_ago * DAY - 600,
               cause=None if passed else "tests")  # fmt: skip


def line(test: str, outcome: str, number: int = 1) -> TestLine:
    classname = test.partition("::")[0]
    return TestLine(
        number, test, f"{classname.replace('.', '/')}.py", 3, "boom", outcome, "failure"
    )


@pytest.fixture(
    params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]
)
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[OutcomeReads, Adder]]:
    if request.param == "memory":
        memory = MemoryOutcomeReads()

        def remember(r: Run, tests: list[tuple[str, str]]) -> None:
            memory.runs.append(r)
            memory.reported.add(r.id)
            for test, outcome in tests:
                memory.outcomes.append(
                    (r.repo, r.job, TestOutcome(test, r.id, outcome, r.finished_at, "boom"))
                )

        yield memory, remember
        return
    from theow_workers.store.runs import LedgerRun, SqlRuns
    from theow_workers.store.schema import make_engine
    from theow_workers.store.testcases import SqlTestcases

    engine = make_engine(prepared_database(request.param, tmp_path))
    runs, tests = SqlRuns(engine), SqlTestcases(engine)

    def record(r: Run, listed: list[tuple[str, str]]) -> None:
        runs.record(LedgerRun(r, agent="ci-1", source="client"))
        lines = [line(test, outcome, n) for n, (test, outcome) in enumerate(listed, 1)]
        tests.record("ci-1", r, lines, Counts(tests=12, failed=len(lines)))

    yield tests, record
    engine.dispose()


def fill(add: Adder) -> None:
    for rid, days, passed, sha in RUNS:
        add(run(rid, days, passed, sha), TESTS.get(rid, []))


def test_the_flaky_tests_of_the_window_come_costliest_first(ledger):
    reads, add = ledger
    fill(add)

    found = flaky_list(reads, NOW)

    # test_upload failed on b and b passed; flaky in r7. test_total broke c and d: no flake.
    assert [(h.test, h.failed, h.flaky_runs, h.reason) for h in found] == [
        (UPLOAD, 1, 1, "failed and passed within run r7"),
    ]
    assert found[0].minutes_lost == 10.0
    assert (found[0].first_seen, found[0].last_seen) == (NOW - 8 * DAY, NOW - 3 * DAY)
    assert flaky_list(reads, NOW, job="build") == []


def test_one_test_is_found_by_its_whole_name_or_the_name_after_its_class(ledger):
    reads, add = ledger
    fill(add)
    add(run("x1", 2.0, False, "g", job="e2e"), [(TOTAL, FAILED)])

    by_name = histories_of(reads, "test_total", NOW)
    by_whole = histories_of(reads, TOTAL, NOW)

    assert [(h.job, h.failed, h.flaky) for h in by_name] == [("e2e", 1, False), ("test", 2, False)]
    assert by_whole == by_name
    (shown,) = [h for h in by_name if h.job == "test"]
    assert [(m.run, m.outcome) for m in shown.recent] == [
        ("r1", "passed"), ("r2", "passed"), ("r3", "passed"), ("r4", "failed"),
        ("r5", "failed"), ("r6", "passed"), ("r7", "passed"),
    ]  # fmt: skip
    assert histories_of(reads, "tests.test_cart::test_", NOW) == []  # no % or _ wildcards


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def sql(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[object, object]]:
    from theow_workers.store.runs import SqlRuns
    from theow_workers.store.schema import make_engine
    from theow_workers.store.testcases import SqlTestcases

    engine = make_engine(prepared_database(request.param, tmp_path))
    yield SqlRuns(engine), SqlTestcases(engine)
    engine.dispose()


def test_a_run_passing_a_test_that_failed_on_its_commit_notes_it_passed_after_a_rerun(sql):
    from theow_workers.store.runs import LedgerRun

    runs, tests = sql
    first, retry = run("r2", 8.0, False, "b"), run("r3", 7.0, True, "b")
    for r, listed in ((first, [line(UPLOAD, FAILED), line(TOTAL, FLAKY, 2)]), (retry, [])):
        runs.record(LedgerRun(r, agent="ci-1", source="client"))
        tests.record("ci-1", r, listed, None if r is retry else Counts(tests=12, failed=1))

    # Sent again (a redelivery): nothing is written twice.
    assert tests.record("ci-1", first, [line(UPLOAD, FAILED)], Counts(tests=12, failed=1)) == 0
    (found,) = histories_of(tests, UPLOAD, NOW)
    assert [(m.run, m.outcome) for m in found.recent] == [
        ("r2", "failed"), ("r3", "passed-after-rerun"),
    ]  # fmt: skip
    assert found.flaky and found.reason == "failed and passed on the same commit b"


def test_purging_the_runs_purges_their_tests(sql):
    from theow_workers.store.runs import LedgerRun

    runs, tests = sql
    for rid, days, passed, sha in RUNS:
        r = run(rid, days, passed, sha)
        runs.record(LedgerRun(r, agent="ci-1", source="client"))
        listed = [line(t, o) for t, o in TESTS.get(rid, [])]
        tests.record("ci-1", r, listed, Counts(tests=12, failed=len(listed)))
    month_ago = NOW - 30 * DAY  # a window holding the old run alone
    assert [h.failed for h in histories_of(tests, UPLOAD, month_ago)] == [1]

    assert runs.purge(30, now=NOW) == 1

    assert histories_of(tests, UPLOAD, month_ago) == []
    assert [h.failed for h in histories_of(tests, UPLOAD, NOW)] == [1]  # the others are kept
