"""Origins at the verdict: the signs a failure gives before anything later is known (how a
test failed, the other jobs of its commit, the tests it failed beside others), and what
revises them."""

from __future__ import annotations

from dataclasses import replace

from theow_workers.core.history.cause import cause_of
from theow_workers.core.history.classify import decide, revisable
from theow_workers.core.history.memory import MemoryHistory
from theow_workers.core.history.model import Origin, Outcome, Run

HOUR = 3600.0
TIMEOUT = "FAILED tests/test_api.py::test_login - TimeoutError: timed out after 5.0s"
WRONG = "FAILED tests/test_api.py::test_login - AssertionError: assert 3 == 4"
OTHER = "FAILED tests/test_api.py::test_logout - AssertionError: assert 1 == 0"
LINT = "src/app.py:3:1: F401 `os` imported but unused\nFound 1 error."


def run(id, sha, at, outcome="passed", log=None, *, pr=None, base=None, job="test",
        branch=None, repo="o/app", attempt=1):  # fmt: skip
    cause = cause_of(log) if log else None
    return Run(
        id=id,
        repo=repo,
        job=job,
        branch=branch or ("main" if pr is None else f"pr-{pr}"),
        sha=sha,
        outcome=Outcome(outcome),
        finished_at=at * HOUR,
        cause=cause.key if cause else None,
        category=cause.category if cause else None,
        pr=pr,
        base_sha=base,
        attempt=attempt,
    )


def find(history, id):
    return next(
        r
        for job in ("test", "test (3.11)", "test (3.12)", "test (3.13)", "lint", "build")
        for r in history.job_runs("o/app", job, since=0, until=1e9)
        if r.id == id
    )


def at_verdict(history, id):
    failed = find(history, id)
    return decide(failed, history, until=failed.finished_at)


def test_a_test_timing_out_in_a_pull_request_is_flaky_at_its_verdict_and_change_once_it_repeats():
    history = MemoryHistory(
        [
            run("m0", "z", 0),
            run("p1", "x1", 1, "failed", TIMEOUT, pr="7", base="z"),
            run("p2", "x2", 2, "failed", TIMEOUT, pr="7", base="z"),  # the next push: again
        ]
    )

    assert at_verdict(history, "p1").origin is Origin.FLAKY
    assert at_verdict(history, "p2").origin is Origin.CHANGE
    assert decide(find(history, "p1"), history).origin is Origin.CHANGE


def test_a_test_failing_an_assertion_in_a_pull_request_is_its_change_at_its_verdict():
    history = MemoryHistory([run("m0", "z", 0), run("p1", "x1", 1, "failed", WRONG, pr="7")])

    assert at_verdict(history, "p1").origin is Origin.CHANGE


def test_a_test_failing_in_every_job_of_a_matrix_is_the_code_not_flaky_and_not_the_runners():
    legs = ("test (3.11)", "test (3.12)", "test (3.13)")
    runs = [run(f"m{i}", "z", 0, job=leg) for i, leg in enumerate(legs)]
    runs += [
        run(f"p{i}", "x1", 1 + i / 60, "failed", TIMEOUT, pr="7", base="z", job=leg)
        for i, leg in enumerate(legs)
    ]
    history = MemoryHistory(runs)

    assert at_verdict(history, "p0").origin is Origin.FLAKY  # alone yet: the others still run
    for i in range(3):
        assert decide(find(history, f"p{i}"), history).origin is Origin.CHANGE
    assert [r.id for r in revisable(find(history, "p1"), history)] == ["p0"]


def test_one_cause_failing_three_jobs_of_two_changes_on_two_bases_at_once_is_the_runners():
    outage = "Error: something the runner printed that no rule knows"
    runs = [run(f"m{j}", "z", 0, job=job) for j, job in enumerate(("test", "lint", "build"))]
    runs += [
        run("a", "x1", 5.0, "failed", outage, pr="7", base="z", job="test"),
        run("b", "x1", 5.1, "failed", outage, pr="7", base="z", job="lint"),
        run("c", "y1", 5.2, "failed", outage, pr="8", base="z", job="build"),
    ]
    one_change = MemoryHistory([*runs[:5], replace(runs[5], pr="7", sha="x1", branch="pr-7")])
    on_one_base = MemoryHistory(runs)
    on_two_bases = MemoryHistory([*runs[:5], replace(runs[5], base_sha="y")])

    assert decide(find(on_two_bases, "c"), on_two_bases).origin is Origin.INFRA
    assert decide(find(one_change, "c"), one_change).origin is not Origin.INFRA
    # Two changes on one base failing alike carry its code: the base is broken, not the runners.
    assert decide(find(on_one_base, "c"), on_one_base).origin is not Origin.INFRA


def test_a_named_test_failing_first_on_main_in_two_jobs_of_its_commit_is_a_break_at_its_verdict():
    legs = ("test (3.11)", "test (3.12)")
    runs = [run(f"m{i}", "z", 0, job=leg) for i, leg in enumerate(legs)]
    runs += [run(f"b{i}", "a", 1 + i / 60, "failed", WRONG, job=leg) for i, leg in enumerate(legs)]
    history = MemoryHistory(runs)

    assert at_verdict(history, "b0").origin is Origin.FLAKY  # one job yet: may be a flake
    decision = at_verdict(history, "b1")
    assert (decision.origin, decision.culprit) == (Origin.MAIN, "a")


def test_a_known_flaky_test_failing_on_two_main_commits_is_flaky_already_and_main_on_a_third():
    runs = [run("m0", "z", 0)]
    runs += [run(f"p{n}", f"x{n}", 1 + n, "failed", WRONG, pr=str(n), base="z") for n in range(3)]
    runs += [run(f"m{n}", f"s{n}", 10 + n, "failed", WRONG) for n in (1, 2, 3)]
    history = MemoryHistory(runs)

    assert at_verdict(history, "m2").origin is Origin.FLAKY
    decision = at_verdict(history, "m3")
    assert (decision.origin, decision.culprit) == (Origin.MAIN, "s1")


def test_a_test_known_flaky_from_runs_failing_it_beside_others_is_flaky_alone():
    both = WRONG + "\n" + OTHER
    history = MemoryHistory(
        [
            run("m0", "z", 0),
            run("a", "x1", 1, "failed", both, pr="1", base="z"),
            run("a2", "x2", 2, pr="1", base="z"),
            run("b", "y1", 3, "failed", WRONG, pr="2", base="z"),
        ]
    )

    assert at_verdict(history, "b").origin is Origin.FLAKY
    assert [r.id for r in revisable(find(history, "b"), history)] == ["a"]


def test_a_linters_message_in_two_pull_requests_is_two_changes_and_in_three_is_flaky():
    runs = [run("m0", "z", 0, job="lint")]
    runs += [run(f"p{n}", f"x{n}", 1 + n, "failed", LINT, pr=str(n), base="z", job="lint")
             for n in range(3)]  # fmt: skip
    history = MemoryHistory(runs)

    assert at_verdict(history, "p1").origin is Origin.CHANGE
    assert at_verdict(history, "p2").origin is Origin.FLAKY


def test_a_merge_queues_run_belongs_to_the_pull_request_it_tests():
    queue = "gh-readonly-queue/main/pr-7-" + "ab" * 20
    history = MemoryHistory(
        [
            run("m0", "z", 0, job="lint"),
            run("p1", "x1", 1, "failed", LINT, pr="7", base="z", job="lint"),
            run("p2", "x2", 2, pr="7", base="z", job="lint"),
            run("q1", "q", 3, "failed", LINT, branch=queue, base="z", job="lint"),
            run("o1", "y1", 4, "failed", LINT, pr="8", base="z", job="lint"),
        ]
    )

    # Pull request 7 failed twice (its push, its queue run), 8 once: two changes, not three.
    assert at_verdict(history, "o1").origin is Origin.CHANGE


def test_repositories_broken_the_same_way_on_their_master_branches_are_no_outage():
    broken = "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'."
    runs = []
    for n, repo in enumerate(("o/app", "o/b", "o/c", "o/d")):
        branch = "main" if repo == "o/app" else "master"
        runs += [
            run(f"{repo}0", f"{n}z", 0, repo=repo, branch=branch),
            run(f"{repo}1", f"{n}a", 1 + n / 10, "failed", broken, repo=repo, branch=branch),
            run(f"{repo}2", f"{n}b", 1.5 + n / 10, "failed", broken, repo=repo, branch=branch),
        ]
    history = MemoryHistory(runs)
    failed = find(history, "o/app2")

    decision = decide(failed, history, branches=dict.fromkeys(("o/b", "o/c", "o/d"), "master"))

    assert (decision.origin, decision.culprit) == (Origin.MAIN, "0a")
    assert decide(failed, history).origin is Origin.INFRA  # their branches unknown: an outage
