"""End to end on the embedded stack: the real client with GitHub Actions' variables, a real
worker recording its runs, and one alert per incident and event at a receiver on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_alerts import SECRET, Receiver
from theow_workers.integrations import alerts

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAILING = "echo 'ECHO hello' >&2; exit 3"  # the fixture rules' tf_echo matches it


def client_run(tmp_path: Path, sha: str, attempt: int, command: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI"))}
    env.update(
        PYTHONPATH=str(ROOT), THEOW_SPOOL_DIR=str(tmp_path / "spool"), THEOW_CLIENT_WAIT="120",
        GITHUB_ACTIONS="true", GITHUB_REPOSITORY="acme/app", GITHUB_WORKFLOW="CI",
        GITHUB_JOB="test", GITHUB_SHA=sha * 40, GITHUB_REF="refs/heads/main",
        GITHUB_REF_NAME="main", GITHUB_RUN_ID=str(100 + attempt), GITHUB_RUN_ATTEMPT="1",
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "theow_client.cli", "run", "--no-passing", "--", "sh", "-c",
         command],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return result.returncode


def events_within(receiver: Receiver, count: int, timeout: float = 90) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(receiver.received) < count:
        time.sleep(0.2)
    return [str(body["event"]) for body in receiver.bodies()]


def test_main_breaking_and_being_fixed_reaches_the_receiver_once_each(fleet, tmp_path, monkeypatch):
    with Receiver() as receiver:
        monkeypatch.setenv("THEOW_ALERT_URL", receiver.url)
        monkeypatch.setenv("THEOW_ALERT_SECRET", SECRET)
        fleet.stack.start_worker(["resolve", "passing"], name="resolver")
        fleet.wait_for_worker("resolver")

        assert client_run(tmp_path, "a", 1, "true") == 0
        assert client_run(tmp_path, "b", 2, FAILING) == 3
        assert client_run(tmp_path, "c", 3, FAILING) == 3  # main is broken: said once
        assert events_within(receiver, 1) == ["main_broken"]
        assert client_run(tmp_path, "d", 4, FAILING) == 3  # the same incident: nothing new
        assert client_run(tmp_path, "e", 5, "true") == 0
        assert events_within(receiver, 2) == ["main_broken", "main_fixed"]
        time.sleep(2)  # nothing more arrives for the same incident
        assert len(receiver.received) == 2

    (headers, raw), _ = receiver.received
    assert alerts.verify(SECRET.encode(), raw, headers["X-Theow-Signature"])
    broken, fixed = receiver.bodies()
    assert broken["incident"]["culprit"] == "b" * 40
    assert fixed["incident"]["fixed_by"] == "e" * 40
    assert f"is broken on the default branch since `{'b' * 40}`" in str(broken["text"])
    assert broken["incident"]["repo"].endswith("acme/app")  # the agent's own scope of it
