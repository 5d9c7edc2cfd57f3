"""The failed tests a failure came with: each a cause of its own.

``theow-client run --junit`` sends the tests a JUnit report names as the fact ``tests``
(``theow_client.junit``): ``{"tests": [{classname, name, file, line, message, outcome,
kind, time}], "summary": {...}}``. The worker reads it once more as untrusted input
(:mod:`.fact`: validated, bounded, masked, one line per test) and each failed test then
counts as a cause (:mod:`.causes`): a ``where`` line of its own, a place in the verdict's
list of failed tests, and, instead of the log's error lines, what its fingerprint and its
replay group are keyed on (the test and its masked message).

Rules see the fact as text, one line per test (:func:`.fact.fact_text`), so a rule
``{fact: tests, regex: "::test_upload failed: .*ConnectionError"}`` matches a test by its
name, file, outcome or message.
"""

from theow_workers.core.testcases.causes import (
    cause_basis,
    cause_sample,
    failed_tests,
    where_tests_first,
)
from theow_workers.core.testcases.fact import FACT, TestLine, fact_text, read_tests, with_tests_text

__all__ = [
    "FACT",
    "TestLine",
    "cause_basis",
    "cause_sample",
    "fact_text",
    "failed_tests",
    "read_tests",
    "where_tests_first",
    "with_tests_text",
]
