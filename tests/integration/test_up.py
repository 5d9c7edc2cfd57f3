"""`theow up`: the embedded stack in the foreground, reachable by a client, stopped by Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port
from theow_client import Status, TheowClient
from theow_client import config as client_config
from theow_workers.config import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

pytestmark = pytest.mark.integration


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_client_and_stack_agree_on_defaults_without_configuration(monkeypatch, tmp_path):
    monkeypatch.delenv("THEOW_REDIS_URL", raising=False)
    monkeypatch.delenv("THEOW_HOME", raising=False)
    # No stack ran in this home (a user's own ~/.theow after `make demo` keeps its password).
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no stack ran here: no generated password joins the URL
    stack_url = Settings.load(env={}).redis_url
    assert client_config.redis_url(None) == stack_url
    assert ":6379/" not in stack_url  # a developer's own Redis on the default port is left alone


def test_theow_up_serves_a_client_and_stops_cleanly_on_ctrl_c(tmp_path, monkeypatch):
    redis_port, milvus_port, web_port = free_port(), free_port(), free_port()
    env = dict(os.environ)
    env.update(
        THEOW_WEB_PASSWORD="console-password",
        THEOW_HOME=str(tmp_path / "home"),
        THEOW_RULES_DIR=str(FIXTURES / "rules"),
        THEOW_ACTIONS_DIR=str(FIXTURES / "actions"),
        THEOW_DATABASE_URL="",
    )
    for name in ("THEOW_REDIS_URL", "THEOW_MILVUS_URI", "THEOW_WEB_PORT"):
        env.pop(name, None)  # the ports are the flags'
    up = subprocess.Popen(
        [
            sys.executable, "-m", "theow_workers.cli", "up", "--workers", "1",
            "--redis-port", str(redis_port), "--milvus-port", str(milvus_port),
            "--web-port", str(web_port),
        ],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    shown: list[str] = []
    try:
        while not shown or "theow is up" not in shown[-1]:  # printed once everything started
            line = up.stdout.readline()
            assert line, "theow up exited: " + "".join(shown)
            shown.append(line)
        # As a user's second terminal: no broker URL, no token; the env file `theow up` wrote.
        monkeypatch.delenv("THEOW_REDIS_URL", raising=False)
        monkeypatch.delenv("THEOW_AGENT_TOKEN", raising=False)
        written = Path(env["THEOW_CLIENT_ENV"]).read_text()
        password = (tmp_path / "home" / "valkey.password").read_text().strip()
        assert "agent-local:" in written and password not in written  # the agent's user only
        with TheowClient(spool_dir=tmp_path / "spool") as client:
            ticket = client.submit({"stderr": "ECHO up", "job": "j"})
            assert not ticket.spooled, ticket.spooled_for
            verdict = ticket.wait(120)
        assert (verdict.status, verdict.rule) == (Status.RESOLVED, "tf_echo")
        assert (tmp_path / "home" / "theow.db").exists()
        console = f"http://127.0.0.1:{web_port}"
        deadline = time.monotonic() + 60
        while not listening(web_port):  # the console, behind its password
            assert time.monotonic() < deadline and up.poll() is None, "no web console"
            time.sleep(0.2)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{console}/queue", timeout=10)
        assert refused.value.code == 401
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)
        # From the same buffered reader as the lines read above: communicate() would
        # read the pipe itself and miss what that reader already holds.
        rest = up.stdout.read()
    output = "".join(shown) + rest
    assert up.returncode == 0, output
    assert "theow is up" in output and password not in output
    assert f"web console: {console}" in output
    assert not listening(redis_port) and not listening(milvus_port) and not listening(web_port)


def test_theow_up_on_a_taken_port_names_it_and_its_flag_before_starting_anything(tmp_path):
    redis_port, milvus_port = free_port(), free_port()
    env = dict(os.environ, THEOW_HOME=str(tmp_path / "home"), THEOW_DATABASE_URL="")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", milvus_port))
        taken.listen()
        result = subprocess.run(
            [
                sys.executable, "-m", "theow_workers.cli", "up",
                "--redis-port", str(redis_port), "--milvus-port", str(milvus_port),
            ],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr == (
        f"error: port {milvus_port} on 127.0.0.1 is in use: choose another with --milvus-port\n"
    )
    assert result.stdout == ""
    assert not (tmp_path / "home").exists()  # not even Valkey, whose port was free, started


def test_a_killed_theow_up_leaves_no_server_holding_its_ports(tmp_path):
    """SIGKILL gives `theow up` no chance to clean up: its children end on their own."""
    redis_port, milvus_port = free_port(), free_port()
    env = dict(os.environ)
    env.update(
        THEOW_HOME=str(tmp_path / "home"),
        THEOW_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        THEOW_MILVUS_URI=f"http://127.0.0.1:{milvus_port}",
        THEOW_RULES_DIR=str(FIXTURES / "rules"),
        THEOW_ACTIONS_DIR=str(FIXTURES / "actions"),
        THEOW_DATABASE_URL="",
    )
    up = subprocess.Popen(
        [sys.executable, "-m", "theow_workers.cli", "up", "--workers", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not (listening(redis_port) and listening(milvus_port)):
            assert up.poll() is None and time.monotonic() < deadline, "theow up did not start"
            time.sleep(0.2)
    finally:
        up.kill()
        up.wait(10)
    deadline = time.monotonic() + 30
    while (listening(redis_port) or listening(milvus_port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not listening(redis_port), "Valkey outlived a killed `theow up`"
    assert not listening(milvus_port), "Milvus Lite outlived a killed `theow up`"


def test_theow_web_on_a_taken_port_is_one_error_line_and_no_url(tmp_path):
    port = free_port()
    env = dict(os.environ, THEOW_WEB_PASSWORD="console-password", THEOW_HOME=str(tmp_path / "home"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = subprocess.run(
            [sys.executable, "-m", "theow_workers.cli", "web", "--port", str(port)],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode != 0
    assert result.stdout == ""  # no URL that leads nowhere
    assert result.stderr == (
        f"error: port {port} on 127.0.0.1 is in use: choose another with --port\n"
    )
