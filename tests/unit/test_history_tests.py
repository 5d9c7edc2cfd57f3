"""Failures judged per failing test, known flaky tests, long breaks and commits run out of order."""

from __future__ import annotations

from theow_workers.core.history.cause import cause_of, failing_tests
from theow_workers.core.history.classify import decide
from theow_workers.core.history.memory import MemoryHistory
from theow_workers.core.history.model import Origin, Outcome, Run

HOUR = 3600.0
DAY = 24 * HOUR
TYPE_ERROR = "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'."


def login(message: str) -> str:
    return f"FAILED tests/test_api.py::test_login - {message}\n=== 1 failed, 80 passed in 9.1s ==="


def run(id, sha, at, outcome="passed", log=None, *, pr=None, base=None, attempt=1):
    cause = cause_of(log) if log else None
    return Run(
        id=id,
        repo="o/app",
        job="test",
        branch="main" if pr is None else f"pr-{pr}",
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
    return next(r for r in history.job_runs("o/app", "test", since=0, until=1e9) if r.id == id)


def test_one_test_failing_with_other_messages_is_one_cause_and_another_test_is_another():
    timeout = cause_of(login("TimeoutError: timed out after 5.0s"))
    refused = cause_of(login("ConnectionRefusedError: [Errno 111] Connection refused"))
    other = cause_of(login("TimeoutError: timed out after 5.0s").replace("login", "logout"))

    assert timeout.key == refused.key
    assert timeout.key != other.key
    assert timeout.tests == ("tests/test_api.py::test_login",)


def test_the_test_runners_names_are_read_from_their_own_lines():
    log = "\n".join(
        [
            "2026-02-03T10:00:01.1234567Z   \u25cf Cart \u203a applies coupon",
            "--- FAIL: TestLedger (0.31s)",
            "    --- FAIL: TestLedger/rounds_down (0.01s)",
            "OrderServiceTest > refundsPartially() FAILED",
            "[ERROR] com.acme.FooTest.bar -- Time elapsed: 0.2 s <<< FAILURE!",
            "thread 'tests::parses' panicked at src/lib.rs:3:5:",
            "  ● Test suite failed to run",
        ]
    )

    assert failing_tests(log) == (
        "cart \u203a applies coupon",
        "com.acme.footest.bar",
        "orderservicetest > refundspartially()",
        "testledger/rounds_down",
        "tests::parses",
    )


def test_a_tests_own_refused_connection_is_not_infrastructure():
    # The test's own, failing the way flaky tests fail; not the infrastructure's.
    assert cause_of(login("ConnectionResetError: Connection reset by peer")).category == "flaky"
    assert cause_of("Error: connect ECONNRESET registry.npmjs.org").category == "infra"


def test_the_forges_runner_and_service_container_failures_are_infrastructure():
    lost = "##[error]The hosted runner encountered an error while running your job."
    container = "##[error]Failed to initialize container postgres:16"

    assert cause_of(lost).category == cause_of(container).category == "infra"


def test_a_line_that_only_counts_the_errors_is_not_the_cause():
    def eslint(rule: str) -> str:
        return f"src/a.ts\n  3:7  error  'x' is defined but never used  {rule}\n\n✖ 1 problem (1 error, 0 warnings)\n"

    assert cause_of(eslint("no-unused-vars")).key != cause_of(eslint("eqeqeq")).key
    assert "no-unused-vars" in cause_of(eslint("no-unused-vars")).text


def test_a_test_failing_in_three_unrelated_changes_is_flaky_even_where_its_retry_failed_too():
    flaky = login("TimeoutError: timed out after 5.0s")
    history = MemoryHistory(
        [
            run("m0", "z", 0),
            run("a1", "x1", 1, "failed", flaky, pr="1", base="z"),
            run("a2", "x2", 2, pr="1", base="z"),
            run("b1", "y1", 3, "failed", flaky, pr="2", base="z"),
            run("b2", "y2", 4, pr="2", base="z"),
            run("c1", "w1", 5, "failed", flaky, pr="3", base="z"),
            run("c2", "w1", 6, "failed", flaky, pr="3", base="z", attempt=2),
        ]
    )

    decision = decide(find(history, "c2"), history)

    assert decision.origin is Origin.FLAKY
    assert "unrelated changes" in decision.reason


def test_a_known_flaky_test_failing_on_two_main_commits_then_passing_is_flaky_not_a_break():
    flaky = login("AssertionError: assert 3 == 4")
    runs = [run("m0", "z", 0)]
    runs += [run(f"p{n}", f"x{n}", 1 + n, "failed", flaky, pr=str(n), base="z") for n in range(3)]
    runs += [
        run("m1", "a", 10, "failed", flaky),
        run("m2", "b", 11, "failed", flaky),
        run("m3", "c", 12),
    ]
    history = MemoryHistory(runs)

    assert decide(find(history, "m2"), history).origin is Origin.FLAKY


def test_a_compile_error_on_two_main_commits_then_passing_stays_a_break():
    runs = [run("m0", "z", 0)]
    runs += [run(f"p{n}", f"x{n}", 1 + n, "failed", TYPE_ERROR, pr=str(n)) for n in range(3)]
    runs += [
        run("m1", "a", 10, "failed", TYPE_ERROR),
        run("m2", "b", 11, "failed", TYPE_ERROR),
        run("m3", "c", 12),
    ]
    history = MemoryHistory(runs)

    decision = decide(find(history, "m2"), history)

    assert (decision.origin, decision.culprit, decision.fixed_by) == (Origin.MAIN, "a", "c")


def test_a_named_test_failing_first_on_main_is_flaky_at_its_verdict_and_main_once_it_fails_again():
    broken = login("KeyError: 'user_id'")
    history = MemoryHistory(
        [
            run("m0", "z", 0),
            run("m1", "a", 1, "failed", broken),
            run("m2", "b", 2, "failed", broken),
        ]
    )
    first = find(history, "m1")

    assert decide(first, history, until=first.finished_at).origin is Origin.FLAKY
    final = decide(first, history)
    assert (final.origin, final.culprit) == (Origin.MAIN, "a")


def test_a_main_broken_for_longer_than_the_window_keeps_its_first_commit_as_culprit():
    broken = login("KeyError: 'user_id'")
    runs = [run("m0", "z", 0)]
    runs += [run(f"m{d}", f"s{d}", d * 24, "failed", broken) for d in range(1, 40)]
    history = MemoryHistory(runs)

    decision = decide(find(history, "m39"), history)

    assert (decision.origin, decision.culprit) == (Origin.MAIN, "s1")


def test_a_commit_passing_minutes_after_a_failing_one_is_taken_as_the_older_one():
    # a and b were pushed minutes apart; a's job ran longer and finished after b's failed.
    history = MemoryHistory(
        [
            run("m0", "z", 0),
            run("m1", "b", 5.0, "failed", TYPE_ERROR),
            run("m2", "a", 5.1),
            run("m3", "c", 9.0, "failed", TYPE_ERROR),
        ]
    )

    decision = decide(find(history, "m3"), history)

    assert (decision.origin, decision.culprit) == (Origin.MAIN, "b")
