"""A ``tests`` fact is written by the build, which runs a pull request's code: hostile input.

The worker reads it again whatever the client did: a huge fact, nesting where text
should be, secrets, escape sequences and line breaks in a test's name (to forge a line
of the fact, or a workflow command in the CI's log) come out bounded, masked and one
line each; the CI annotation and the pull-request comment escape what is left.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from theow_client.ci_output import show_verdict
from theow_client.messages import SubmitRequest
from theow_client.verdict import Status, Verdict
from theow_workers.adapters.memory import InMemoryStore
from theow_workers.core.resolve.plan import RuleBook, matching_facts
from theow_workers.core.resolve.service import ResolveService
from theow_workers.core.testcases import read_tests
from theow_workers.core.testcases.fact import MAX_TESTS, MESSAGE_CHARS, NAME_CHARS
from theow_workers.integrations import feedback
from theow_workers.integrations.hooks import github_job

TOKEN = "ghp_" + "Z9y8" * 9
FORGED = "test_x\n::error file=.github/workflows/ci.yml,line=1::forged\r\x1b]52;c;cHduZWQ=\x07"


def hostile_tests() -> list[object]:
    deep: object = "leaf"
    for _ in range(20):
        deep = {"name": deep}
    return [
        {"classname": "t", "name": FORGED, "file": "calc.py", "line": 6, "outcome": "failed",
         "kind": "failure", "message": f"GITHUB_TOKEN={TOKEN} password=hunter2\n::warning::x"},
        {"classname": deep, "name": "test_nested", "outcome": "failed", "message": ["x"]},
        {"classname": "t", "name": deep, "outcome": "failed"},
        {"classname": "t", "name": "n" * 50_000, "file": "f" * 50_000, "line": 10**12,
         "outcome": "failed", "kind": "error", "message": "m" * 60_000},
        {"classname": "t", "name": "test_a_line_that_is_no_number", "line": "6; rm -rf /",
         "file": "calc.py", "outcome": "failed"},
        *[{"classname": "t", "name": f"test_{n}", "outcome": "failed"} for n in range(2000)],
    ]  # fmt: skip


def facts() -> dict:
    return {"log": "error: tests failed\n", "tests": {"tests": hostile_tests(), "summary": {}}}


def resolve() -> Verdict:
    service = ResolveService(InMemoryStore(), lambda: RuleBook((), "v"), dict)
    request = SubmitRequest.from_wire({"failure_id": "f1", "facts_json": json.dumps(facts())})
    return service.resolve(request, fallback_id="f1")


def test_the_worker_reads_a_hostile_tests_fact_bounded_masked_and_one_line_each():
    tests = read_tests(facts())
    assert len(tests) == MAX_TESTS - 2  # the two with an object for a text are left out
    first, huge, no_number = tests[0], tests[1], tests[2]
    assert first.name == "t::test_x ::error file=.github/workflows/ci.yml,line=1::forged"
    assert TOKEN not in first.message and "hunter2" not in first.message
    assert len(huge.name) <= 2 * NAME_CHARS + 2 and len(huge.file or "") <= NAME_CHARS
    assert len(huge.message) <= MESSAGE_CHARS and huge.line is None  # 10**12 is no line
    assert no_number.line is None
    rendered = matching_facts(facts())["tests"]
    assert rendered.count("\n") == len(tests) - 1  # one line per test: no line forged
    assert "\x1b" not in rendered and "\r" not in rendered and "\x07" not in rendered


def test_a_hostile_tests_fact_gives_a_bounded_verdict_and_escaped_ci_output(tmp_path: Path):
    verdict = resolve()
    assert verdict.status is Status.UNMATCHED
    assert len(verdict.where) == 3 and len(verdict.tests) == 50
    wire = json.dumps(verdict.to_dict())
    assert TOKEN not in wire and "hunter2" not in wire and len(wire) < 64 * 1024
    assert all("\n" not in w.text and len(w.text) <= 300 for w in verdict.where)

    (tmp_path / "calc.py").write_text("\n")
    out, err = io.StringIO(), io.StringIO()
    summary = tmp_path / "summary.md"
    environ = {"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(tmp_path),
               "GITHUB_STEP_SUMMARY": str(summary), "THEOW_CONSOLE_URL": ""}  # fmt: skip
    show_verdict(Verdict.from_dict(json.loads(wire)), environ, out, err)

    commands = [line for line in out.getvalue().splitlines() if line.startswith("::")]
    assert len(commands) == 3 == len(out.getvalue().splitlines())  # the three tests' and no other
    assert commands[0].startswith("::error file=calc.py,line=6,title=Theow%3A unexplained::")
    # The forged command is text of the first one's message, never its own line or properties.
    assert "::error file=.github/workflows/ci.yml,line=1::forged" in commands[0]
    assert all(".github" not in command[2:].split("::", 1)[0] for command in commands)
    shown = summary.read_text() + err.getvalue()
    assert TOKEN not in shown and "hunter2" not in shown and "\x1b" not in shown
    assert not any(line.startswith("::") for line in shown.splitlines())


def test_a_hostile_tests_fact_cannot_break_out_of_the_pull_request_comment():
    verdict = resolve().to_dict()
    verdict["tests"][0]["name"] = "x\n```\n# pwned <!-- theow --> @org/admins"
    body = feedback.render([feedback.entry(github_job(EVENT), verdict)])
    assert "\n# pwned" not in body and body.count(feedback.MARKER) == 1
    assert TOKEN not in body and "hunter2" not in body
    assert body.count("failed") <= 12  # ten tests listed, then a count


EVENT = {
    "action": "completed",
    "repository": {"full_name": "o/r"},
    "workflow_job": {"id": 7, "run_id": 3, "run_attempt": 2, "name": "test",
                     "workflow_name": "CI", "conclusion": "failure", "head_sha": "abc"},
}  # fmt: skip
