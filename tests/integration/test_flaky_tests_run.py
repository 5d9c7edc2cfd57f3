"""Each test's history, end to end: `theow-client run --junit` on passing and failing runs, a
real worker keeping each test's outcome in the ledger, and `theow tests` naming the flaky ones.

A passing Surefire run whose report has a `flakyFailure` records the test's flaky run with the
run's record (no failure, nothing failed); a failing run of the same test on another commit
records its failure; `theow tests flaky --json` then names it, and not the test that a change
broke.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import wait_until
from theow_client.cli import main

pytestmark = pytest.mark.integration

MAIN, HEAD, HEAD_2 = "a1" * 20, "c3" * 20, "d4" * 20
CI = ("GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "CIRCLECI", "TF_BUILD",
      "GITHUB_STEP_SUMMARY", "THEOW_CI_OUTPUT", "THEOW_JUNIT",
      *(f"THEOW_RUN_{n}" for n in ("REPO", "BRANCH", "SHA", "PR", "BASE_SHA", "ATTEMPT", "ID")))  # fmt: skip

# Maven Surefire with -Dsurefire.rerunFailingTestsCount=2: passesOnRetry failed, then passed.
FLAKY_PASS = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="calc.CalcTest" tests="3" failures="0" errors="0" skipped="0" flakes="1">
  <testcase name="addsTwoNumbers" classname="calc.CalcTest" time="0.004"/>
  <testcase name="addsNegativeNumbers" classname="calc.CalcTest" time="0.002"/>
  <testcase name="passesOnRetry" classname="calc.CalcTest" time="0.210">
    <flakyFailure message="connection reset by peer" type="java.net.SocketException">
      <stackTrace>java.net.SocketException: connection reset by peer
	at calc.CalcTest.passesOnRetry(CalcTest.java:34)</stackTrace>
    </flakyFailure>
  </testcase>
</testsuite>
"""
# A pull request's run: passesOnRetry fails on every rerun, and the change broke addsNegative.
FAILING = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="calc.CalcTest" tests="3" failures="2" errors="0" skipped="0">
  <testcase name="addsTwoNumbers" classname="calc.CalcTest" time="0.004"/>
  <testcase name="addsNegativeNumbers" classname="calc.CalcTest" time="0.002">
    <failure message="expected: &lt;-3&gt; but was: &lt;-2&gt;"
             type="org.opentest4j.AssertionFailedError">at calc.CalcTest.addsNegativeNumbers(CalcTest.java:20)</failure>
  </testcase>
  <testcase name="passesOnRetry" classname="calc.CalcTest" time="0.930">
    <failure message="connection reset by peer" type="java.net.SocketException">at calc.CalcTest.passesOnRetry(CalcTest.java:34)</failure>
    <rerunFailure message="connection reset by peer" type="java.net.SocketException"/>
  </testcase>
</testsuite>
"""
# The pull request's next push: the change still breaks addsNegative; passesOnRetry passed.
FAILING_AGAIN = FAILING.replace(
    FAILING[FAILING.index('  <testcase name="passesOnRetry"') : FAILING.index("</testsuite>")],
    '  <testcase name="passesOnRetry" classname="calc.CalcTest" time="0.012"/>\n',
).replace('failures="2"', 'failures="1"')


class Job:
    """The `test` job of acme/calc run by `theow-client run --junit` on one commit."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp_path = tmp_path
        for name in CI:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("THEOW_CLIENT_ENV", str(tmp_path / "no-client.env"))

    def run(self, report: str, code: int, *, sha: str, pr: int | None = None) -> int:
        source = self.tmp_path / f"report-{sha[:4]}-{code}.xml"
        source.write_text(report)
        where = ["--repo", "acme/calc", "--sha", sha, "--fact", "job=test"]
        if pr is None:
            where += ["--branch", "main"]
        else:
            where += ["--branch", f"change-{pr}", "--pr", str(pr), "--base-sha", MAIN]
        script = f"mkdir -p reports && cp {source} reports/TEST-calc.CalcTest.xml && exit {code}"
        return main(["run", "--junit", "reports/*.xml", "--no-passing", "--wait",
                     "--wait-timeout", "60", "--json", *where, "--", "sh", "-c", script])  # fmt: skip


def theow(*argv: str) -> tuple[int, Any]:
    """`theow ARGV --json`, as an operator would run it: its exit code and what it printed."""
    from theow_workers.cli import app

    result = CliRunner().invoke(app, [*argv, "--json"])
    return result.exit_code, json.loads(result.stdout) if result.exit_code == 0 else result.output


def flaky_tests() -> list[dict[str, Any]]:
    code, found = theow("tests", "flaky")
    assert code == 0, found
    return list(found["tests"])


def test_a_test_flaky_in_a_passing_run_and_failing_on_another_commit_is_named_flaky(
    fleet, tmp_path, monkeypatch, capsys
):
    fleet.stack.start_worker(["resolve", "passing"], concurrency=1, name="resolver")
    fleet.wait_for_worker("resolver")
    job = Job(tmp_path, monkeypatch)

    assert job.run(FLAKY_PASS, 0, sha=MAIN) == 0  # the build passed: nothing failed
    assert "theow: status:" not in capsys.readouterr().err  # no failure was reported
    assert job.run(FAILING, 1, sha=HEAD, pr=7) == 1
    assert job.run(FAILING_AGAIN, 1, sha=HEAD_2, pr=7) == 1

    found = wait_until(
        lambda: (tests := flaky_tests()) and tests[0]["failed"] >= 1 and tests,
        what="the flaky test with its failure",
    )
    assert [(t["test"], t["job"]) for t in found] == [("calc.CalcTest::passesOnRetry", "test")]
    (flaky,) = found
    assert flaky["repo"].endswith("acme/calc")  # in the agent's own scope: fleet-agent@acme/calc
    assert (flaky["flaky"], flaky["failed"], flaky["flaky_runs"]) == (True, 1, 1)
    assert flaky["reason"].startswith("failed and passed within run")

    def shown() -> Any:
        code, found = theow("tests", "show", "passesOnRetry")
        assert code == 0, found
        return found["tests"][0] if len(found["tests"][0]["recent"]) == 3 else None

    history = wait_until(shown, what="the test's three outcomes")
    assert [(m["sha"], m["outcome"], m["message"]) for m in history["recent"]] == [
        (MAIN, "flaky", "connection reset by peer"),
        (HEAD, "failed", "connection reset by peer"),
        (HEAD_2, "passed", ""),  # the pull request's next push passed it
    ]
    code, broken = theow("tests", "show", "calc.CalcTest::addsNegativeNumbers")
    assert code == 0, broken
    assert broken["tests"][0]["flaky"] is False  # failed on both pushes of the change
    assert broken["tests"][0]["failed"] == 2
