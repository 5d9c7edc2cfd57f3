# ruff: noqa: RUF001  (jest prints U+203A between a suite and its test: the real character)
"""Given a real-looking failed log that holds both the cause and the wrapper
line every failed log has, I expect the rule for the cause to be chosen and its
evidence to point at the cause, with the wrapper reported as `also`."""

from __future__ import annotations

import pytest

from theow_workers.core.resolve.plan import RuleBook, plan
from theow_workers.core.rules.schema import parse_rule


def rule(name: str, pattern: str, generic: bool = False) -> object:
    return parse_rule(
        f"name: {name}\nmode: track\ngeneric: {str(generic).lower()}\n"
        f"when:\n  - fact: log\n    regex: '{pattern}'\n"
    )


WRAPPERS = RuleBook(
    (
        rule(
            "gradle_build_failed", r"There were failing tests\. See the report at: (?P<r>\S+)", True
        ),
        rule("make_error", r"(?m)^make(?:\[\d+\])?: \*\*\* \[[^\]]+\] Error \d+", True),
        rule("npm_lifecycle", r"npm ERR! code ELIFECYCLE", True),
        rule("gha_exit_code", r"##\[error\]Process completed with exit code \d+", True),
        rule(
            "maven_test_failed",
            r"(?m)^\[ERROR\] (?P<test>[\w.]+)\s+Time elapsed: [\d.]+ s\s+<<< FAILURE!",
        ),
        rule(
            "gcc_error",
            r"(?m)^(?P<file>[\w/.-]+\.[ch](?:pp)?):(?P<line>\d+):\d+: error: (?P<message>.+)$",
        ),
        rule("jest_failed", r"(?m)^\s*● (?P<test>.+ › .+)$"),
        rule("python_traceback", r"(?m)^(?P<type>[A-Z]\w+(?:Error|Exception)): (?P<message>.+)$"),
    ),
    "wrappers",
)

MAVEN = """\
[INFO] Running com.example.ledger.BalanceTest
[ERROR] Tests run: 12, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.31 s <<< FAILURE! - in com.example.ledger.BalanceTest
[ERROR] com.example.ledger.BalanceTest.roundsHalfEven  Time elapsed: 0.012 s  <<< FAILURE!
org.opentest4j.AssertionFailedError: expected: <10.02> but was: <10.03>
> Task :ledger:test FAILED
FAILURE: Build failed with an exception.
* What went wrong:
Execution failed for task ':ledger:test'.
> There were failing tests. See the report at: file:///build/reports/tests/test/index.html
"""

GCC = """\
gcc -O2 -Wall -c src/parser.c -o build/parser.o
src/parser.c:88:17: error: 'struct token' has no member named 'kind'
   88 |     if (tok->kind == TOK_EOF)
      |             ^~
make[1]: *** [Makefile:42: build/parser.o] Error 1
make: *** [all] Error 2
"""

JEST = """\
> web@1.0.0 test
> jest --ci

FAIL src/cart.test.js
  ● cart › applies the discount once

    expect(received).toBe(expected) // Object.is equality
    Expected: 90
    Received: 81
Tests:       1 failed, 41 passed, 42 total
npm ERR! code ELIFECYCLE
npm ERR! errno 1
"""

PYTHON = """\
2025-03-01T10:00:01.0000000Z ##[group]Run python -m app.migrate
2025-03-01T10:00:02.0000000Z Traceback (most recent call last):
2025-03-01T10:00:02.0000000Z   File "/app/migrate.py", line 12, in <module>
2025-03-01T10:00:02.0000000Z     connect(settings.DATABASE_URL)
KeyError: 'DATABASE_URL'
2025-03-01T10:00:02.5000000Z ##[error]Process completed with exit code 1.
"""


@pytest.mark.parametrize(
    ("log", "cause", "wrapper", "line"),
    [
        (
            MAVEN,
            "maven_test_failed",
            "gradle_build_failed",
            "com.example.ledger.BalanceTest.roundsHalfEven",
        ),
        (GCC, "gcc_error", "make_error", "src/parser.c:88:17: error: 'struct token'"),
        (JEST, "jest_failed", "npm_lifecycle", "● cart › applies the discount once"),
        (PYTHON, "python_traceback", "gha_exit_code", "KeyError: 'DATABASE_URL'"),
    ],
    ids=["maven-vs-failing-tests", "gcc-vs-make", "jest-vs-npm", "traceback-vs-exit-code"],
)
def test_the_specific_cause_wins_over_the_wrapper_printed_after_it(log, cause, wrapper, line):
    result = plan(WRAPPERS, {"log": log})
    chosen = result.attempts[0]
    assert chosen.rule == cause
    assert line in chosen.match.evidence.text
    assert chosen.match.evidence.line == log[: log.index(line)].count("\n") + 1
    assert wrapper in [c.rule for c in result.attempts[1:]]


def test_a_wrapper_alone_is_still_reported_when_nothing_specific_matched():
    log = "building...\nmake: *** [all] Error 2\n"
    result = plan(WRAPPERS, {"log": log})
    assert [c.rule for c in result.attempts] == ["make_error"]
    assert result.attempts[0].match.evidence.line == 2


def test_among_specific_rules_the_evidence_nearer_the_end_wins():
    log = "src/a.c:1:1: error: first problem\nValueError: later problem\n"
    result = plan(WRAPPERS, {"log": log})
    assert [c.rule for c in result.attempts] == ["python_traceback", "gcc_error"]


def test_rules_read_a_stamped_ci_log_as_the_tool_printed_it():
    # GitHub Actions stamps every line; the rule is written for gcc's own text.
    stamped = "".join(
        f"2025-03-01T10:00:0{i}.1234567Z {line}\n" for i, line in enumerate(GCC.splitlines())
    )
    chosen = plan(WRAPPERS, {"log": stamped}).attempts[0]
    assert chosen.rule == "gcc_error"
    assert chosen.match.evidence.text.startswith("src/parser.c:88:17: error:")
    assert chosen.match.evidence.line == 2
