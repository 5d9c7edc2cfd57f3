"""Each failed test a cause of its own: its ``where`` line, its place in the verdict, its key.

A job of ten failed tests failed for up to ten reasons, and the report says which and
where. So when a failure's ``tests`` fact names failed tests (not flaky ones: they
passed when run again):

- the verdict's ``where`` lines start with them, each the test's line of the fact
  (its ``file:line``, name and message), within the usual cap of three;
- the verdict lists them (:func:`failed_tests`, at most ``MAX_FAILED_TESTS``), for the
  CI's job summary and the pull request's comment;
- the failure's fingerprint and its replay group are keyed on the failed tests and their
  masked messages (:func:`cause_basis`), not on the log: two runs that fail the same
  tests in the same way are one cause, whatever else their logs print.

>>> facts = {"tests": {"tests": [
...     {"classname": "t.test_calc", "name": "test_add", "file": "t/test_calc.py", "line": 5,
...      "message": "assert 3 == 4", "outcome": "failed", "kind": "failure"}]}}
>>> where_tests_first(facts, [Where("log", 9, "E   assert 3 == 4")])
[Where(fact='tests', line=1, text='t/test_calc.py:5: t.test_calc::test_add failed: assert 3 == 4'), Where(fact='log', line=9, text='E   assert 3 == 4')]
>>> cause_basis(facts)
'tests\\nt.test_calc::test_add assert <n> == <n>'
"""

from __future__ import annotations

from collections.abc import Sequence

from theow_client.jsontypes import JsonObject
from theow_client.verdict import MAX_FAILED_TESTS, FailedTest, Where
from theow_workers.core.logs.text import mask_volatile
from theow_workers.core.testcases.fact import FACT, TestLine, read_tests

WHERE_LINES = 3  # as ``core.logs.summary.WHERE_LINES``: the verdict's cap
WHERE_CHARS = 300  # a where line's text, as the log's lines are cut
BASIS_HEADER = "tests"  # a basis of tests never reads as a log's error lines


def failed(facts: JsonObject) -> list[TestLine]:
    """The tests of the fact that failed the run, in the report's order."""
    return [test for test in read_tests(facts) if test.failed]


def where_tests_first(
    facts: JsonObject, where: Sequence[Where], limit: int = WHERE_LINES
) -> list[Where]:
    """The lines to look at: the failed tests first, then ``where``'s lines; at most ``limit``."""
    tests = [Where(FACT, test.number, test.text[:WHERE_CHARS]) for test in failed(facts)]
    shown = {(w.fact, w.line) for w in tests}  # a rule's evidence may be a test's line
    return [*tests, *(w for w in where if (w.fact, w.line) not in shown)][:limit]


def failed_tests(facts: JsonObject) -> tuple[FailedTest, ...]:
    """The failed tests as the verdict lists them: name, place and message, made safe."""
    return tuple(
        FailedTest(test.name, test.file, test.line, test.message)
        for test in failed(facts)[:MAX_FAILED_TESTS]
    )


def cause_basis(facts: JsonObject) -> str:
    """What identifies the failure's cause when tests failed: each test and its masked message.

    One line per failed test, sorted and without repeats, so a report's order and a
    test that failed twice (two reports) change nothing; "" when no test failed.
    """
    keys = sorted({f"{test.name} {mask_volatile(test.message)}".rstrip() for test in failed(facts)})
    return "\n".join([BASIS_HEADER, *keys]) if keys else ""


def cause_sample(facts: JsonObject) -> str:
    """The line a group of such failures is shown by: its first failed test, without its place."""
    tests = failed(facts)
    if not tests:
        return ""
    first = tests[0]
    more = f" (and {len(tests) - 1} more failed tests)" if len(tests) > 1 else ""
    message = f": {first.message}" if first.message else ""
    return f"{first.name} {first.label}{message}"[:WHERE_CHARS] + more
