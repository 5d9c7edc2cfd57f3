"""Where a CI and a pull request show failed tests: an annotation at each, listed by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_client.ci_output import github_annotation, markdown
from theow_client.verdict import FailedTest, Status, Verdict, Where
from theow_workers.integrations import feedback
from theow_workers.integrations.hooks import github_job

ADD = FailedTest("tests.test_calc::test_add", "tests/test_calc.py", 12, "assert 3 == 4")
DIV = FailedTest("tests.test_calc::test_div", "calc.py", 6, "ZeroDivisionError: division by zero")
GONE = FailedTest(
    "tests.test_old::test_gone", "tests/test_old.py", 3, "boom"
)  # not in the checkout
NOWHERE = FailedTest("calc adds strings", None, None, "Expected: 3")
VERDICT = Verdict(
    "f1",
    Status.UNMATCHED,
    where=(Where("tests", 1, "tests/test_calc.py:12: tests.test_calc::test_add failed: assert"),),
    tests=(ADD, DIV, GONE, NOWHERE),
)
EVENT = {
    "action": "completed",
    "repository": {"full_name": "o/r"},
    "workflow_job": {"id": 7, "run_id": 3, "run_attempt": 2, "name": "test",
                     "workflow_name": "CI", "conclusion": "failure", "head_sha": "abc"},
}  # fmt: skip


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("tests/test_calc.py", "calc.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("\n")
    return tmp_path


def test_each_failed_test_is_annotated_at_its_file_and_line_the_first_three(checkout):
    lines = github_annotation(VERDICT, checkout, None).splitlines()
    assert lines == [
        "::error file=tests/test_calc.py,line=12,title=Theow%3A unexplained"
        "::tests.test_calc::test_add failed: assert 3 == 4%0Afailure f1: theow failures show f1",
        "::error file=calc.py,line=6,title=Theow%3A unexplained"
        "::tests.test_calc::test_div failed: ZeroDivisionError: division by zero"
        "%0Afailure f1: theow failures show f1",
        # A file the checkout does not hold is no place to point at: the test is still named.
        "::error title=Theow%3A unexplained::tests.test_old::test_gone failed: boom"
        "%0Afailure f1: theow failures show f1",
    ]


def test_the_job_summary_lists_every_failed_test_by_name_and_place():
    summary = markdown(VERDICT, None)
    assert (
        "Failed tests (4):\n\n```text\n"
        "tests/test_calc.py:12: tests.test_calc::test_add failed: assert 3 == 4\n"
        "calc.py:6: tests.test_calc::test_div failed: ZeroDivisionError: division by zero\n"
        "tests/test_old.py:3: tests.test_old::test_gone failed: boom\n"
        "calc adds strings failed: Expected: 3\n```"
    ) in summary


def test_without_failed_tests_the_annotation_is_the_one_at_the_line_to_look_at(checkout):
    plain = Verdict("f1", Status.UNMATCHED, where=(Where("log", 3, "calc.py:1: boom"),))
    (line,) = github_annotation(plain, checkout, None).splitlines()
    assert line.startswith("::error file=calc.py,line=1,title=Theow%3A unexplained::log line 3")
    assert "Failed tests" not in markdown(plain, None)


def test_the_pull_request_comment_lists_the_failed_tests_by_name():
    item = feedback.entry(github_job(EVENT), VERDICT.to_dict())
    body = feedback.render([item])
    assert (
        "  Failed tests:\n  ```text\n"
        "  tests/test_calc.py:12: tests.test_calc::test_add failed: assert 3 == 4\n"
        "  calc.py:6: tests.test_calc::test_div failed: ZeroDivisionError: division by zero\n"
        "  tests/test_old.py:3: tests.test_old::test_gone failed: boom\n"
        "  calc adds strings failed: Expected: 3\n  ```"
    ) in body


def test_a_comment_lists_ten_failed_tests_and_counts_the_rest():
    many = tuple(FailedTest(f"t::test_{n}", "t.py", n, "x") for n in range(1, 31))
    item = feedback.entry(github_job(EVENT), Verdict("f1", Status.UNMATCHED, tests=many).to_dict())
    body = feedback.render([item])
    assert "t::test_10 failed" in body and "t::test_11 failed" not in body
    assert "… and 20 more" in body


def test_a_stored_verdict_without_its_list_names_the_tests_its_where_lines_name():
    stored = {"status": "unmatched", "where": [w.to_dict() for w in VERDICT.where]}
    item = feedback.entry(github_job(EVENT), stored)
    assert item["tests"] == "tests/test_calc.py:12: tests.test_calc::test_add failed: assert"
