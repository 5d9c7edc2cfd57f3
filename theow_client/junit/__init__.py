"""Reading the JUnit-style XML reports that test runners write.

Nearly every runner writes one (pytest ``--junitxml``, jest-junit, mocha-junit-reporter,
Maven Surefire, Gradle, gotestsum, cargo-nextest, PHPUnit, Catch2, Karma): ``<testsuites>``
holding ``<testsuite>`` (nested or not) holding ``<testcase>``, each with a ``<failure>``,
``<error>`` or ``<skipped>`` child when it did not simply pass. Surefire and nextest add
``<flakyFailure>``/``<flakyError>`` (it failed, then passed on a rerun) and
``<rerunFailure>``/``<rerunError>`` (it failed on the reruns too). What Theow wants of a
report is the tests that did not pass cleanly, each with where it failed:

>>> import io
>>> report = read_report(io.BytesIO(b'''<testsuite tests="2">
...   <testcase classname="tests.test_calc" name="test_add" file="tests/test_calc.py" line="4">
...     <failure message="assert 3 == 4">tests/test_calc.py:5: AssertionError</failure>
...   </testcase>
...   <testcase classname="tests.test_calc" name="test_sub"/>
... </testsuite>'''), "report.xml")
>>> [(t.name, t.file, t.line, t.outcome, t.kind) for t in report.tests]
[('test_add', 'tests/test_calc.py', 5, 'failed', 'failure')]
>>> report.summary.tests, report.summary.failed
(2, 1)

A test's place is the ``file`` its runner wrote, at the line where its trace shows it
failed in that file (else the runner's ``line``); without a ``file``, the first frame of
its trace that lies in the repository (``theow_client.junit.frames``). A test that failed and passed
in the same reading (Surefire's flaky elements, or the same test written twice, as Gradle's
test-retry plugin does) is ``flaky``, not failed.

Reports come from the build, which runs untrusted code: the parser refuses entity
declarations and external references (``defusedxml``), so a billion-laughs file or one
that reads ``/etc/passwd`` is refused before anything expands; the file's size, the nesting
depth, the cases listed and every text kept are bounded; every text is masked
(``theow_client.redact``). The parse streams (``iterparse``), each test case dropped once
read: 50,000 cases in 20 MB read in under 2 s and about 100 MB (``benchmarks/junit.py``).
"""

from theow_client.junit.reading import read_report, read_reports
from theow_client.junit.report import (
    DEFAULT_LIMITS,
    FACT_LIMITS,
    Report,
    ReportError,
    ReportLimits,
    Summary,
    TestCase,
)
from theow_client.junit.sources import expand, tests_fact

__all__ = [
    "DEFAULT_LIMITS",
    "FACT_LIMITS",
    "Report",
    "ReportError",
    "ReportLimits",
    "Summary",
    "TestCase",
    "expand",
    "read_report",
    "read_reports",
    "tests_fact",
]
