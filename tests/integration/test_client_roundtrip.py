"""End to end through a real Redis and a real Celery worker running a fake resolver.

Given a resolver that answers each scenario from a script, the client submits,
waits, runs client-side actions and re-runs the failing step or command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest_client import *  # noqa: F403
from tests.integration.conftest_client import (
    FakeResolver,
    fixed_by_touch_marker,
    raises,
    verdict,
)
from theow_client import TheowClient, mark
from theow_client.cli import main
from theow_client.verdict import Status

pytestmark = pytest.mark.integration


def test_submit_then_wait_returns_the_workers_verdict(resolver: FakeResolver) -> None:
    resolver.script("roundtrip", verdict(Status.TRACKED, rule="known_flake", mode="track"))
    with TheowClient() as client:
        ticket = client.submit(
            {"scenario": "roundtrip", "stderr": "boom"}, rules=["known_flake"], tags=["ci"]
        )
        result = ticket.wait(timeout=20)

    assert not ticket.spooled
    assert (result.failure_id, result.status, result.rule) == (
        ticket.failure_id,
        Status.TRACKED,
        "known_flake",
    )
    (payload,) = resolver.payloads("roundtrip")
    assert payload["failure_id"] == ticket.failure_id
    assert json.loads(payload["facts_json"]) == {"scenario": "roundtrip", "stderr": "boom"}
    assert payload["hints"] == {
        "rules": ["known_flake"], "tags": ["ci"], "fallback": True, "max_retries": 3,
    }  # fmt: skip
    assert payload["source"] == "theow-client"


def test_a_slow_worker_is_waited_for_past_the_connection_timeout(resolver: FakeResolver) -> None:
    resolver.script("slow", verdict(Status.UNMATCHED, delay=3.0))
    with TheowClient(timeout=1.0) as client:
        result = client.submit({"scenario": "slow"}).wait(timeout=20)
    assert result.status is Status.UNMATCHED


def test_no_verdict_in_time_raises_timeout_naming_the_failure(resolver: FakeResolver) -> None:
    resolver.script("late", verdict(Status.UNMATCHED, delay=3.0))
    with TheowClient() as client:
        ticket = client.submit({"scenario": "late"})
        with pytest.raises(TimeoutError, match=f"no verdict for failure {ticket.failure_id}"):
            ticket.wait(timeout=0.5)
        assert ticket.wait(timeout=20).status is Status.UNMATCHED  # it does arrive later


def test_a_crashing_resolve_task_becomes_an_error_verdict(resolver: FakeResolver) -> None:
    resolver.script("crash", raises("resolver bug"))
    with TheowClient() as client:
        result = client.submit({"scenario": "crash"}).wait(timeout=20)
    assert result.status is Status.ERROR
    assert "resolver bug" in result.reason


def test_flush_delivers_spooled_failures_with_their_original_ids(
    resolver: FakeResolver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = tmp_path / "spool"
    dead = TheowClient(redis_url="redis://127.0.0.1:1/0", spool_dir=spool)
    spooled = dead.submit({"scenario": "flushed"}, idempotency_key="build-9")
    assert spooled.spooled
    resolver.script("flushed", verdict(Status.RETRY, mode="retry"))

    with TheowClient(spool_dir=spool) as client:
        assert client.flush() == (1, 0)
        result = client.ticket(spooled.failure_id).wait(timeout=20)

    assert result.status is Status.RETRY
    assert [p["failure_id"] for p in resolver.payloads("flushed")] == [spooled.failure_id]


def test_mark_retries_the_step_and_runs_the_client_side_fix(
    resolver: FakeResolver, actions_dir: Path, tmp_path: Path
) -> None:
    # Given a step that fails until a marker file exists, and a resolver that
    # first calls the failure transient, then fixes it with a client-side action.
    resolver.script("mark", verdict(Status.RETRY, mode="retry"), fixed_by_touch_marker("marker"))
    runs = []

    @mark(
        lambda target: {"scenario": "mark", "target": target},
        tags=["go"],
        actions_dir=actions_dir,
        workspace=str(tmp_path),
        wait_timeout=20,
    )
    def build(target: str) -> str:
        runs.append(target)
        if not (tmp_path / "marker").exists():
            raise RuntimeError(f"cannot build {target}: marker missing")
        return "built"

    assert build("./cmd") == "built"
    assert runs == ["./cmd"] * 3
    payloads = resolver.payloads("mark")
    assert len(payloads) == 2
    assert (
        json.loads(payloads[0]["facts_json"])["exception"]
        == "RuntimeError: cannot build ./cmd: marker missing"
    )
    assert "Traceback" in json.loads(payloads[0]["facts_json"])["traceback"]
    assert payloads[0]["hints"]["tags"] == ["go"]


def test_mark_gives_up_after_max_retries_with_the_last_error(resolver: FakeResolver) -> None:
    resolver.script("always", *[verdict(Status.RETRY, mode="retry")] * 5)
    runs = []

    @mark(lambda: {"scenario": "always"}, max_retries=2, wait_timeout=20)
    def flaky() -> None:
        runs.append(1)
        raise ConnectionResetError(f"attempt {len(runs)}")

    with pytest.raises(ConnectionResetError, match="attempt 3"):
        flaky()
    assert len(runs) == 3
    assert len(resolver.wait_for("always", 3)) == 3  # the last one reported, not waited for


def test_mark_does_not_rerun_an_unmatched_failure(resolver: FakeResolver) -> None:
    runs = []

    @mark(lambda: {"scenario": "unknown"}, wait_timeout=20)
    def step() -> None:
        runs.append(1)
        raise KeyError("no rule knows me")

    with pytest.raises(KeyError, match="no rule knows me"):
        step()
    assert runs == [1]


def test_run_reruns_a_command_that_theow_fixed(
    resolver: FakeResolver,
    actions_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    resolver.script("run-fix", fixed_by_touch_marker("marker"))
    script = (
        "import os, sys\n"
        "if not os.path.exists('marker'):\n"
        "    sys.exit(print('error: marker missing', file=sys.stderr) or 3)\n"
        "print('built')\n"
    )
    options = ["--retries", "2", "--retry-delay", "0", "--fact", "scenario=run-fix"]
    options += ["--wait-timeout", "20"]
    options += ["--actions-dir", str(actions_dir)]
    code = main(["run", *options, "--", sys.executable, "-c", script])

    assert code == 0
    out, err = capfd.readouterr()
    assert out == "error: marker missing\nbuilt\n"  # both runs' output, both streams
    assert "re-running" in err
    (payload,) = resolver.payloads("run-fix")
    assert json.loads(payload["facts_json"])["exit_code"] == 3
    assert json.loads(payload["facts_json"])["log"] == "error: marker missing\n"
    assert json.loads(payload["facts_json"])["cwd"] == str(tmp_path)


def test_run_exit_code_is_the_last_runs_when_theow_cannot_fix_it(
    resolver: FakeResolver, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    resolver.script("run-flaky", *[verdict(Status.RETRY, mode="retry")] * 5)
    counter = tmp_path / "runs"
    script = (
        "import pathlib, sys\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
        "sys.exit(4 + len(p.read_text()))\n"
    )
    options = ["--retries", "2", "--retry-delay", "0", "--fact", "scenario=run-flaky"]
    options += ["--wait-timeout", "20", "--json"]
    code = main(["run", *options, "--", sys.executable, "-c", script])

    assert code == 7  # third and last run: 4 + 3
    assert counter.read_text() == "xxx"
    verdicts = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line[:1] == "{"]
    assert [v["status"] for v in verdicts] == ["retry", "retry", "retry"]  # the last one's too
    assert len(resolver.wait_for("run-flaky", 3)) == 3


def test_submit_wait_json_prints_exactly_the_verdict(
    resolver: FakeResolver, capsys: pytest.CaptureFixture[str]
) -> None:
    resolver.script("cli", fixed_by_touch_marker("m"))
    code = main(["submit", "--fact", "scenario=cli", "--wait", "--timeout", "20", "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "resolved"
    assert printed["actions"] == [
        {"action": "touch_marker", "params": {"name": "m"}, "client_side": True}
    ]
    assert set(printed) == {
        "failure_id", "status", "rule", "mode", "actions", "outputs", "reason", "attempts",
        "evidence", "also", "seen_in_passing", "captures", "where", "wrapper",
    }  # fmt: skip


def test_submit_explore_with_no_explorer_times_out_cleanly_with_exit_3(
    resolver: FakeResolver, tmp_path: Path
) -> None:
    # The README's explore example on a stack with no explorer running.
    resolver.script("no-explorer", verdict(Status.EXPLORING, reason="sent to an explorer"))
    log = tmp_path / "build.log"
    log.write_text("something new\n")
    process = subprocess.run(
        [sys.executable, "-m", "theow_client.cli", "submit", "--explore", "--fact",
         "scenario=no-explorer", "--stderr-file", str(log), "--wait", "--timeout", "2"],
        capture_output=True, text=True, env=dict(os.environ), timeout=60,
    )  # fmt: skip
    assert process.returncode == 3
    assert "status:  exploring" in process.stdout
    assert process.stderr.startswith("theow: no exploration outcome for failure ")
    assert "Exception ignored" not in process.stderr
    assert "Traceback" not in process.stderr


def newer_workers_verdict(payload: dict[str, object]) -> dict[str, object]:
    """What a worker released after this client answers: a status and a field it never heard of."""
    return {
        "failure_id": payload["failure_id"],
        "status": "pondering",
        "rule": "make_recipe_failed",
        "hunches": [{"line": 41, "text": "KeyError: 'DATABASE_URL'"}],
    }


def test_a_verdict_from_a_newer_worker_is_shown_as_it_came_not_an_error(
    resolver: FakeResolver, capsys: pytest.CaptureFixture[str]
) -> None:
    resolver.script("newer", newer_workers_verdict)
    with TheowClient() as client:
        result = client.submit({"scenario": "newer"}).wait(timeout=20)
    assert (result.status, result.rule) == ("pondering", "make_recipe_failed")
    assert result.extra == {"hunches": [{"line": 41, "text": "KeyError: 'DATABASE_URL'"}]}

    resolver.script("newer", newer_workers_verdict)
    assert main(["submit", "--fact", "scenario=newer", "--wait", "--timeout", "20"]) == 0
    shown = capsys.readouterr().out
    assert "status:  pondering" in shown
    assert "KeyError: 'DATABASE_URL'" in shown

    resolver.script("newer", newer_workers_verdict)
    assert main(["submit", "--fact", "scenario=newer", "--wait", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hunches"][0]["line"] == 41
