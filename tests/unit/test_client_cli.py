"""`theow-client`: clear one-line argument errors, and the build's own exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest_client import *  # noqa: F403
from theow_client.cli import format_verdict, main
from theow_client.verdict import BoundAction, Status, Verdict

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv: str) -> tuple[int, str, str]:
    """The real `theow-client` command in a fresh process: code, stdout, stderr."""
    process = subprocess.run(
        [sys.executable, "-m", "theow_client.cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
        timeout=60,
    )
    return process.returncode, process.stdout, process.stderr


def test_a_fact_without_equals_sign_is_a_usage_error(
    offline_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", "--fact", "stderr"]) == 2
    err = capsys.readouterr().err
    assert err == "theow-client: --fact 'stderr': expected NAME=VALUE\n"
    assert not offline_env.exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "No such file"),
        ("{broken", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
    ],
)
def test_a_bad_facts_file_is_a_usage_error_naming_it(
    content: str | None,
    problem: str,
    offline_env: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    facts_file = tmp_path / "facts.json"
    if content is not None:
        facts_file.write_text(content)
    assert main(["submit", "--facts-file", str(facts_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"theow-client: --facts-file {facts_file}: ")
    assert problem in err
    assert len(err.splitlines()) == 1


def test_run_without_a_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--retries", "1", "--"]) == 2
    assert "no command given" in capsys.readouterr().err


def test_submit_spools_and_prints_the_failure_id_as_json(
    offline_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "build.log"
    log.write_bytes(b"error: caf\xe9 not found\n")
    facts_file = tmp_path / "facts.json"
    facts_file.write_text(json.dumps({"problem_type": "dependency_resolution", "n": 3}))

    code = main(
        [
            *("submit", "--facts-file", str(facts_file), "--stderr-file", str(log)),
            *("--fact", "step=go build", "--rule", "r1", "--tag", "go", "--explore", "--json"),
        ]
    )

    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["spooled"] is True
    payload = json.loads((offline_env / f"{printed['failure_id']}.json").read_text())
    assert json.loads(payload["facts_json"]) == {
        "problem_type": "dependency_resolution",
        "n": 3,
        "stderr": "error: caf\ufffd not found\n",
        "step": "go build",
    }
    assert payload["explore"] is True
    assert payload["hints"]["rules"] == ["r1"] and payload["hints"]["tags"] == ["go"]


def test_submit_wait_when_spooled_prints_the_spooled_verdict(
    offline_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", "--fact", "a=b", "--wait", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == "spooled"


def test_run_passes_the_commands_exit_code_and_output_through_when_theow_is_down(
    offline_env: Path,
) -> None:
    script = (
        "import sys; print('compiling', flush=True); print('ld: error', file=sys.stderr);"
        "sys.exit(7)"
    )
    code, out, err = run_cli("run", "--retries", "2", "--", sys.executable, "-c", script)
    assert code == 7
    assert out == "compiling\nld: error\n"  # both streams, on one pipe, in the order written
    assert err.startswith("theow: broker unreachable")  # the client's own lines only
    (spooled,) = offline_env.glob("*.json")
    facts = json.loads(json.loads(spooled.read_text())["facts_json"])
    assert facts["exit_code"] == 7
    assert facts["log"] == "compiling\nld: error\n"
    assert "stderr" not in facts  # not known apart: rules on `stderr` read the log
    assert facts["cwd"] == str(ROOT)
    assert facts["command"].endswith("sys.exit(7)'")


def test_run_separate_stderr_keeps_the_commands_stderr_on_stderr_and_sends_it_alone(
    offline_env: Path,
) -> None:
    script = "import sys; print('compiling'); print('ld: error', file=sys.stderr); sys.exit(7)"
    code, out, err = run_cli("run", "--separate-stderr", "--", sys.executable, "-c", script)
    assert (code, out) == (7, "compiling\n")
    assert err.startswith("ld: error\n")
    (spooled,) = offline_env.glob("*.json")
    facts = json.loads(json.loads(spooled.read_text())["facts_json"])
    assert facts["stderr"] == "ld: error\n"
    assert sorted(facts["log"].splitlines()) == ["compiling", "ld: error"]


def test_run_of_a_passing_command_reports_nothing(offline_env: Path) -> None:
    code, out, _ = run_cli("run", "--", sys.executable, "-c", "print('ok')")
    assert (code, out) == (0, "ok\n")
    assert not offline_env.exists()


def test_success_without_a_job_is_a_usage_error_naming_what_to_give(
    offline_env: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "build.log"
    log.write_text("all checks passed\n")
    for name in ("GITHUB_REPOSITORY", "CI_JOB_NAME", "JOB_NAME", "TRAVIS_JOB_NAME"):
        monkeypatch.delenv(name, raising=False)
    assert main(["success", "--log", str(log)]) == 2
    assert "give --fact job=NAME" in capsys.readouterr().err


def test_a_passing_run_is_never_spooled_when_theow_is_down(
    offline_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "build.log"
    log.write_text("all checks passed\n")
    assert main(["success", "--log", str(log), "--fact", "job=api/build"]) == 0
    assert "passing run of api/build not sent" in capsys.readouterr().out
    code, out, _ = run_cli("run", "--fact", "job=api/build", "--", sys.executable, "-c", "print(1)")
    assert (code, out) == (0, "1\n")
    assert not offline_env.exists()


def test_flush_reports_counts(offline_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["submit", "--fact", "a=b"])
    capsys.readouterr()
    assert main(["flush"]) == 0
    assert capsys.readouterr().out == "sent 0, 1 remaining\n"


def test_human_verdict_shows_rule_actions_outputs_and_reason() -> None:
    verdict = Verdict(
        failure_id="f-1",
        status=Status.RESOLVED,
        rule="go_module_path_rename",
        mode="fix",
        actions=(BoundAction("go_mod_replace", {"old_path": "a", "new_path": "b"}, True),),
        outputs=({"action": "go_mod_replace", "output": {"status": "ok"}},),
        reason="matched",
    )
    text = format_verdict(verdict)
    assert "status:  resolved" in text
    assert "rule:    go_module_path_rename (mode fix)" in text
    assert 'action:  go_mod_replace old_path="a" new_path="b" [client-side]' in text
    assert '"output": {"status": "ok"}' in text
    assert "reason:  matched" in text


@pytest.mark.parametrize(
    ("levels", "problem"),
    [
        (520, "facts: facts.n[0][0]"),  # parses, then refused by the validation
        (1000, "nested too deeply to parse"),  # json itself would raise RecursionError
        (100_000, "nested too deeply to parse"),
    ],
)
def test_deep_facts_are_one_line_naming_what_and_where_never_a_traceback(
    offline_env: Path, tmp_path: Path, levels: int, problem: str
) -> None:
    facts = tmp_path / "deep.json"
    facts.write_text('{"stderr": "x", "n": ' + "[" * levels + "]" * levels + "}")
    code, _, err = run_cli("submit", "--facts-file", str(facts))
    assert code == 2
    assert err.startswith("theow-client: ") and problem in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not offline_env.exists()  # nothing spooled


def test_invalid_utf8_in_an_argument_is_replaced_not_a_crash(
    offline_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What Python makes of `--fact "stderr=$(printf 'error: \xff')"`: a lone surrogate.
    assert main(["submit", "--json", "--fact", "stderr=error: \udcff"]) == 0
    printed = json.loads(capsys.readouterr().out)
    payload = json.loads((offline_env / f"{printed['failure_id']}.json").read_text())
    assert json.loads(payload["facts_json"]) == {"stderr": "error: \ufffd"}


def test_human_verdict_shows_the_line_to_look_at_and_what_the_rule_captured() -> None:
    verdict = Verdict.from_dict(
        {
            "failure_id": "f-2",
            "status": "tracked",
            "rule": "go_test_failed",
            "mode": "track",
            "evidence": {"fact": "log", "line": 42, "text": "--- FAIL: TestParse  (0.00s)"},
            "captures": {"test": "TestParse", "where": "parse_test.go:41"},
        }
    )
    lines = format_verdict(verdict).splitlines()
    assert "line:    log:42: --- FAIL: TestParse (0.00s)" in lines
    assert "captured: test=TestParse where=parse_test.go:41" in lines
    assert "done:    nothing run (mode track)" in lines


def test_an_unmatched_verdict_shows_the_lines_to_look_at_instead_of_nothing() -> None:
    verdict = Verdict.from_dict(
        {
            "failure_id": "f-3",
            "status": "unmatched",
            "reason": "no rule matched (212 checked)",
            "where": [
                {"fact": "log", "line": 399_990, "text": "KeyError: 'DATABASE_URL'"},
                {"fact": "log", "line": 399_989, "text": "Traceback (most recent call last):"},
            ],
        }
    )
    lines = format_verdict(verdict).splitlines()
    at = lines.index("look at: log line 399,990: KeyError: 'DATABASE_URL'")
    assert lines[at + 1] == "         log line 399,989: Traceback (most recent call last):"


def test_a_line_to_look_at_reaches_the_terminal_without_its_escape_sequences() -> None:
    hostile = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07error: \x1b[2Jit broke"
    verdict = Verdict.from_dict(
        {
            "failure_id": "f-4",
            "status": "unmatched",
            "where": [{"fact": "log", "line": 7, "text": hostile}],
        }
    )
    text = format_verdict(verdict)
    assert "\x1b" not in text and "\x07" not in text
    assert "look at: log line 7: " in text and "it broke" in text
