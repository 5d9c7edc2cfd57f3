"""`theow-client run --junit`: a failing test run's report travels with its failure, through
a real worker, and is kept; a report an earlier build left is not sent."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from theow_client.cli import main
from theow_workers.store.schema import FailureRow

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "junit"

RUN = ["run", "--junit", "reports/*.xml", "--wait", "--wait-timeout", "60", "--json"]
# A pytest run that fails: prints its summary and writes the report it wrote here for real
# (tests/fixtures/junit/pytest), as the command would with --junitxml.
FAILING_RUN = """
mkdir -p reports
cp {report} reports/pytest.xml
echo 'FAILED tests/test_calc.py::test_adds_negative - assert -2 == -3'
echo '==== 4 failed, 1 error, 2 passed, 1 skipped in 0.12s ===='
exit 1
"""


def test_the_failed_tests_of_a_run_are_sent_with_its_failure_and_kept(
    fleet, tmp_path, monkeypatch, capsys
):
    fleet.start_worker()
    checkout = tmp_path / "calc"
    shutil.copytree(FIXTURES / "pytest", checkout)
    monkeypatch.chdir(checkout)
    script = FAILING_RUN.format(report=checkout / "report.xml")

    code = main([*RUN, "--", "sh", "-c", script])

    assert code == 1  # the command's own exit code
    err = capsys.readouterr().err
    (verdict,) = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert verdict["status"] == "unmatched"  # a verdict: the worker took the facts as they came
    with fleet.store().session() as s:
        (failure,) = s.execute(select(FailureRow)).scalars()
    tests = failure.facts["tests"]
    assert tests["summary"] == {"tests": 8, "failed": 4, "errors": 1, "skipped": 1, "flaky": 0}
    assert [(t["name"], t["file"], t["line"]) for t in tests["tests"]] == [
        ("test_adds_negative", "tests/test_calc.py", 12),
        ("test_ratio_of_zero", "tests/test_calc.py", 16),
        ("test_uses_database", "tests/test_calc.py", 21),
        ("test_sums[2-2-5]", "tests/test_calc.py", 35),
        ("test_reads_token", "tests/test_calc.py", 40),
    ]
    stored = json.dumps(failure.facts)
    assert "hunter2" not in stored and "ghp_" + "a1B2" * 9 not in stored


def test_a_report_left_by_an_earlier_build_is_not_sent(fleet, tmp_path, monkeypatch, capsys):
    fleet.start_worker()
    monkeypatch.chdir(tmp_path)
    stale = tmp_path / "reports" / "old.xml"
    stale.parent.mkdir()
    shutil.copy(FIXTURES / "pytest" / "report.xml", stale)
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))

    code = main([*RUN, "--", "sh", "-c", "echo 'error: no such table: orders'; exit 3"])

    assert code == 3
    err = capsys.readouterr().err
    assert "theow: --junit: 1 report(s) found, none written by this run: not sent" in err
    with fleet.store().session() as s:
        (failure,) = s.execute(select(FailureRow)).scalars()
    assert "tests" not in failure.facts
