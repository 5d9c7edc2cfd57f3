"""What a failure's cause is: one key per failed test, joined; the runners' names; the lines
that say a test failed the way flaky tests fail, and those that say the infrastructure did."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from theow_workers.core.history.cause import cause_of, causes_per_test, failing_tests

NAME = st.from_regex(r"tests/test_[a-z]{1,8}\.py::test_[a-z_]{1,12}", fullmatch=True)


@given(st.lists(NAME, min_size=1, max_size=5, unique=True))
def test_a_run_failing_several_tests_has_the_cause_of_each_test_alone_within_its_own(names):
    log = "\n".join(f"FAILED {name} - AssertionError: assert 1 == 2" for name in names)
    alone = sorted(cause_of(f"FAILED {name} - ValueError: other").key for name in names)

    assert list(causes_per_test(cause_of(log).key)) == alone


def test_a_cause_of_one_test_is_keyed_as_before_and_a_cause_of_no_test_is_its_own_part():
    one = cause_of("FAILED tests/test_api.py::test_login - AssertionError")
    compiled = cause_of("src/a.ts(3,7): error TS2322: Type 'string' is not assignable.")

    assert causes_per_test(one.key) == (one.key,)
    assert causes_per_test(compiled.key) == (compiled.key,)


def test_unittests_and_mochas_failed_tests_are_named():
    unittest = (
        "FAIL: test_rounds (tests.test_tax.TaxTests.test_rounds)\n" + "-" * 70 + "\n"
        "AssertionError: 3 != 4\n"
    )
    mocha = (
        "  3 passing (2s)\n  1 failing\n\n  1) CartService\n       applies discount:\n"
        "     AssertionError: expected 3 to equal 4\n"
    )

    assert failing_tests(unittest) == ("test_rounds (tests.test_tax.taxtests.test_rounds)",)
    assert failing_tests(mocha) == ("cartservice applies discount",)
    # RSpec's numbered failures are no mocha titles: the line after them ends with no colon.
    rspec = "  1) Cart adds\n     Failure/Error: expect(x).to eq(3)\n\nFailed examples:\n"
    assert failing_tests(rspec) == ()


def test_a_test_that_timed_out_or_found_no_service_failed_the_way_flaky_tests_fail():
    def failed(message: str) -> str | None:
        return cause_of(f"FAILED tests/test_api.py::test_login - {message}").category

    assert failed("TimeoutError: timed out after 5.0s") == "flaky"
    assert failed("ConnectionRefusedError: [Errno 111] Connection refused") == "flaky"
    assert failed("OperationalError: deadlock detected") == "flaky"
    assert failed("AssertionError: assert 3 == 4") == "test"
    assert failed("KeyError: 'user_id'") == "test"


def test_a_service_waited_for_before_the_tests_ran_does_not_make_them_look_flaky():
    waited = "wait-for-it: postgres:5432: connection refused, retrying\n" * 3
    log = waited + "collected 80 items\n" + "." * 4000 + "\n"
    log += "FAILED tests/test_api.py::test_login - AssertionError: assert 3 == 4\n"

    assert cause_of(log).category == "test"


def test_git_and_runner_failures_the_shipped_rules_call_infrastructure_are_infra_by_their_lines():
    for log in (
        "fatal: early EOF\nfatal: fetch-pack: invalid index-pack output",
        "fatal: unable to access 'https://github.com/o/r/': The requested URL returned error: 502",
        "##[error]The job was not acquired by Runner of type self-hosted even after multiple attempts",
        "Killed\n##[error]Process completed with exit code 137.",
    ):
        assert cause_of(log).category == "infra", log
    # A forge refusing a token is no outage; its status is kept in the cause.
    refused = cause_of("fatal: unable to access 'https://github.com/o/r/': returned error: 403")
    assert refused.category is None
    assert "403" in refused.text
