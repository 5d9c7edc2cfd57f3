"""Whose failure it is, where the verdict is shown: the client's block, `--json`, GitHub's
annotation and job summary, Buildkite's annotation style; and what a hostile origin cannot do."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from theow_client.ci_output import github_annotation, level, markdown, show_verdict
from theow_client.origin import Origin, OriginKind
from theow_client.verdict import Verdict
from theow_client.verdict_text import format_verdict

SHA = "abc1234def5678abc1234def5678abc1234def56"
FIX = "def5678abc1234def5678abc1234def5678abc12"
TOKEN = "ghp_" + "a1B2" * 9


def verdict(origin: object = None, **fields: object) -> Verdict:
    data: dict[str, object] = {
        "failure_id": "f-1",
        "status": "tracked",
        "rule": "pytest_failed",
        "mode": "track",
        "evidence": {"fact": "log", "line": 7, "text": "E   assert 1 == 2"},
        **fields,
    }
    if origin is not None:
        data["origin"] = origin
    return Verdict.from_dict(data)


def origin_line(v: Verdict) -> str:
    [line] = [line for line in format_verdict(v).splitlines() if line.startswith("origin:")]
    return line


@pytest.mark.parametrize(
    ("origin", "said"),
    [
        (
            {"origin": "main", "culprit": SHA, "reason": "fails the same way on main"},
            "origin:  main is broken since abc1234 (not this change)",
        ),
        (
            {"origin": "main", "culprit": SHA, "fixed_by": FIX},
            "origin:  main was broken by abc1234, fixed by def5678 "
            "(not this change; update your branch)",
        ),
        (
            {"origin": "flaky", "flip_rate": 0.18, "reason": "passed on retry of the same commit"},
            "origin:  flaky (passed on retry of the same commit; flips 18% of runs)",
        ),
        (
            {"origin": "infra", "reason": "the cause is infrastructure (network)"},
            "origin:  infrastructure (the cause is infrastructure (network))",
        ),
        ({"origin": "infra"}, "origin:  infrastructure"),
        (
            {"origin": "change", "reason": "the default branch does not fail this way"},
            "origin:  probably this change (the default branch does not fail this way)",
        ),
        ({"origin": "unknown", "reason": ""}, "origin:  unknown (no history of this job yet)"),
        # A newer worker's origin: its word, as a newer status is shown.
        ({"origin": "quarantined", "reason": "muted test"}, "origin:  quarantined (muted test)"),
    ],
)
def test_the_client_says_whose_failure_it_is_in_one_line_after_the_failure(origin, said):
    v = verdict(origin)
    lines = format_verdict(v).splitlines()
    assert lines[2] == said  # after status and failure: the first question of a red build
    assert not any(line.startswith("origin: {") for line in lines)  # not raw JSON


def test_a_verdict_without_an_origin_says_nothing_of_it_and_json_has_no_origin_key():
    v = verdict()
    assert v.origin is None
    assert "origin" not in format_verdict(v) and "origin" not in v.to_dict()


def test_json_carries_the_origin_as_validated():
    sent = {"origin": "flaky", "culprit": None, "fixed_by": None, "flip_rate": 0.25, "reason": "r"}
    data = json.loads(json.dumps(verdict(sent).to_dict()))
    assert data["origin"] == sent
    assert Verdict.from_dict(data).origin == Origin(OriginKind.FLAKY, flip_rate=0.25, reason="r")


@pytest.mark.parametrize(
    "origin",
    [
        "main",  # not an object
        {"culprit": SHA},  # no origin named
        {"origin": 3},
        {"origin": "   "},
    ],
)
def test_something_that_is_no_origin_is_none_never_an_error(origin):
    assert verdict(origin).origin is None


def test_hostile_parts_of_an_origin_are_dropped_or_made_one_safe_line():
    v = verdict(
        {
            "origin": "main\x1b]52;c;eA==\x07",
            "culprit": "HEAD; rm -rf /",
            "fixed_by": "../../etc",
            "flip_rate": float("nan"),
            "reason": f"line one\n::error file=x.py::forged\r\x1b[2J token={TOKEN}" + "x" * 2000,
        }
    )
    assert v.origin is not None
    assert v.origin.origin is OriginKind.MAIN  # the escape sequence removed, the word kept
    assert v.origin.culprit is None and v.origin.fixed_by is None  # not commit ids
    assert origin_line(v) == "origin:  main is broken (not this change)"
    for rate in (float("inf"), -0.1, 1.5, True, "0.5"):
        assert verdict({"origin": "flaky", "flip_rate": rate}).origin.flip_rate is None  # type: ignore[union-attr]
    reason = verdict({"origin": "change", "reason": f"a\nb token={TOKEN}" + "y" * 2000}).origin
    assert reason is not None
    assert "\n" not in reason.reason and TOKEN not in reason.reason
    assert len(reason.reason) <= 300 and reason.reason.startswith("a b token=[masked")


def test_the_annotation_says_the_origin_and_a_forged_command_in_the_reason_stays_text(
    tmp_path: Path,
):
    reason = f"retried\n::error file=.github/workflows/ci.yml,line=1::forged token={TOKEN}"
    v = verdict({"origin": "flaky", "flip_rate": 0.5, "reason": reason})
    [command] = github_annotation(v, tmp_path, None).splitlines()
    assert command.startswith("::warning title=Theow%3A pytest_failed (tracked) · flaky::")
    message = command.split("::", 2)[2]
    assert "%0Aorigin: flaky (retried ::error file=.github/workflows/ci.yml" in message
    assert "flips 50%25 of runs)" in message  # escaped as the runner unescapes it
    assert TOKEN not in command


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        ("flaky", "warning"),
        ("infra", "warning"),
        ("main", "error"),
        ("change", "error"),
        ("unknown", "error"),
        ("quarantined", "error"),
        (None, "error"),
    ],
)
def test_a_flaky_or_infrastructure_failure_is_a_warning_and_code_failing_an_error(origin, expected):
    v = verdict({"origin": origin} if origin else None)
    assert level(v) == expected


def test_failed_tests_annotations_carry_the_origin_too(tmp_path: Path):
    v = verdict(
        {"origin": "main", "culprit": SHA},
        tests=[{"name": "t::a", "file": "t.py", "line": 3, "message": "boom"}],
    )
    [command] = github_annotation(v, tmp_path, None).splitlines()
    assert command.startswith("::error title=Theow%3A pytest_failed (tracked) · main is broken::")
    assert "%0Aorigin: main is broken since abc1234 (not this change)%0A" in command


def test_the_job_summary_says_the_origin_first_escaped_and_masked():
    v = verdict({"origin": "change", "reason": f"[click](https://evil.example) *x* {TOKEN}"})
    summary = markdown(v, None)
    heading, origin = summary.split("\n\n")[:2]
    assert heading == "### Theow: pytest\\_failed \\(tracked\\)"
    assert origin.startswith("**Origin:** probably this change \\(\\[click\\]\\(https")
    assert TOKEN not in summary and "](" not in origin


def fake_agent(directory: Path) -> Path:
    directory.mkdir()
    agent = directory / "buildkite-agent"
    agent.write_text(f'#!/bin/sh\necho "$@" > {directory}/args\ncat > {directory}/stdin\n')
    agent.chmod(0o755)
    return directory


@pytest.mark.parametrize(("origin", "style"), [("flaky", "warning"), ("change", "error")])
def test_buildkite_annotates_a_flaky_failure_as_a_warning(tmp_path: Path, origin, style):
    bin_dir = fake_agent(tmp_path / "bin")
    environ = {"BUILDKITE": "true", "PATH": f"{bin_dir}:/usr/bin:/bin"}
    out, err = io.StringIO(), io.StringIO()
    show_verdict(verdict({"origin": origin}), environ, out, err)
    assert (bin_dir / "args").read_text().split() == [
        "annotate",
        "--style",
        style,
        "--context",
        "theow",
    ]
    assert "**Origin:** " in (bin_dir / "stdin").read_text()
    assert "theow: origin:  " in err.getvalue()  # the plain block says it too
