"""Whose failure it is: the origin decided from the runs around a failed one."""

from __future__ import annotations

from theow_workers.core.history.cause import cause_of
from theow_workers.core.history.classify import decide, revisable
from theow_workers.core.history.memory import MemoryHistory
from theow_workers.core.history.model import Origin, Outcome, Run

HOUR = 3600.0
TYPE_ERROR = "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'."
# A test failing on an assertion: at its verdict nothing yet tells it from the change.
FLAKY = "FAILED tests/test_api.py::test_login - AssertionError: assert 3 == 4"
OUTAGE = 'docker: Error response from daemon: Get "https://ghcr.io/v2/": request canceled'


def run(
    id,
    sha,
    at,
    outcome="passed",
    log=None,
    *,
    repo="o/app",
    job="test",
    pr=None,
    base=None,
    attempt=1,
    branch=None,
):
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


def test_a_pull_request_failing_like_main_at_its_base_is_main_with_the_culprit():
    history = MemoryHistory(
        [
            run("m1", "a", 1),
            run("m2", "b", 2, "failed", TYPE_ERROR),  # main breaks at b
            run("m3", "c", 3, "failed", TYPE_ERROR),
            run("p1", "x", 4, "failed", TYPE_ERROR, pr="7", base="c"),
            run("m4", "d", 9),  # fixed at d
        ]
    )
    failed = history.job_runs("o/app", "test", since=0, until=99 * HOUR)[3]

    decision = decide(failed, history)

    assert decision.origin is Origin.MAIN
    assert (decision.culprit, decision.fixed_by) == ("b", "d")
    main_run = history.job_runs("o/app", "test", since=0, until=99 * HOUR)[1]
    assert decide(main_run, history).culprit == "b"  # the culprit's own run is main too


def test_a_pull_request_whose_base_passes_is_the_change():
    history = MemoryHistory(
        [
            run("m0", "z", 0),
            run("m1", "a", 1),
            run("p1", "x", 2, "failed", TYPE_ERROR, pr="7", base="a"),
        ]
    )
    failed = history.job_runs("o/app", "test", since=0, until=99 * HOUR)[2]

    assert decide(failed, history).origin is Origin.CHANGE


def test_a_failure_whose_retry_passes_becomes_flaky_and_was_not_at_its_verdict():
    history = MemoryHistory(
        [
            run("m0", "z", 0),
            run("m1", "a", 1),
            run("p1", "x", 2, "failed", FLAKY, pr="7", base="a"),
            run("p2", "x", 3, pr="7", base="a", attempt=2),
        ]
    )
    failed, retry = history.job_runs("o/app", "test", since=0, until=99 * HOUR)[2:]

    assert decide(failed, history, until=failed.finished_at).origin is Origin.CHANGE
    assert decide(failed, history).origin is Origin.FLAKY
    assert [r.id for r in revisable(retry, history)] == ["p1"]  # the worker updates it


def test_main_failing_once_then_passing_on_the_next_commit_is_flaky():
    history = MemoryHistory(
        [
            run("m0", "z", 0),
            run("m1", "a", 1, "failed", TYPE_ERROR),  # at its verdict: a break just started
            run("m2", "b", 2),
        ]
    )
    failed = history.job_runs("o/app", "test", since=0, until=99 * HOUR)[1]

    assert decide(failed, history, until=failed.finished_at).origin is Origin.MAIN
    assert decide(failed, history).origin is Origin.FLAKY


def test_many_repositories_failing_the_same_way_within_an_hour_is_infrastructure():
    history = MemoryHistory(
        [run(f"{r}0", f"{r}a", 1, repo=r) for r in ("o/a", "o/b", "o/c")]
        + [
            run(f"{r}1", f"{r}b", 5 + i / 10, "failed", OUTAGE, repo=r)
            for i, r in enumerate(("o/a", "o/b", "o/c"))
        ]
    )
    last = history.cause_failures(cause_of(OUTAGE).key, since=0, until=99 * HOUR)[-1]

    decision = decide(last, history)

    assert decision.origin is Origin.INFRA
    assert "3 repositories" in decision.reason


def test_a_line_saying_the_network_failed_is_infrastructure_even_alone():
    log = (
        "fatal: unable to access 'https://github.com/o/r.git/': Could not resolve host: github.com"
    )
    history = MemoryHistory([run("m0", "z", 0), run("m1", "a", 1, "failed", log)])
    failed = history.job_runs("o/app", "test", since=0, until=99 * HOUR)[1]

    assert decide(failed, history).origin is Origin.INFRA


def test_a_job_with_no_other_run_has_an_unknown_origin():
    history = MemoryHistory([run("p1", "x", 1, "failed", TYPE_ERROR, pr="7", base="a")])
    failed = history.job_runs("o/app", "test", since=0, until=99 * HOUR)[0]

    assert decide(failed, history).origin is Origin.UNKNOWN


def test_error_codes_tell_causes_apart_and_volatile_parts_do_not():
    assert (
        cause_of("error TS2322: Type mismatch").key != cause_of("error TS2345: Type mismatch").key
    )
    assert cause_of("ORA-00942: table or view does not exist").text.startswith("ORA-00942")
    killed = cause_of("Killed\nError: Process completed with exit code 137.")
    assert killed.key != cause_of("Killed\nError: Process completed with exit code 1.").key
    assert (
        cause_of("FAILED t.py::x - took 3.2s at /tmp/a1/b").key
        == cause_of("FAILED t.py::x - took 9.9s at /tmp/zz/b").key
    )
