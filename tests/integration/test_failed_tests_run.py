"""A pytest job's failed tests, end to end: `theow-client run --junit` under GitHub Actions,
a real worker, and back: a where line and an annotation at each test's file and line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from theow_client.cli import main

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "junit"
# The report pytest wrote for tests/fixtures/junit/pytest, as the command writes it here.
FAILING_RUN = """
mkdir -p reports
cp {report} reports/pytest.xml
echo 'FAILED tests/test_calc.py::test_adds_negative - assert -2 == -3'
echo '==== 4 failed, 1 error, 2 passed, 1 skipped in 0.12s ===='
exit 1
"""
CI = ("GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "THEOW_CI_OUTPUT", "THEOW_CONSOLE_URL")


def test_each_failed_test_gets_a_where_line_and_an_annotation_at_its_file_and_line(
    fleet, tmp_path, monkeypatch, capsys
):
    fleet.start_worker()
    checkout = tmp_path / "calc"
    shutil.copytree(FIXTURES / "pytest", checkout)
    monkeypatch.chdir(checkout)
    for name in CI:
        monkeypatch.delenv(name, raising=False)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(checkout))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("THEOW_CLIENT_ENV", str(tmp_path / "no-client.env"))
    script = FAILING_RUN.format(report=checkout / "report.xml")

    code = main(["run", "--junit", "reports/*.xml", "--wait", "--wait-timeout", "60",
                 "--", "sh", "-c", script])  # fmt: skip

    assert code == 1  # the command's own exit code
    out, err = capsys.readouterr()
    block = [line.removeprefix("theow: ") for line in err.splitlines() if line.startswith("theow:")]
    look = block.index(next(line for line in block if line.startswith("look at:")))
    assert block[look : look + 3] == [
        "look at: tests line 1: tests/test_calc.py:12: tests.test_calc::test_adds_negative "
        "failed: assert -2 == -3 + where -2 = add(-1, -1)",
        "         tests line 2: tests/test_calc.py:16: tests.test_calc::test_ratio_of_zero "
        "failed: ZeroDivisionError: division by zero",
        "         tests line 3: tests/test_calc.py:21: tests.test_calc::test_uses_database "
        'error: failed on setup with "ConnectionError: could not connect to db:5432 with '
        'password=***"',
    ]
    annotations = [line for line in out.splitlines() if line.startswith("::error")]
    assert [a.split("::")[1] for a in annotations] == [
        "error file=tests/test_calc.py,line=12,title=Theow%3A unexplained",
        "error file=tests/test_calc.py,line=16,title=Theow%3A unexplained",
        "error file=tests/test_calc.py,line=21,title=Theow%3A unexplained",
    ]
    assert "tests.test_calc::test_adds_negative failed: assert -2 == -3" in annotations[0]
    listed = summary.read_text()
    assert "Failed tests (5):" in listed
    assert "tests/test_calc.py:40: tests.test_calc::test\\_reads\\_token" not in listed  # fenced
    assert "tests/test_calc.py:40: tests.test_calc::test_reads_token failed: " in listed
    assert "hunter2" not in out + err + listed and "a1B2a1B2a1B2a1B2" not in out + err + listed
