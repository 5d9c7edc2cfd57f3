"""Flower shows every worker, queue and task, and only to whoever has the password.

Flower is started the way `theow up --flower` and the compose `flower` service
start it (`theow_workers.ops.flower.flower_command`: `celery -A
theow_workers.celery_app:monitor flower --port=P --address=127.0.0.1`, the credentials
in Flower's environment), and read through its REST API.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tests.conftest import free_port, wait_port
from theow_client import Status
from theow_client.redact import redact_text
from theow_workers.ops.flower import flower_command

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
USER, PASSWORD = "ops", "flower-test-pw"


def get(url: str, auth: tuple[str, str] | None = (USER, PASSWORD)) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(":".join(auth).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read().decode()
            return response.status, json.loads(body) if body.startswith(("{", "[")) else body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def eventually(probe: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_flower_shows_the_workers_queues_and_a_finished_task_only_with_credentials(
    fleet, explorers, tmp_path
):
    _, start = explorers
    start()  # a resolver and an explorer, as in production
    settings = fleet.settings.model_copy(
        update={"flower_user": USER, "flower_password": SecretStr(PASSWORD)}
    )
    port = free_port()
    command = flower_command(settings, port=port)
    assert not any(PASSWORD in arg for arg in command.argv)  # not readable in `ps`
    flower = command.start(os.environ, tmp_path / "flower.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_port(port, flower)

        def workers() -> dict[str, Any]:
            status, body = get(f"{base}/api/workers?refresh=1")
            names = " ".join(body) if status == 200 else ""
            return body if "resolver@" in names and "explorer0@" in names else {}

        listed = eventually(workers, "Flower to list the resolver and the explorer")
        queues_of = {
            name: {q["name"] for q in info.get("active_queues", [])}
            for name, info in listed.items()
        }
        assert any(q == {"resolve"} for n, q in queues_of.items() if n.startswith("resolver@"))
        assert any(q == {"explore"} for n, q in queues_of.items() if n.startswith("explorer0@"))

        status, body = get(f"{base}/api/queues/length")
        assert status == 200, body
        assert {"resolve", "explore"} <= {q["name"] for q in body["active_queues"]}

        def receiving() -> bool:  # a task's events are shown only if they come after this
            status, body = get(f"{base}/workers?json=1")  # the workers Flower has events from
            hosts = [w.get("hostname", "") for w in body["data"]] if status == 200 else []
            return any(h.startswith("resolver@") for h in hosts)

        eventually(receiving, "Flower to receive the resolver's events")
        token = "ghp_" + "Flw0" * 9
        log = f"export GITHUB_TOKEN={token}\nECHO flower"
        verdict = fleet.client().submit({"stderr": log, "job": "j"}).wait(60)
        assert verdict.status is Status.RESOLVED

        def task() -> dict[str, Any]:
            status, body = get(f"{base}/api/tasks?taskname=theow.resolve")
            return body.get(verdict.failure_id, {}) if status == 200 else {}

        seen = eventually(lambda: task().get("state") == "SUCCESS" and task(), "the task")
        assert seen["name"] == "theow.resolve"
        assert seen["worker"].startswith("resolver@")
        # The task's arguments as Flower shows them: the failure and its facts' sizes only.
        sent = len(redact_text(log))  # the client masks the token before sending
        assert seen["args"] == f"failure {verdict.failure_id} facts={{'stderr': {sent}, 'job': 1}}"
        assert seen["kwargs"] == "{}"
        assert "ECHO flower" not in seen["args"]
        # The result is the verdict: its evidence line is log text, masked like all of it.
        assert token not in json.dumps(seen)

        for path in ("/api/workers", "/api/tasks", "/api/queues/length"):
            assert get(f"{base}{path}", auth=None)[0] == 401, path
            assert get(f"{base}{path}", auth=(USER, "wrong-password"))[0] == 401, path
    finally:
        flower.terminate()
        flower.wait(20)
    assert PASSWORD not in (tmp_path / "flower.log").read_text(errors="replace")


def test_flower_is_refused_without_a_password(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THEOW_", "FLOWER_"))}
    result = subprocess.run(
        [sys.executable, "-m", "theow_workers.ops.flower"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "never started without authentication" in result.stderr
    assert "THEOW_FLOWER_PASSWORD" in result.stderr


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_theow_up_flower_refuses_without_a_password_before_starting_anything(tmp_path):
    redis_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THEOW_", "FLOWER_"))}
    env.update(
        THEOW_HOME=str(tmp_path / "home"), THEOW_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0"
    )
    result = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "up", "--flower"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "THEOW_FLOWER_PASSWORD" in result.stderr
    assert not listening(redis_port)
    assert not (tmp_path / "home").exists()


def test_theow_up_flower_serves_flower_behind_basic_auth(tmp_path):
    redis_port, milvus_port, flower_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THEOW_", "FLOWER_"))}
    env.update(
        THEOW_HOME=str(tmp_path / "home"),
        THEOW_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        THEOW_MILVUS_URI=f"http://127.0.0.1:{milvus_port}",
        THEOW_RULES_DIR=str(FIXTURES / "rules"),
        THEOW_ACTIONS_DIR=str(FIXTURES / "actions"),
        THEOW_FLOWER_USER=USER,
        THEOW_FLOWER_PASSWORD=PASSWORD,
        THEOW_FLOWER_PORT=str(flower_port),
    )
    up = subprocess.Popen(
        [sys.executable, "-m", "theow_workers.cli", "up", "--workers", "1", "--flower"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{flower_port}"
    try:
        eventually(lambda: up.poll() is not None or listening(flower_port), "Flower", 120)
        assert up.poll() is None, up.stdout.read() if up.stdout else ""

        def workers() -> list[str]:
            status, body = get(f"{base}/api/workers?refresh=1")
            names = sorted(body) if status == 200 else []
            roles = {n.split("@")[0] for n in names}
            return names if {"resolver", "replay"} <= roles else []

        eventually(workers, "Flower to list the resolver and replay workers", 120)
        assert get(f"{base}/api/workers", auth=None)[0] == 401
    finally:
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=90)
    assert up.returncode == 0, output
    assert f"flower: http://127.0.0.1:{flower_port}" in output
    assert PASSWORD not in output
    assert not listening(flower_port)
