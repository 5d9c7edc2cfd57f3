"""`theow-client junit`: each runner's report read exactly, bad files named, nothing else lost.

The fixture reports in tests/fixtures/junit/ were written by the runners themselves
(pytest, Maven Surefire, mocha with mocha-junit-reporter, jest with jest-junit, gotestsum)
from the small projects beside them, or by hand from the runners' documented formats
(Gradle, cargo-nextest, PHPUnit, Catch2, Karma). Their absolute paths were written as
/home/runner/work/calc/calc, the workspace of a CI job: each test lays the project out in
a temporary folder and points the report's paths at it, as a CI job's checkout would be.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from theow_client.facts import bound_facts
from theow_client.junit import ReportLimits, expand, read_report, read_reports
from theow_client.junit import tests_fact as fact_of  # not collected as a test

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "junit"
CI_WORKSPACE = "/home/runner/work/calc/calc"


def workspace(runner: str, tmp_path: Path) -> Path:
    """The runner's project and reports in a fresh checkout at ``tmp_path``."""
    checkout = tmp_path / "calc"
    shutil.copytree(FIXTURES / runner, checkout)
    for report in checkout.rglob("*.xml"):
        report.write_text(report.read_text().replace(CI_WORKSPACE, str(checkout)))
    return checkout


def reports(checkout: Path) -> list[str]:
    return sorted(str(p) for p in checkout.rglob("*.xml") if p.name != "pom.xml")


def run_cli(*argv: str, cwd: Path = ROOT) -> tuple[int, str, str]:
    """The real `theow-client` command in a fresh process: code, stdout, stderr."""
    process = subprocess.run(
        [sys.executable, "-m", "theow_client.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    return process.returncode, process.stdout, process.stderr


# runner -> (tests, failed, errors, skipped, flaky), and each listed test:
# (name, file:line, outcome, kind)
EXPECTED: dict[str, tuple[tuple[int, int, int, int, int], list[tuple[str, str, str, str]]]] = {
    "pytest": (
        (8, 4, 1, 1, 0),
        [
            ("test_adds_negative", "tests/test_calc.py:12", "failed", "failure"),
            ("test_ratio_of_zero", "tests/test_calc.py:16", "failed", "failure"),
            ("test_uses_database", "tests/test_calc.py:21", "failed", "error"),
            ("test_sums[2-2-5]", "tests/test_calc.py:35", "failed", "failure"),
            ("test_reads_token", "tests/test_calc.py:40", "failed", "failure"),
        ],
    ),
    "maven": (
        (5, 1, 1, 1, 1),
        [
            ("addsNegativeNumbers", "src/test/java/calc/CalcTest.java:20", "failed", "failure"),
            ("passesOnRetry", "src/test/java/calc/CalcTest.java:34", "flaky", "failure"),
            ("dividesByZero", "src/main/java/calc/Calc.java:5", "failed", "error"),
        ],
    ),
    "mocha": (
        (3, 2, 0, 0, 0),
        [
            ("calc adds strings as numbers", "test/calc.test.js:10", "failed", "failure"),
            ("calc parses a value", "test/calc.test.js:14", "failed", "failure"),
        ],
    ),
    "jest": (
        (4, 2, 0, 1, 0),
        [
            ("calc adds strings as numbers", "jest/calc.test.js:9", "failed", "failure"),
            ("calc parses a value", "jest/calc.test.js:13", "failed", "failure"),
        ],
    ),
    "gotestsum": (
        (7, 4, 0, 1, 0),
        [
            ("TestAddNegative", "calc/calc_test.go:13", "failed", "failure"),
            ("TestTable/sum#01", "calc/calc_test.go:26", "failed", "failure"),
            ("TestTable", "", "failed", "failure"),
            ("TestIndexOutOfRange", "calc/calc.go:8", "failed", "failure"),
        ],
    ),
    "gradle": (
        (4, 1, 0, 1, 1),
        [
            (
                "dividesByZero()",
                "src/main/java/com/example/calc/Calc.java:9",
                "failed",
                "failure",
            ),
            (
                "uploadsReport()",
                "src/test/java/com/example/calc/CalcTest.java:33",
                "flaky",
                "failure",
            ),
        ],
    ),
    "nextest": (
        (5, 1, 1, 1, 1),
        [
            ("tests::adds_negative", "src/lib.rs:14", "failed", "failure"),
            ("fetches_rates", "tests/integration.rs:22", "flaky", "failure"),
            ("reads_config", "src/config.rs:40", "failed", "error"),
        ],
    ),
    "phpunit": (
        (5, 1, 1, 1, 0),
        [
            ("testAddsNegative", "tests/CalcTest.php:19", "failed", "failure"),
            ("testDivides", "tests/CalcTest.php:24", "failed", "error"),
        ],
    ),
    "catch2": (
        (4, 1, 1, 0, 0),
        [
            ("adds negative numbers", "tests/calc_test.cpp:14", "failed", "failure"),
            ("parses numbers/rejects letters", "tests/calc_test.cpp:21", "failed", "error"),
        ],
    ),
    "karma": (
        (4, 2, 0, 1, 0),
        [
            (
                "CalcService adds strings as numbers",
                "src/app/calc.service.spec.ts:18",
                "failed",
                "failure",
            ),
            (
                "CalcComponent renders the total",
                "src/app/calc.component.spec.ts:41",
                "failed",
                "failure",
            ),
        ],
    ),
}


@pytest.mark.parametrize("runner", sorted(EXPECTED))
def test_each_runners_report_is_read_exactly(runner: str, tmp_path: Path) -> None:
    checkout = workspace(runner, tmp_path)
    found = [p for p in reports(checkout) if not p.endswith("report-xunit1.xml")]
    report, errors = read_reports(found, root=checkout)
    counts, tests = EXPECTED[runner]
    assert errors == []
    summary = report.summary
    assert (summary.tests, summary.failed, summary.errors, summary.skipped, summary.flaky) == counts
    assert [(t.name, t.where(), t.outcome, t.kind) for t in report.tests] == tests


def test_each_failed_test_says_why_in_its_runners_words(tmp_path: Path) -> None:
    messages = {}
    for runner in ("maven", "gotestsum", "nextest", "phpunit", "catch2", "jest"):
        checkout = workspace(runner, tmp_path / runner)
        report, _ = read_reports(reports(checkout), root=checkout)
        messages.update({t.name: t.message for t in report.tests})
    assert messages["addsNegativeNumbers"] == "sum of negatives ==> expected: <-3> but was: <-2>"
    # gotestsum writes message="Failed": the test's own output says more.
    assert messages["TestAddNegative"] == "calc_test.go:13: Add(-1, -1) = -2, want -3"
    assert messages["tests::adds_negative"] == "assertion `left == right` failed"
    assert messages["testAddsNegative"] == "Failed asserting that -2 is identical to -3."
    assert messages["parses numbers/rejects letters"] == "std::invalid_argument: stoi"
    assert messages["calc parses a value"].startswith("SyntaxError: Expected ',' or '}'")


def test_secrets_in_a_report_are_masked(tmp_path: Path) -> None:
    checkout = workspace("pytest", tmp_path)
    report = read_report(checkout / "report.xml", root=checkout)
    text = json.dumps(report.to_json())
    assert "hunter2" not in text and "ghp_" + "a1B2" * 9 not in text
    by_name = {t.name: t.message for t in report.tests}
    assert by_name["test_reads_token"].startswith(
        "AssertionError: unexpected GITHUB_TOKEN=[masked:github-token]\n"
    )
    assert "password=***" in by_name["test_uses_database"]


def test_pytest_xunit1_report_with_file_and_line_attributes_gives_the_failing_line(
    tmp_path: Path,
) -> None:
    checkout = workspace("pytest", tmp_path)
    report = read_report(checkout / "report-xunit1.xml", root=checkout)
    assert report.tests[0].where() == "tests/test_calc.py:12"


def test_nested_namespaced_suites_are_read(tmp_path: Path) -> None:
    report = read_report(FIXTURES / "other" / "namespaced.xml", root=tmp_path)
    assert [(t.classname, t.name, t.where()) for t in report.tests] == [
        ("Calc", "subtracts", "spec/calc_spec.rb:9")
    ]
    assert report.summary.tests == 2


def test_a_test_that_failed_in_one_report_and_passed_in_another_is_flaky(tmp_path: Path) -> None:
    first = tmp_path / "attempt-1.xml"
    first.write_text(
        '<testsuite><testcase classname="api" name="test_upload">'
        '<failure message="503 from storage"/></testcase>'
        '<testcase classname="api" name="test_list"/></testsuite>'
    )
    second = tmp_path / "attempt-2.xml"
    second.write_text(
        '<testsuite><testcase classname="api" name="test_upload"/>'
        '<testcase classname="api" name="test_list"/></testsuite>'
    )
    report, _ = read_reports([first, second], root=tmp_path)
    assert [(t.name, t.outcome) for t in report.tests] == [("test_upload", "flaky")]
    assert (report.summary.tests, report.summary.failed, report.summary.flaky) == (2, 0, 1)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("results.trx", "a Visual Studio TRX report, not JUnit XML"),
        ("nunit3.xml", "an NUnit 3 report, not JUnit XML"),
        ("xunit.xml", "an xUnit.net report, not JUnit XML"),
        ("truncated.xml", "not well-formed XML (mismatched tag: line 5, column 4)"),
    ],
)
def test_a_file_that_is_not_junit_xml_is_named_and_the_others_are_still_read(
    name: str, why: str, tmp_path: Path
) -> None:
    checkout = workspace("catch2", tmp_path)
    bad = FIXTURES / "other" / name
    report, errors = read_reports([bad, checkout / "junit.xml"], root=checkout)
    assert errors == [f"{bad}: {why}"]
    assert [t.name for t in report.tests] == [
        "adds negative numbers",
        "parses numbers/rejects letters",
    ]
    assert report.summary.tests == 4  # nothing of the half-read file is counted


def test_limits_bound_what_is_listed_and_refuse_what_is_too_big(tmp_path: Path) -> None:
    cases = "".join(
        f'<testcase classname="c" name="t{n}"><failure message="{"x" * 500}"/></testcase>'
        for n in range(30)
    )
    path = tmp_path / "many.xml"
    path.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>")
    limits = ReportLimits(listed=10, message_chars=100)
    report = read_report(path, limits=limits)
    assert len(report.tests) == 10 and report.unlisted == 20
    assert report.summary.failed == 30
    assert report.to_json()["summary"] == {
        "tests": 30,
        "failed": 30,
        "errors": 0,
        "skipped": 0,
        "flaky": 0,
        "unlisted": 20,
    }
    assert all(len(t.message) <= 100 for t in report.tests)
    assert "20 more not listed" in list(report.lines())[-1]

    _, errors = read_reports([path], limits=ReportLimits(file_bytes=1000))
    assert errors == [f"{path}: {path.stat().st_size} bytes, more than 1000"]
    _, errors = read_reports([path], limits=ReportLimits(depth=2))
    assert errors == [f"{path}: nested deeper than 2 elements"]


def test_printed_lines_cannot_forge_terminal_or_ci_commands(tmp_path: Path) -> None:
    path = tmp_path / "forged.xml"
    path.write_text(
        '<testsuite><testcase classname="" name="::error file=x::forged&#10;::add-mask::x">'
        '<failure message="\u009b2Jcleared&#13;hidden"/></testcase></testsuite>'
    )
    lines = list(read_report(path).lines())
    assert len(lines) == 2
    assert not lines[0].startswith("::") and "\u009b" not in lines[0] and "\r" not in lines[0]


def test_globs_name_every_report_once_and_a_pattern_matching_nothing(tmp_path: Path) -> None:
    checkout = workspace("gotestsum", tmp_path)
    files, errors = expand([f"{checkout}/**/*.xml", str(checkout / "report.xml"), "none/*.xml"])
    assert files == [str(checkout / "report.xml")]
    assert errors == ["none/*.xml: no file matches"]


def test_the_cli_prints_one_line_per_failed_test_file_and_line_first(tmp_path: Path) -> None:
    checkout = workspace("pytest", tmp_path)
    code, out, err = run_cli("junit", "report.xml", cwd=checkout)
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "tests/test_calc.py:12: tests.test_calc.test_adds_negative: failed: assert -2 == -3",
        "tests/test_calc.py:16: tests.test_calc.test_ratio_of_zero: failed: "
        "ZeroDivisionError: division by zero",
        "tests/test_calc.py:21: tests.test_calc.test_uses_database: failed (error): "
        'failed on setup with "ConnectionError: could not connect to db:5432 with password=***"',
        "tests/test_calc.py:35: tests.test_calc.test_sums[2-2-5]: failed: assert 4 == 5",
        "tests/test_calc.py:40: tests.test_calc.test_reads_token: failed: "
        "AssertionError: unexpected GITHUB_TOKEN=[masked:github-token]",
        "8 tests: 4 failed, 1 errors, 1 skipped, 0 flaky",
    ]


def test_the_cli_json_has_every_field_of_each_test_and_the_counts(tmp_path: Path) -> None:
    checkout = workspace("maven", tmp_path)
    code, out, _ = run_cli("junit", "--json", "--root", str(checkout), f"{checkout}/TEST-*.xml")
    assert code == 0
    data = json.loads(out)
    assert data["summary"] == {"tests": 5, "failed": 1, "errors": 1, "skipped": 1, "flaky": 1}
    assert data["tests"][1] == {
        "classname": "calc.CalcTest",
        "name": "passesOnRetry",
        "file": "src/test/java/calc/CalcTest.java",
        "line": 34,
        "message": "first attempt ==> expected: <1> but was: <2>",
        "outcome": "flaky",
        "kind": "failure",
        "time": 0.001,
    }


def test_the_cli_exits_2_naming_each_bad_file_and_still_prints_the_good_ones(
    tmp_path: Path,
) -> None:
    checkout = workspace("nextest", tmp_path)
    trx = FIXTURES / "other" / "results.trx"
    code, out, err = run_cli("junit", str(trx), "junit.xml", "missing/**/*.xml", cwd=checkout)
    assert code == 2
    assert err.splitlines() == [
        "theow-client: missing/**/*.xml: no file matches",
        f"theow-client: {trx}: a Visual Studio TRX report, not JUnit XML",
    ]
    assert out.splitlines()[-1] == "5 tests: 1 failed, 1 errors, 1 skipped, 1 flaky"
    assert len(out.splitlines()) == 4


def test_the_cli_names_a_file_that_cannot_be_opened(tmp_path: Path) -> None:
    code, out, err = run_cli("junit", "absent.xml", cwd=tmp_path)
    assert code == 2
    assert err == "theow-client: absent.xml: No such file or directory\n"
    assert out == "0 tests: 0 failed, 0 errors, 0 skipped, 0 flaky\n"


def test_what_run_sends_is_only_this_runs_reports_within_a_facts_budget(tmp_path: Path) -> None:
    checkout = workspace("pytest", tmp_path)
    old = checkout / "report-xunit1.xml"
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    started = time.time()
    (checkout / "report.xml").touch()

    fact, problems = fact_of([f"{checkout}/*.xml"], since=started, root=checkout)
    assert problems == [] and fact is not None
    assert fact["summary"] == {"tests": 8, "failed": 4, "errors": 1, "skipped": 1, "flaky": 0}

    fact, problems = fact_of([str(old)], since=started, root=checkout)
    assert fact is None
    assert problems == ["1 report(s) found, none written by this run: not sent"]

    many = tmp_path / "many.xml"
    many.write_text(
        "<testsuite>"
        + "".join(
            f'<testcase classname="c" name="t{n}"><failure message="{"m" * 5000}"/></testcase>'
            for n in range(500)
        )
        + "</testsuite>"
    )
    fact, _ = fact_of([str(many)], since=started)
    assert fact is not None
    bounded, _ = bound_facts({"tests": fact})  # fits a failure's facts as it is
    assert bounded["tests"] == fact
    assert isinstance(fact["tests"], list) and len(fact["tests"]) == 100
    assert fact["summary"]["unlisted"] == 400  # type: ignore[index]


def test_a_workspace_reached_through_a_symlink_still_gives_relative_paths(tmp_path: Path) -> None:
    checkout = workspace("mocha", tmp_path)  # its report names the checkout's real path
    link = tmp_path / "link"
    link.symlink_to(checkout)
    report = read_report(checkout / "report.xml", root=link)
    assert [t.where() for t in report.tests] == ["test/calc.test.js:10", "test/calc.test.js:14"]
