"""Each test's history and whether it is flaky (``core.testcases.flakiness``, ``views.tests``).

Given a job's runs and the outcomes its reports gave each test, I expect a test that failed
and passed within a run, or on one commit, or that fails alone now and then between passes,
to be called flaky with the reason; a test a change broke (failing on the change's next push,
on its retry, on the default branch until the fix) not to be; and the flaky ones ranked by
what they cost.
"""

from __future__ import annotations

from collections.abc import Collection

from theow_workers.core.history.model import Outcome, Run
from theow_workers.core.testcases.flakiness import (
    FAILED,
    FLAKY,
    PASSED_AFTER_RERUN,
    JobTests,
    TestHistory,
    TestOutcome,
    histories,
)
from theow_workers.views.tests import MemoryOutcomeReads, flaky_list, histories_of

UPLOAD = "tests.test_upload::test_upload"
TOTAL = "tests.test_cart::test_total"
MINUTE = 60.0


def run(rid: str, at: float, outcome: str = "passed", *, sha: str | None = None,
        branch: str = "main", pr: str | None = None, took: float = 0.0) -> Run:  # fmt: skip
    return Run(
        id=rid, repo="acme/app", job="test", branch=branch, sha=sha or f"sha-{rid}",
        outcome=Outcome(outcome), finished_at=at, cause="tests" if outcome == "failed" else None,
        pr=pr, started_at=at - took if took else None,
    )  # fmt: skip


def job(runs: list[Run], outcomes: list[TestOutcome], unreported: Collection[str] = ()) -> JobTests:
    reported = frozenset(r.id for r in runs if r.id not in unreported)
    return JobTests("acme/app", "test", runs, reported, outcomes)


def failed(test: str, r: Run, message: str = "") -> TestOutcome:
    return TestOutcome(test, r.id, FAILED, r.finished_at, message)


def one(found: JobTests, test: str) -> TestHistory:
    (history,) = [h for h in histories(found) if h.test == test]
    return history


def test_a_test_that_failed_and_passed_within_a_passing_run_is_flaky():
    runs = [run("a", 1), run("b", 2), run("c", 3)]
    found = one(job(runs, [TestOutcome(UPLOAD, "b", FLAKY, 2, "connection reset")]), UPLOAD)
    assert (found.flaky, found.failed, found.flaky_runs) == (True, 0, 1)
    assert found.reason == "failed and passed within run b"
    assert found.flip_rate == 1.0  # passed, flaky, passed: a flaky run counts as a failure


def test_a_test_that_failed_and_passed_on_the_same_commit_is_flaky():
    runs = [run("a", 1), run("b", 2, "failed", sha="s"), run("c", 3, sha="s")]
    found = one(job(runs, [failed(UPLOAD, runs[1])]), UPLOAD)
    assert found.flaky and found.reason == "failed and passed on the same commit s"


def test_a_retry_that_fails_only_other_tests_still_passed_this_one():
    # The second attempt failed, but its report does not name test_upload: it passed there.
    runs = [run("a", 1, "failed", sha="s"), run("b", 2, "failed", sha="s")]
    outcomes = [failed(UPLOAD, runs[0]), failed(TOTAL, runs[0]), failed(TOTAL, runs[1])]
    assert one(job(runs, outcomes), UPLOAD).flaky
    assert not one(job(runs, outcomes), TOTAL).flaky  # failed on both attempts: the code
    # Without a report, the second attempt says nothing of test_upload.
    assert not one(job(runs, outcomes, unreported={"b"}), UPLOAD).flaky


def test_a_test_failing_alone_between_passes_on_two_commits_is_flaky_with_its_flip_rate():
    runs = [run(str(i), i, "failed" if i in (3, 7) else "passed") for i in range(1, 10)]
    found = one(job(runs, [failed(UPLOAD, runs[2]), failed(UPLOAD, runs[6])]), UPLOAD)
    assert found.flaky and found.reason == "failed alone between passes on 2 commits"
    assert found.flip_rate == 0.5  # 4 flips in 9 outcomes
    assert (found.first_seen, found.last_seen, found.passed) == (3, 7, 7)
    # Once alone, the test is not yet flaky: it may have been one commit's mistake.
    assert not one(job(runs[:5], [failed(UPLOAD, runs[2])]), UPLOAD).flaky


def test_a_test_a_change_broke_is_not_flaky_however_often_it_failed():
    # A pull request breaks test_total on its second push, is retried, fails its third push
    # too, then fixes it; main passes throughout.
    change = {"branch": "change-7", "pr": "7"}
    runs = [
        run("m1", 1),
        run("p1", 2, sha="p1", **change),
        run("p2", 3, "failed", sha="p2", **change),
        run("p2r", 4, "failed", sha="p2", **change),
        run("m2", 5),
        run("p3", 6, "failed", sha="p3", **change),
        run("p4", 7, sha="p4", **change),
    ]
    outcomes = [failed(TOTAL, r) for r in runs if r.failed]
    found = one(job(runs, outcomes), TOTAL)
    assert (found.flaky, found.failed) == (False, 3)
    assert found.reason == "failed 3 run(s), last on change-7 at p3"


def test_a_default_branch_broken_for_a_few_commits_then_fixed_is_not_flaky():
    runs = [run(str(i), i, "failed" if 3 <= i <= 5 else "passed") for i in range(1, 8)]
    outcomes = [failed(TOTAL, r) for r in runs if r.failed]
    assert not one(job(runs, outcomes), TOTAL).flaky


def test_a_failed_run_without_a_report_says_nothing_of_a_test():
    # pass, fail, (no report), fail, pass: the test's two failures are one streak, not two lone ones.
    runs = [run("a", 1), run("b", 2, "failed"), run("c", 3, "failed"), run("d", 4, "failed"),
            run("e", 5)]  # fmt: skip
    outcomes = [failed(UPLOAD, runs[1]), failed(UPLOAD, runs[3])]
    assert not one(job(runs, outcomes, unreported={"c"}), UPLOAD).flaky
    # With a report not naming it, the run in between passed it: two lone failures.
    assert one(job(runs, outcomes), UPLOAD).flaky


def test_a_tests_history_shows_its_recent_outcomes_and_what_its_failures_cost():
    runs = [run("a", 1, "failed", sha="s", took=6 * MINUTE), run("b", 2, sha="s"), run("c", 3)]
    outcomes = [
        failed(UPLOAD, runs[0], "ConnectionResetError: [Errno 104]"),
        TestOutcome(UPLOAD, "b", PASSED_AFTER_RERUN, 2),
    ]
    found = one(job(runs, outcomes), UPLOAD)
    assert [(m.run, m.outcome, m.message) for m in found.recent] == [
        ("a", "failed", "ConnectionResetError: [Errno 104]"),
        ("b", "passed-after-rerun", ""),
        ("c", "passed", ""),
    ]
    assert found.minutes_lost == 6.0
    assert found.to_dict(recent=True)["recent"][0]["sha"] == "s"


def test_flaky_tests_are_listed_costliest_first_and_a_test_is_found_by_its_name():
    runs = [run(str(i), i * MINUTE, "failed" if i in (2, 4, 6) else "passed", took=MINUTE)
            for i in range(1, 9)]  # fmt: skip
    reads = MemoryOutcomeReads(runs=runs, reported={r.id for r in runs})
    for r in runs:
        if r.failed:
            reads.outcomes.append(("acme/app", "test", failed(UPLOAD, r)))
    reads.outcomes.append(("acme/app", "test", failed(TOTAL, runs[1])))
    reads.outcomes.append(("acme/app", "test", failed(TOTAL, runs[3])))
    reads.outcomes.append(("acme/app", "test", TestOutcome(TOTAL, "5", FLAKY, 5 * MINUTE)))
    now = 10 * MINUTE

    assert [(h.test, h.failed) for h in flaky_list(reads, now)] == [(UPLOAD, 3), (TOTAL, 2)]
    assert flaky_list(reads, now, repo="acme/other") == []
    (shown,) = histories_of(reads, "test_total", now)  # the name after its ``::``
    assert shown.test == TOTAL and shown.flaky_runs == 1
    assert histories_of(reads, "total", now) == []  # a name is whole, not a fragment
