"""The shipped test-failure rules, through the resolver as a worker runs them.

Each case is a log excerpt as the runner prints it (project names made up). The
chosen rule must be the runner's per-test rule, with the failing test captured
from the runner's own failure line and that line as the evidence, even when a
summary or wrapper line ("There are test failures", "npm ERR!", "test result:
FAILED") comes later in the same log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.actions import load_actions
from theow_workers.core.resolve.plan import Candidate, RuleBook, plan
from theow_workers.core.rules.schema import load_rules

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def book() -> RuleBook:
    actions = load_actions(ROOT / "actions")
    ruleset = load_rules(ROOT / "rules", known_actions=frozenset(actions.names()))
    assert not ruleset.errors, "\n".join(str(e) for e in ruleset.errors)
    return RuleBook(ruleset.rules, "test")


def chosen(book: RuleBook, log: str) -> Candidate | None:
    attempts = plan(book, {"log": log}).attempts
    return attempts[0] if attempts else None


MAVEN = """\
[INFO] Running com.example.ledger.BalanceTest
[ERROR] Tests run: 12, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.31 s <<< FAILURE! - in com.example.ledger.BalanceTest
[ERROR] com.example.ledger.BalanceTest.roundsHalfEven  Time elapsed: 0.012 s  <<< FAILURE!
org.opentest4j.AssertionFailedError: expected: <10.02> but was: <10.03>
	at com.example.ledger.BalanceTest.roundsHalfEven(BalanceTest.java:42)

[INFO] Results:
[INFO]
[ERROR] Failures:
[ERROR]   BalanceTest.roundsHalfEven:42 expected: <10.02> but was: <10.03>
[INFO]
[ERROR] Tests run: 184, Failures: 1, Errors: 0, Skipped: 2
[INFO] BUILD FAILURE
[ERROR] Failed to execute goal org.apache.maven.plugins:maven-surefire-plugin:3.2.5:test (default-test) on project ledger: There are test failures.
"""

GRADLE = """\
> Task :service:test

OrderServiceTest > cancelsExpiredOrders() FAILED
    org.opentest4j.AssertionFailedError at OrderServiceTest.java:88

42 tests completed, 1 failed

> Task :service:test FAILED

FAILURE: Build failed with an exception.

* What went wrong:
Execution failed for task ':service:test'.
> There were failing tests. See the report at: file:///home/runner/work/shop/service/build/reports/tests/test/index.html
"""

PYTEST = """\
tests/test_http.py::test_retry_backoff_timing FAILED                     [ 50%]
tests/test_http.py::test_get PASSED                                      [100%]

=================================== FAILURES ===================================
__________________________ test_retry_backoff_timing ___________________________

    def test_retry_backoff_timing():
>       assert elapsed < 1.5
E       assert 1.991855 < 1.5

tests/test_http.py:88: AssertionError
=========================== short test summary info ============================
FAILED tests/test_http.py::test_retry_backoff_timing - assert 1.991855 < 1.5
========================= 1 failed, 1 passed in 2.17s ==========================
"""

GO_ON_ACTIONS = """\
2025-04-14T13:02:10.9000000Z === RUN   TestInvoiceTotals/with_discount
2025-04-14T13:02:10.9000001Z     invoice_test.go:58: got 90.00, want 91.00
2025-04-14T13:02:10.9000002Z --- FAIL: TestInvoiceTotals (0.00s)
2025-04-14T13:02:10.9000003Z     --- FAIL: TestInvoiceTotals/with_discount (0.00s)
2025-04-14T13:02:10.9000004Z FAIL
2025-04-14T13:02:10.9000005Z FAIL	example.com/billing/invoice	0.214s
2025-04-14T13:02:11.0000000Z ##[error]Process completed with exit code 1.
"""

JEST = """\
FAIL src/cart/total.test.ts
  ● cart total \u203a applies percentage coupons

    expect(received).toBe(expected) // Object.is equality

    Expected: 90
    Received: 91

Test Suites: 1 failed, 41 passed, 42 total
Tests:       1 failed, 388 passed, 389 total
npm ERR! code ELIFECYCLE
npm ERR! Test failed.  See above for more details.
"""

MOCHA = """\
  OrderController
    ✓ lists orders
    1) rejects an empty cart

  47 passing (3s)
  1 failing

  1) OrderController
       POST /orders
         rejects an empty cart:
     AssertionError: expected 500 to equal 400
      at Context.<anonymous> (test/orders.test.js:41:12)

npm ERR! Test failed.  See above for more details.
"""

PHPUNIT = """\
PHPUnit 9.6.13 by Sebastian Bergmann and contributors.

...F....S..                                                       11 / 11 (100%)

There was 1 failure:

1) App\\Tests\\Billing\\InvoiceTest::testRoundsHalfEven
Failed asserting that 10.03 is identical to 10.02.

/home/runner/work/shop/tests/Billing/InvoiceTest.php:42

FAILURES!
Tests: 11, Assertions: 30, Failures: 1, Skipped: 1.
"""

RSPEC = """\
Failures:

  1) Invoice#total rounds half even
     Failure/Error: expect(invoice.total).to eq(10.02)

       expected: 10.02
            got: 10.03

Finished in 0.41 seconds (files took 1.2 seconds to load)
12 examples, 1 failure

Failed examples:

rspec ./spec/models/invoice_spec.rb:14 # Invoice#total rounds half even
"""

MINITEST = """\
  1) Failure:
InvoiceTest#test_rounds_half_even [test/models/invoice_test.rb:14]:
Expected: 10.02
  Actual: 10.03

12 runs, 30 assertions, 1 failures, 0 errors, 0 skips
rake aborted!
"""

DOTNET = """\
  Failed Shop.Tests.CartTests.Total_applies_discount [12 ms]
  Error Message:
   Assert.Equal() Failure
Expected: 90
Actual:   91

Failed!  - Failed:     1, Passed:   211, Skipped:     0, Total:   212, Duration: 3 s - Shop.Tests.dll (net8.0)
"""

CARGO = """\
running 3 tests
test codec::tests::roundtrip_small ... ok
test codec::tests::roundtrip_large ... FAILED

failures:

---- codec::tests::roundtrip_large stdout ----
thread 'codec::tests::roundtrip_large' panicked at src/codec.rs:211:9:
assertion `left == right` failed

failures:
    codec::tests::roundtrip_large

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.42s

error: test failed, to rerun pass `--lib`
"""

EXUNIT = """\
  1) test totals round half even (Shop.InvoiceTest)
     test/shop/invoice_test.exs:42
     Assertion with == failed
     code:  assert Invoice.total(invoice) == 10.02
     left:  10.03
     right: 10.02

Finished in 0.4 seconds (0.1s async, 0.3s sync)
12 tests, 1 failure
"""

SCALATEST = """\
[info] CodecSpec:
[info] - decodes a chunked body *** FAILED ***
[info]   "abc" did not equal "abd" (CodecSpec.scala:42)
[info] *** 1 TEST FAILED ***
[error] Failed tests:
[error] 	com.example.CodecSpec
[error] (Test / test) sbt.TestsFailedException: Tests unsuccessful
"""

JENKINS = """\
[2025-04-14T13:02:10.900Z] > Task :service:test
[2025-04-14T13:02:11.120Z] OrderServiceTest > cancelsExpiredOrders() FAILED
[2025-04-14T13:02:11.121Z]     org.opentest4j.AssertionFailedError at OrderServiceTest.java:88
[2025-04-14T13:02:12.500Z] > There were failing tests. See the report at: file:///var/lib/jenkins/workspace/shop/service/build/reports/tests/test/index.html
"""

GTEST = """\
[ RUN      ] Codec.RoundTripLarge
src/codec_test.cc:211: Failure
Expected equality of these values:
  decoded.size()
    Which is: 4095
  4096
[  FAILED  ] Codec.RoundTripLarge (3 ms)
[----------] 1 test from Codec (3 ms total)
[  PASSED  ] 11 tests.
[  FAILED  ] 1 test, listed below:
[  FAILED  ] Codec.RoundTripLarge

 1 FAILED TEST
"""

VITEST = """\
 \u276f src/utils/date.test.ts (12 tests | 1 failed) 18ms
   \u00d7 formatRelative > handles DST switch 9ms

 FAIL  src/utils/date.test.ts > formatRelative > handles DST switch
AssertionError: expected '1 day ago' to be '23 hours ago'

 Test Files  1 failed | 63 passed (64)
      Tests  1 failed | 611 passed (612)
"""

UNITTEST = """\
test_parse_dates (tests.test_parser.ParserTest) ... FAIL

======================================================================
FAIL: test_parse_dates (tests.test_parser.ParserTest)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/home/runner/work/app/tests/test_parser.py", line 30, in test_parse_dates
AssertionError: datetime.date(2024, 3, 31) != datetime.date(2024, 4, 1)

----------------------------------------------------------------------
Ran 120 tests in 1.482s

FAILED (failures=1)
"""

TESTTHAT = """\
\u2500\u2500 Failure (test-parse.R:12:3): parse() keeps empty strings \u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500
`parse("")` not equal to character(0).
Lengths differ: 1 is not 0

[ FAIL 1 | WARN 0 | SKIP 2 | PASS 311 ]
Error: Test failures
Execution halted
"""

CTEST = """\
    Start 3: codec_roundtrip
 3/12 Test  #3: codec_roundtrip ..................***Failed    0.01 sec
    Start 4: pool_acquire
 4/12 Test  #4: pool_acquire .....................   Passed    0.02 sec

92% tests passed, 1 tests failed out of 12

The following tests FAILED:
\t  3 - codec_roundtrip (Failed)
Errors while running CTest
make: *** [Makefile:91: test] Error 8
"""

KARMA = """\
Chrome 75.0.3770 (Mac OS X 10.13.6) ERROR
  Disconnected, because no message in 30000 ms.
Chrome 75.0.3770 (Mac OS X 10.13.6): Executed 0 of 0 DISCONNECTED (30.002 secs / 0 secs)
npm ERR! Test failed.  See above for more details.
"""

COMMON_TEST = """\
- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -
cache_SUITE:evicts_oldest failed on line 88
Reason: {badmatch,{error,timeout}}
- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -
Testing tests.cache_SUITE: TEST COMPLETE, 11 ok, 1 failed of 12 test cases
"""

CASES = [
    (
        "maven",
        MAVEN,
        "junit_failed_tests_results",
        {"test": "BalanceTest.roundsHalfEven", "line": "42"},
        "[ERROR]   BalanceTest.roundsHalfEven:42 expected: <10.02> but was: <10.03>",
    ),
    (
        "gradle",
        GRADLE,
        "java_test_failures",
        {"test": "OrderServiceTest > cancelsExpiredOrders()"},
        "OrderServiceTest > cancelsExpiredOrders() FAILED",
    ),
    (
        "pytest",
        PYTEST,
        "python_test_failures",
        {"test": "test_retry_backoff_timing"},
        "E       assert 1.991855 < 1.5",
    ),
    (
        "go on GitHub Actions",
        GO_ON_ACTIONS,
        "go_test_failures",
        {"test": "TestInvoiceTotals"},
        "--- FAIL: TestInvoiceTotals (0.00s)",  # the CI time stamp is not the tool's text
    ),
    (
        "jest",
        JEST,
        "jest_test_failed",
        {"test": "cart total \u203a applies percentage coupons"},
        "● cart total \u203a applies percentage coupons",
    ),
    (
        "mocha",
        MOCHA,
        "mocha_test_failed",
        {"test": "OrderController", "error": "AssertionError: expected 500 to equal 400"},
        "1) OrderController",
    ),
    (
        "phpunit",
        PHPUNIT,
        "phpunit_test_failed",
        {"test": "App\\Tests\\Billing\\InvoiceTest::testRoundsHalfEven"},
        "1) App\\Tests\\Billing\\InvoiceTest::testRoundsHalfEven",
    ),
    (
        "rspec",
        RSPEC,
        "rspec_example_failed",
        {"test": "Invoice#total rounds half even"},
        "1) Invoice#total rounds half even",
    ),
    (
        "minitest",
        MINITEST,
        "minitest_test_failed",
        {
            "test": "InvoiceTest#test_rounds_half_even",
            "file": "test/models/invoice_test.rb",
            "line": "14",
        },
        "InvoiceTest#test_rounds_half_even [test/models/invoice_test.rb:14]:",
    ),
    (
        "dotnet test",
        DOTNET,
        "dotnet_test_failed",
        {"test": "Shop.Tests.CartTests.Total_applies_discount"},
        "Failed Shop.Tests.CartTests.Total_applies_discount [12 ms]",
    ),
    (
        "cargo test",
        CARGO,
        "cargo_test_failed",
        {"test": "codec::tests::roundtrip_large"},
        "test codec::tests::roundtrip_large ... FAILED",
    ),
    (
        "exunit",
        EXUNIT,
        "exunit_test_failed",
        {
            "test": "totals round half even",
            "module": "Shop.InvoiceTest",
            "file": "test/shop/invoice_test.exs",
            "line": "42",
        },
        "1) test totals round half even (Shop.InvoiceTest)",
    ),
    (
        "scalatest",
        SCALATEST,
        "scalatest_test_failed",
        {"test": "decodes a chunked body"},
        "[info] - decodes a chunked body *** FAILED ***",
    ),
    (
        "gradle under Jenkins' timestamper",
        JENKINS,
        "java_test_failures",
        {"test": "OrderServiceTest > cancelsExpiredOrders()"},
        "OrderServiceTest > cancelsExpiredOrders() FAILED",  # without the timestamper's stamp
    ),
    (
        "vitest",
        VITEST,
        "vitest_test_failed",
        {"file": "src/utils/date.test.ts", "test": "formatRelative > handles DST switch"},
        "FAIL  src/utils/date.test.ts > formatRelative > handles DST switch",
    ),
    (
        "unittest",
        UNITTEST,
        "python_unittest_failed",
        {"kind": "FAIL", "test": "test_parse_dates", "where": "tests.test_parser.ParserTest"},
        "FAIL: test_parse_dates (tests.test_parser.ParserTest)",
    ),
    (
        "testthat",
        TESTTHAT,
        "testthat_test_failed",
        {"file": "test-parse.R", "line": "12", "test": "parse() keeps empty strings"},
        "\u2500\u2500 Failure (test-parse.R:12:3): parse() keeps empty strings \u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500",
    ),
    (
        "ctest",
        CTEST,
        "ctest_test_failed",
        {"test": "codec_roundtrip", "status": "Failed"},
        "3/12 Test  #3: codec_roundtrip ..................***Failed    0.01 sec",
    ),
    (
        "karma disconnect",
        KARMA,
        "karma_browser_disconnected",
        {"browser": "Chrome 75.0.3770 (Mac OS X 10.13.6)", "ms": "30000"},
        "Chrome 75.0.3770 (Mac OS X 10.13.6) ERROR",
    ),
    (
        "common test",
        COMMON_TEST,
        "erlang_common_test_failed",
        {
            "suite": "cache_SUITE",
            "test": "evicts_oldest",
            "line": "88",
            "reason": "{badmatch,{error,timeout}}",
        },
        "cache_SUITE:evicts_oldest failed on line 88",
    ),
    (
        "gtest",
        GTEST,
        "gtest_test_failed",
        {"test": "Codec.RoundTripLarge"},
        "[  FAILED  ] Codec.RoundTripLarge (3 ms)",
    ),
]


@pytest.mark.parametrize(
    ("log", "rule", "params", "evidence"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_runners_failure_line_names_the_failing_test(book, log, rule, params, evidence):
    winner = chosen(book, log)
    assert winner is not None and winner.rule == rule, winner and winner.rule
    assert winner.match is not None and winner.match.evidence is not None
    captured = winner.match.captures.named
    assert {k: captured.get(k) for k in params} == params
    assert winner.match.evidence.text == evidence


@pytest.mark.parametrize(
    ("log", "generic"),
    [
        (MAVEN, "junit_test_task_failed"),
        (GRADLE, "junit_test_task_failed"),
        (PYTEST, "pytest_failed_summary"),
        (JEST, "js_test_failures"),
        (CARGO, "rust_test_failures"),
    ],
    ids=["maven", "gradle", "pytest", "jest", "cargo"],
)
def test_the_specific_rule_beats_the_summary_that_comes_after_it(book, log, generic):
    attempts = [c.rule for c in plan(book, {"log": log}).attempts]
    assert generic in attempts  # the wrapper did match, later in the log...
    assert attempts[0] != generic  # ...and still lost to the per-test line
    assert attempts.index(generic) > 0


def test_a_summary_alone_still_says_tests_failed(book):
    winner = chosen(
        book,
        "collected 651 items\n...\n=================== 1 failed, 650 passed in 72.17s ===================\n",
    )
    assert winner is not None and winner.rule == "pytest_failed_summary"
    assert winner.match is not None and winner.match.captures.named["failed"] == "1"


@pytest.mark.parametrize(
    "log",
    [
        "PASS src/cart/total.test.ts\n  ● Console\n\n    console.log\n      starting server\n\nTests:       389 passed, 389 total\n",
        "There was 1 risky test:\n\n1) App\\Tests\\InvoiceTest::testNothing\nThis test did not perform any assertions\n\nOK, but incomplete, skipped, or risky tests!\n",
        "test codec::tests::roundtrip_small ... ok\n\ntest result: ok. 57 passed; 0 failed; 0 ignored\n",
        "--- PASS: TestInvoiceTotals (0.00s)\nPASS\nok  \texample.com/billing/invoice\t0.214s\n",
        "ok 1 install\nnot ok 2 - windows paths # TODO not yet ported\n1..2\n",
    ],
    ids=[
        "jest console output",
        "phpunit risky test",
        "cargo all passed",
        "go all passed",
        "tap todo",
    ],
)
def test_passing_runs_that_look_alike_match_no_test_rule(book, log):
    winner = chosen(book, log)
    assert winner is None, (winner.rule, winner.match and winner.match.evidence)
