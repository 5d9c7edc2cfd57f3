"""The explorer's shell and network tools run in a sandbox, as a model steered by a log would test it.

The model is the fake Gemini server; what it asks for is what an injected build
log would make it ask for. The commands run in real bubblewrap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fakes.gemini_server import function_call, function_responses
from theow_client import Status
from theow_workers.core.llm.model import ToolError
from theow_workers.explorer.tools import Workspace

ROOT = Path(__file__).resolve().parents[2]
MODEL = "gemini-2.5-flash"
CANARY = "canary-9f3b1c"  # a secret no masking knows: only the sandbox keeps it in
LINGER = "987654"  # the model's `sleep` lasts this long; found in /proc if it lingers


class LoopbackServer:
    """An HTTP server on the host's 127.0.0.1 that counts the requests reaching it."""

    def __init__(self) -> None:
        hits = self.hits = [0]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits[0] += 1
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"reached")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fetch_command(self) -> list[str]:
        code = f"import urllib.request as u; print(u.urlopen({self.url!r}, timeout=5).read())"
        return ["python3", "-c", code]


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    server = LoopbackServer()
    yield server
    server.server.shutdown()
    server.server.server_close()


def lingering() -> list[str]:
    """Live processes running the model's long sleep (a /proc scan)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or it just ended
            continue
        if entry.name.isdigit() and argv[0].endswith(b"sleep") and LINGER.encode() in argv:
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            found.append(f"{entry.name} (parent {parent}): {b' '.join(argv).decode()}")
    return found


@pytest.mark.integration
def test_a_model_given_the_shell_reads_no_secret_reaches_no_network_and_leaves_nothing_running(
    fleet, explorers, loopback, monkeypatch
):
    fake, start = explorers
    (fleet.home / "secrets.env").write_text(f"DEPLOY_TOKEN={CANARY}\n")
    monkeypatch.setenv("DEPLOY_TOKEN", CANARY)
    monkeypatch.setenv("THEOW_EXPLORE_PERMISSIONS", "shell")
    steal = (
        "cat /proc/$PPID/environ /proc/1/environ; env; echo $GEMINI_API_KEY $DEPLOY_TOKEN; "
        f"cat {fleet.home}/secrets.env; ls -a {Path.home()} {fleet.home}; echo the-shell-ran"
    )
    leave = (f"sleep {LINGER} & setsid sleep {LINGER} & nohup sleep {LINGER} >/dev/null 2>&1 & "
             "echo left-running")  # fmt: skip
    steps = [
        function_call("run_command", command=["sh", "-c", steal]),
        function_call("run_command", command=loopback.fetch_command()),
        function_call("run_command", command=["sh", "-c", leave]),
        function_call("give_up", reason="nothing more to try"),
    ]
    fake.brain = lambda model, body: steps[len(function_responses(body))]
    start()

    ticket = fleet.client().submit({"stderr": "ERROR: nothing known fails here\n"}, explore=True)
    assert ticket.wait(60).status is Status.EXPLORING
    assert ticket.wait_exploration(120)["outcome"] == "gave_up"

    stolen, fetched, left = (str(r) for r in function_responses(fake.bodies(MODEL)[-1]))
    assert "the-shell-ran" in stolen  # the commands did run, in the sandbox
    assert CANARY not in stolen and "test-key-not-secret" not in stolen
    assert "THEOW_HOME" not in stolen and "THEOW_REDIS_URL" not in stolen
    assert "'exit_code': 0" not in fetched and loopback.hits == [0]
    assert "left-running" in left
    assert lingering() == []


def test_with_the_network_permission_a_command_reaches_the_network_and_without_it_cannot(
    loopback,
):
    offline, online = Workspace({}, ["shell"]), Workspace({}, ["shell", "network"])
    try:
        refused = offline.run_command(loopback.fetch_command())
        assert refused["exit_code"] != 0 and loopback.hits == [0]
        reached = online.run_command(loopback.fetch_command())
        assert reached["exit_code"] == 0 and "reached" in reached["stdout"]
    finally:
        offline.close()
        online.close()


def test_a_command_past_its_time_limit_is_killed_with_everything_it_started() -> None:
    workspace = Workspace({}, ["shell"], command_timeout=1)
    try:
        with pytest.raises(ToolError, match="timed out after 1s; it was killed"):
            workspace.run_command(["sh", "-c", f"setsid sleep {LINGER} & sleep {LINGER}"])
    finally:
        workspace.close()
    assert lingering() == []


def test_a_command_sees_the_workspace_and_system_programs_only() -> None:
    workspace = Workspace({}, ["shell"])
    try:
        workspace.write_file("notes.txt", "from the model")
        seen = workspace.run_command(["sh", "-c", "ls / /etc; cat notes.txt; id -u; touch /usr/x"])
    finally:
        workspace.close()
    assert "from the model" in seen["stdout"]
    assert "65534" in seen["stdout"]  # nobody: no capability, as root or not
    listing = seen["stdout"].split()
    assert "root" not in listing and "home" not in listing and "work" not in listing
    assert "passwd" not in listing and "shadow" not in listing
    assert "Read-only file system" in seen["stderr"]


@pytest.fixture(params=["missing", "failing"])
def unusable_bwrap(request, tmp_path) -> str:
    """A bwrap setting that names no program, or one that fails as bwrap does without userns."""
    if request.param == "missing":
        return str(tmp_path / "no-such-bwrap")
    script = tmp_path / "bwrap"
    script.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    script.chmod(0o755)
    return str(script)


def test_without_a_usable_sandbox_a_command_is_refused_and_never_run(
    unusable_bwrap, tmp_path
) -> None:
    marker = tmp_path / "ran"
    workspace = Workspace({}, ["shell"], bwrap=unusable_bwrap)
    try:
        with pytest.raises(ToolError, match="commands are not run without a sandbox: bubblewrap"):
            workspace.run_command(["touch", str(marker)])
    finally:
        workspace.close()
    assert not marker.exists()


@pytest.mark.parametrize("permissions", ["shell", "network", "fs-read,shell,network"])
def test_an_explorer_granted_shell_or_network_without_a_usable_sandbox_refuses_to_start(
    unusable_bwrap, permissions
) -> None:
    env = {"PATH": os.environ["PATH"], "THEOW_REDIS_URL": "redis://127.0.0.1:1/0",
           "THEOW_EXPLORE": "1", "GEMINI_API_KEY": "test-key-not-secret",
           "THEOW_EXPLORE_PERMISSIONS": permissions,
           "THEOW_EXPLORE_BWRAP": unusable_bwrap}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "worker", "--queues", "explore"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "not starting an explorer: THEOW_EXPLORE_PERMISSIONS grants " in line
    assert "which run only in a sandbox: bubblewrap" in line
    assert unusable_bwrap in line and "Traceback" not in result.stderr
