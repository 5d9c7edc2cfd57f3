"""A failed test is a cause of its own: its where line, its place in the verdict, rules, its key.

The ``tests`` fact is what ``theow-client run --junit`` sends (``theow_client.junit``); here
it is written as the client writes it, through a real resolve service.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_client.junit import read_reports
from theow_client.messages import SubmitRequest
from theow_client.verdict import FailedTest, Status, Verdict, Where
from theow_client.verdict_text import format_verdict
from theow_workers.adapters.memory import InMemoryStore
from theow_workers.core.resolve.fingerprint import fingerprint
from theow_workers.core.resolve.plan import RuleBook
from theow_workers.core.resolve.service import ResolveService, ResolveSettings
from theow_workers.core.rules.schema import parse_rule
from theow_workers.core.testcases import read_tests
from theow_workers.replay.grouping import error_summary, group_unmatched

PYTEST = Path(__file__).resolve().parents[1] / "fixtures" / "junit" / "pytest"
LOG = "collected 8 items\n\nE       assert -2 == -3\n==== 4 failed, 1 error in 0.12s ====\n"

UPLOAD = parse_rule(
    r"""
name: upload_test_lost_its_connection
mode: track
description: test_upload fails when the upload service resets the connection
when:
  - fact: tests
    regex: '::(?P<test>test_upload) failed: .*ConnectionResetError'
"""
)


def case(name: str, message: str, line: int | None = 5, outcome: str = "failed") -> dict:
    return {
        "classname": "tests.test_api",
        "name": name,
        "file": "tests/test_api.py" if line else None,
        "line": line,
        "message": message,
        "outcome": outcome,
        "kind": "failure",
        "time": 0.1,
    }


def report_of(*tests: dict) -> dict:
    return {"tests": list(tests), "summary": {"tests": 9, "failed": len(tests)}}


@pytest.fixture
def service() -> ResolveService:
    book = RuleBook((UPLOAD,), "v1")
    return ResolveService(
        InMemoryStore(), lambda: book, dict, settings=ResolveSettings(action_timeout=1.0)
    )


def submit(service: ResolveService, facts: dict, failure_id: str = "f1") -> Verdict:
    request = SubmitRequest.from_wire({"failure_id": failure_id, "facts": facts})
    return service.resolve(request, fallback_id=failure_id)


def pytest_report() -> dict:
    report, errors = read_reports([PYTEST / "report.xml"], root=PYTEST)
    assert errors == []
    return report.to_json()


def test_each_failed_test_of_a_real_pytest_report_is_a_where_line_with_its_file_and_line(service):
    verdict = submit(service, {"log": LOG, "tests": pytest_report()})

    assert verdict.status is Status.UNMATCHED
    assert [(w.fact, w.line) for w in verdict.where] == [("tests", 1), ("tests", 2), ("tests", 3)]
    assert verdict.where[0].text == (
        "tests/test_calc.py:12: tests.test_calc::test_adds_negative failed: "
        "assert -2 == -3 + where -2 = add(-1, -1)"
    )
    assert verdict.where[2].text.startswith("tests/test_calc.py:21: ")
    assert "error: failed on setup with" in verdict.where[2].text  # a fixture's error says so
    # The verdict lists every failed test, masked as they were sent.
    assert [t.name for t in verdict.tests] == [
        "tests.test_calc::test_adds_negative",
        "tests.test_calc::test_ratio_of_zero",
        "tests.test_calc::test_uses_database",
        "tests.test_calc::test_sums[2-2-5]",
        "tests.test_calc::test_reads_token",
    ]
    assert verdict.tests[0] == FailedTest(
        "tests.test_calc::test_adds_negative",
        "tests/test_calc.py",
        12,
        "assert -2 == -3 + where -2 = add(-1, -1)",
    )
    assert "hunter2" not in str(verdict.tests) and "a1B2a1B2" not in str(verdict.tests)


def test_one_failed_test_comes_first_and_the_log_keeps_the_other_lines(service):
    facts = {"log": LOG, "tests": report_of(case("test_a", "assert 1 == 2"))}
    verdict = submit(service, facts)
    assert verdict.where[0] == Where(
        "tests", 1, "tests/test_api.py:5: tests.test_api::test_a failed: assert 1 == 2"
    )
    assert [w.fact for w in verdict.where] == ["tests", "log", "log"]


def test_a_flaky_test_passed_when_run_again_so_it_is_no_where_line_and_not_listed(service):
    facts = {
        "log": LOG,
        "tests": report_of(case("test_flaky", "reset", outcome="flaky"), case("test_b", "boom")),
    }
    verdict = submit(service, facts)
    assert verdict.where[0] == Where(
        "tests", 2, "tests/test_api.py:5: tests.test_api::test_b failed: boom"
    )
    assert [t.name for t in verdict.tests] == ["tests.test_api::test_b"]


def test_without_a_tests_fact_the_verdict_is_as_it_was(service):
    verdict = submit(service, {"log": LOG})
    assert verdict.tests == ()
    assert [w.fact for w in verdict.where] == ["log"] * len(verdict.where)
    assert "tests" not in verdict.to_dict()


def test_a_rule_matches_a_test_by_its_name_and_message_and_points_at_its_line(service):
    facts = {
        "log": LOG,
        "tests": report_of(
            case("test_login", "assert 401 == 200"),
            case("test_upload", "ConnectionResetError: [Errno 104] reset by peer", line=40),
        ),
    }
    verdict = submit(service, facts)

    assert (verdict.status, verdict.rule) == (Status.TRACKED, "upload_test_lost_its_connection")
    assert verdict.captures == {"test": "test_upload"}
    assert verdict.evidence is not None
    assert (verdict.evidence["fact"], verdict.evidence["line"]) == ("tests", 2)
    # The evidence is a test's line: shown once among the where lines, tests first.
    assert [(w.fact, w.line) for w in verdict.where][:2] == [("tests", 1), ("tests", 2)]


def test_the_same_rule_does_not_match_another_test_or_a_log_that_says_the_same(service):
    other = {"tests": report_of(case("test_download", "ConnectionResetError: reset"))}
    assert submit(service, {"log": LOG, **other}, "f1").status is Status.UNMATCHED
    in_log = "FAILED tests/test_api.py::test_upload failed: ConnectionResetError\n"
    assert submit(service, {"log": in_log}, "f2").status is Status.UNMATCHED


def test_two_runs_failing_the_same_tests_the_same_way_share_a_fingerprint_whatever_the_log():
    first = {
        "log": "run 7\nerror: build 123 failed\n",
        "tests": report_of(
            case("test_a", "assert 3 == 4 after 12ms", line=5), case("test_b", "Timeout: 30s")
        ),
    }
    second = {
        "log": "run 9 on another machine\nwarning: cache miss\n",
        "tests": report_of(
            case("test_b", "Timeout: 45s", line=9), case("test_a", "assert 5 == 6 after 3ms")
        ),
    }
    assert fingerprint(first) == fingerprint(second)
    another_test = {**first, "tests": report_of(case("test_c", "assert 3 == 4 after 12ms"))}
    another_message = {**first, "tests": report_of(case("test_a", "KeyError: 'user'"))}
    assert len({fingerprint(first), fingerprint(another_test), fingerprint(another_message)}) == 3


def test_only_flaky_tests_leave_the_fingerprint_to_the_log():
    flaky = {"log": LOG, "tests": report_of(case("test_a", "reset", outcome="flaky"))}
    assert fingerprint(flaky) == fingerprint({"log": LOG})


def test_replay_groups_failures_by_their_failed_tests_and_shows_the_first():
    def row(fid: str, *tests: dict) -> tuple[str, str, str, str, str]:
        sample, basis = error_summary({"log": f"build {fid}\nerror: x", "tests": report_of(*tests)})
        return (fid, fid, fid, sample, basis)

    groups = group_unmatched(
        [
            row("f1", case("test_a", "assert 1 == 2")),
            row("f2", case("test_a", "assert 7 == 8", line=6)),
            row("f3", case("test_b", "KeyError: 'user'")),
        ]
    )
    assert sorted((g.size, g.sample) for g in groups) == [
        (1, "tests.test_api::test_b failed: KeyError: 'user'"),
        (2, "tests.test_api::test_a failed: assert 1 == 2"),
    ]


def test_the_plain_block_names_the_failed_tests(service):
    verdict = submit(service, {"log": LOG, "tests": pytest_report()})
    block = format_verdict(verdict)
    assert (
        "look at: tests line 1: tests/test_calc.py:12: tests.test_calc::test_adds_negative failed:"
        in block
    )
    assert (
        "tests:   5 failed: tests.test_calc::test_adds_negative, tests.test_calc::test_ratio_of_zero"
        in block
    )


def test_failed_tests_travel_with_the_verdict_and_a_malformed_one_is_left_out():
    sent = Verdict("f1", Status.UNMATCHED, tests=(FailedTest("t::a", "t.py", 3, "boom"),))
    assert Verdict.from_dict(sent.to_dict()) == sent
    got = Verdict.from_dict(
        {
            "failure_id": "f1",
            "status": "unmatched",
            "tests": [{"file": "x"}, "t::b", {"name": "t::c", "line": "x"}, {"name": "t::d"}],
        }
    )
    assert got.tests == (FailedTest("t::d"),)


def test_a_tests_fact_in_another_shape_is_no_test_and_no_crash(service):
    for shape in ("tests failed", ["t"], {"tests": "x"}, {"tests": [1, None, {"name": 3}]}):
        verdict = submit(service, {"log": LOG, "tests": shape}, failure_id=str(shape)[:40])
        assert verdict.status is Status.UNMATCHED
        assert verdict.tests == ()
    assert read_tests({"tests": {"tests": [{"name": "t", "outcome": "passed"}]}}) == ()
