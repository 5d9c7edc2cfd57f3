"""What a passed run's ledger record says of its tests (``theow_client.ledger.passed_tests``),
and how the worker reads it: counts and flaky tests, bounded on the agent, untrusted on the
worker.

Given a passing run whose reports name flaky tests, I expect its record to carry the report's
counts and at most 50 flaky tests, each with a short message, the rest counted; and the worker
to read a forged record's names as it reads a failure's tests: one masked line each.
"""

from __future__ import annotations

import pytest

from theow_client.ledger import MAX_FLAKY_SENT, passed_tests, run_payload
from theow_client.messages import RunReport
from theow_workers.core.testcases.fact import FACT, Counts, read_counts, read_tests


def report(flaky: int, failed: int = 0) -> dict[str, object]:
    tests = [
        {"classname": "calc.CalcTest", "name": f"retries{i}", "file": None, "line": None,
         "message": "connection reset " + "x" * 400, "outcome": "flaky", "kind": "failure",
         "time": 0.2}
        for i in range(flaky)
    ] + [
        {"classname": "calc.CalcTest", "name": f"broken{i}", "file": None, "line": None,
         "message": "boom", "outcome": "failed", "kind": "failure", "time": 0.1}
        for i in range(failed)
    ]  # fmt: skip
    summary = {"tests": 400, "failed": failed, "errors": 0, "skipped": 3, "flaky": flaky}
    return {"tests": tests, "summary": summary}


def test_a_passed_runs_record_names_its_flaky_tests_within_bounds_and_counts_the_rest():
    sent = passed_tests(report(flaky=60, failed=2))

    assert sent is not None
    names = [t["name"] for t in sent["tests"]]
    assert names == [f"retries{i}" for i in range(MAX_FLAKY_SENT)]  # flaky ones only, 50
    assert sent["summary"] == {"tests": 400, "failed": 2, "errors": 0, "skipped": 3,
                               "flaky": 60, "unlisted": 10}  # fmt: skip
    assert {len(t["message"]) for t in sent["tests"]} == {200}
    assert passed_tests(None) is None


def test_the_record_travels_with_its_tests_and_a_malformed_one_is_refused():
    from theow_client.ci_run import CiRun

    where = CiRun(id="r1", repo="acme/calc", branch="main", sha="a" * 40)
    payload = run_payload(where, job="ci/test", started_at=1.0, finished_at=2.0,
                          tests=report(flaky=1))  # fmt: skip

    read = RunReport.from_wire(payload)
    assert read.tests is not None and read.tests["summary"]["flaky"] == 1
    assert RunReport.from_wire(read.to_wire()) == read
    assert "tests" not in run_payload(where, job="ci/test", started_at=1.0, finished_at=2.0)
    with pytest.raises(ValueError, match='"tests" as a JSON object'):
        RunReport.from_wire({**payload, "tests": ["calc.CalcTest::retries0"]})


def test_the_worker_reads_a_forged_records_tests_as_untrusted_lines():
    forged = {
        "tests": [
            {"classname": "calc\n::error::x", "name": "t password=hunter2", "outcome": "flaky"},
            {"classname": "c", "name": "t2", "outcome": "passed"},  # not an outcome it sends
            {"name": 7, "outcome": "flaky"},
        ],
        "summary": {"tests": 10**12, "failed": 0, "flaky": 1, "skipped": True},
    }

    (line,) = read_tests({FACT: forged})

    assert line.name == "calc ::error::x::t password=***"
    assert "\n" not in line.text and "hunter2" not in line.text
    assert read_counts({FACT: forged}) == Counts(tests=0, failed=0, flaky=1, skipped=0)
