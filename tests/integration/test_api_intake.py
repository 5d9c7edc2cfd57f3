"""An agent without broker credentials: its failures go over HTTP to the web intake.

A real fleet (Redis, a real resolver worker, SQLite), the real app under
uvicorn on loopback, and the real client: its broker URL points at a port
where nothing listens, so a verdict can only have come through the intake.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from tests.conftest import free_port
from tests.integration.test_api import API, call
from tests.integration.test_web_console import PASSWORD, Server
from theow_client import TheowClient
from theow_client.client import Ticket
from theow_client.verdict import Status

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NO_BROKER = "redis://127.0.0.1:1/0"


def web(fleet):
    return Server(fleet.settings.model_copy(update={"web_password": SecretStr(PASSWORD)}))


def http_client(tmp_path: Path, token: str, url: str) -> TheowClient:
    return TheowClient(redis_url=NO_BROKER, spool_dir=tmp_path / "spool", token=token,
                       intake_url=url)  # fmt: skip


def test_an_agent_submits_over_http_and_reads_only_its_own_verdict(fleet, tmp_path):
    fleet.start_worker()
    token, other = fleet.add_token("http-agent"), fleet.add_token("other-agent")
    reader = fleet.add_token("a-dashboard", "api-read")
    with web(fleet) as server:
        client = http_client(tmp_path, token, server.url)
        ticket = client.submit({"stderr": "step 3\nECHO hello\n", "job": "build-9"})
        assert not ticket.spooled
        verdict = ticket.wait(60)
        assert verdict.status is Status.RESOLVED
        assert verdict.rule == "tf_echo"
        assert verdict.failure_id == ticket.failure_id
        # Recorded as the agent's, on the normal resolve path: attempts, stats.
        assert fleet.store().failure_agent(ticket.failure_id) == (True, "http-agent")
        assert fleet.store().rule_stats()["tf_echo"].successes == 1

        path = f"{server.url}{API}/failures/{ticket.failure_id}/verdict"
        own = call(path, token=token)
        assert own.status == 200 and own.body["status"] == "resolved"
        refused = call(path, token=other)
        assert refused.status == 404
        assert "resolved" not in json.dumps(refused.body)
        assert call(path, token=reader).status == 403
        assert call(path).status == 401
        # The same failure in the read API, for the dashboard.
        listed = call(f"{server.url}{API}/failures?job=build-9", token=reader).body
        assert [f["id"] for f in listed["failures"]] == [ticket.failure_id]


def test_a_failure_the_intake_cannot_take_is_spooled_and_sent_by_flush(fleet, tmp_path):
    fleet.start_worker()
    token = fleet.add_token("spooling-agent")
    down = f"http://127.0.0.1:{free_port()}"
    client = http_client(tmp_path, token, down)
    ticket = client.submit({"stderr": "ECHO later", "job": "build-10"})
    assert ticket.spooled
    assert ticket.wait(1).status is Status.SPOOLED
    assert client.flush() == (0, 1)  # still down: kept
    with web(fleet) as server:
        client = http_client(tmp_path, token, server.url)
        assert client.flush() == (1, 0)
        verdict = Ticket(ticket.failure_id, client=client, agent=client.agent).wait(60)
    assert verdict.status is Status.RESOLVED
    assert verdict.failure_id == ticket.failure_id


def test_a_refused_submission_is_answered_at_once_and_never_spooled(fleet, tmp_path):
    reader = fleet.add_token("not-an-agent", "api-read")
    with web(fleet) as server:
        client = http_client(tmp_path, reader, server.url)
        ticket = client.submit({"stderr": "ECHO no"})
        assert not ticket.spooled
        verdict = ticket.wait(5)
    assert verdict.status is Status.REJECTED
    assert "403" in verdict.reason and "read-only" in verdict.reason
    assert client.spool.pending() == []


def test_theow_client_run_uses_the_intake_url_from_the_environment(fleet, tmp_path):
    fleet.start_worker()
    token = fleet.add_token("run-agent")
    with web(fleet) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("THEOW_")}
        env.update(PYTHONPATH=str(ROOT), THEOW_INTAKE_URL=server.url, THEOW_AGENT_TOKEN=token,
                   THEOW_REDIS_URL=NO_BROKER, THEOW_SPOOL_DIR=str(tmp_path / "spool"),
                   THEOW_CLIENT_WAIT="60", CI_JOB_NAME="build-11")  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "theow_client.cli", "run", "--no-passing", "--",
             "sh", "-c", "echo 'ECHO hello' >&2; exit 3"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 3, result.stderr  # the build's own exit code
    assert "tf_echo" in result.stdout + result.stderr
    assert not list((tmp_path / "spool").glob("*.json"))
