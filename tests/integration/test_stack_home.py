"""One stack per home, found from anywhere: what a user sees after `theow up`, from other directories.

Given a user who ran `THEOW_RULES_DIRS=$PWD/my-rules theow up` on other ports in a
checkout, with no THEOW_* variable in their other shells, when they run `theow`
commands, `theow-client` or `TheowClient()` from an unrelated directory, I expect
them all to reach that stack, with its rules layers; a second `theow up` on the same
home to refuse in one line and change nothing; and a second home to keep its own
stack, env file and token.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.integration

USER_RULE = """\
name: licence_seat_refused
description: The licence server had no free seat; one frees within minutes.
tags: [infra]
mode: retry
when:
  - fact: log
    regex: 'licence server refused seat (?P<seat>\\d+)'
    examples: ["frob: licence server refused seat 7"]
"""
SEAT = "echo 'frob: licence server refused seat 7'; exit 1"
UNKNOWN = "echo 'zorbulator: the flux manifold at bay 3 is misaligned'; exit 1"


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def user_environment(user: Path) -> dict[str, str]:
    """A user's shell: no THEOW_* setting at all, only the machine's model caches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THEOW_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        HOME=str(user),
        HF_HUB_OFFLINE="1",
        THEOW_SPOOL_DIR=str(user / "spool"),
        THEOW_CLIENT_WAIT="120",  # the resolver's first failure loads its model
        THEOW_SCANNER_CACHE=os.environ.get(
            "THEOW_SCANNER_CACHE", str(Path.home() / ".cache" / "theow" / "scanner")
        ),
        THEOW_EMBEDDING_CACHE=os.environ.get(
            "THEOW_EMBEDDING_CACHE", str(Path.home() / ".cache" / "theow" / "embeddings")
        ),
    )
    env.pop("XDG_CONFIG_HOME", None)
    return env


@dataclass
class Up:
    proc: subprocess.Popen[str]
    output: list[str]
    redis_port: int
    milvus_port: int

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=90)
        assert self.proc.stdout is not None
        return "".join(self.output) + self.proc.stdout.read()


def theow_up(env: dict[str, str], cwd: Path, *flags: str) -> Up:
    redis_port, milvus_port = free_port(), free_port()
    argv = [sys.executable, "-m", "theow_workers.cli", "up", "--workers", "1",
            "--redis-port", str(redis_port), "--milvus-port", str(milvus_port), *flags]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    up = Up(proc, [], redis_port, milvus_port)
    assert proc.stdout is not None
    while not up.output or "Ctrl-C stops everything" not in up.output[-1]:  # its last line
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("theow up exited: " + "".join(up.output))
        up.output.append(line)
    return up


@dataclass
class User:
    env: dict[str, str]
    home: Path  # the user's default home, ~/.theow
    checkout: Path  # where they ran `theow up`
    elsewhere: Path  # an unrelated project directory
    my_rules: Path
    up: Up

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env, cwd=cwd or self.elsewhere,
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    def theow(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "theow_workers.cli", *args, cwd=cwd)

    def client(self, command: str, cwd: Path | None = None) -> tuple[str, str]:
        """``theow-client run`` of a failing shell command: (its output, the failure's id)."""
        result = self.run("theow-client", "run", "--", "sh", "-c", command, cwd=cwd)
        assert result.returncode == 1, result.stdout + result.stderr
        output = result.stdout + result.stderr
        ids = [ln.split()[-1] for ln in output.splitlines() if ln.startswith("theow: failure:")]
        assert ids, output
        return output, ids[0]


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Iterator[User]:
    base = tmp_path_factory.mktemp("stack-home")
    checkout, elsewhere, home = base / "checkout", base / "project", base / "user"
    my_rules = checkout / "my-rules"
    for directory in (my_rules, elsewhere, home):
        directory.mkdir(parents=True)
    (my_rules / "licence_seat_refused.rule.yaml").write_text(USER_RULE)
    env = user_environment(home)
    up = theow_up({**env, "THEOW_RULES_DIRS": str(my_rules)}, checkout)
    try:
        user = User(env, home / ".theow", checkout, elsewhere, my_rules, up)
        # The resolver's first failure loads its model and compiles the rules: on a loaded
        # machine longer than a test's wait, so whichever test runs first waits here.
        replace(user, env={**env, "THEOW_CLIENT_WAIT": "280"}).client(SEAT)
        yield user
    finally:
        output = up.stop()
        assert up.proc.returncode == 0, output


def test_the_client_and_the_python_api_reach_the_stack_and_its_rules_from_elsewhere(user):
    output, _ = user.client(SEAT)
    assert "theow: rule:    licence_seat_refused (mode retry)" in output, output
    script = (
        "from theow_client import TheowClient\n"
        "with TheowClient() as client:\n"
        "    ticket = client.submit({'log': 'frob: licence server refused seat 9', 'job': 'j'})\n"
        "    assert not ticket.spooled, ticket.spooled_for\n"
        "    print(ticket.wait(120).rule)\n"
    )
    api = user.run(sys.executable, "-c", script)
    assert (api.returncode, api.stdout.strip()) == (0, "licence_seat_refused"), api.stderr


def test_theow_commands_find_the_stack_from_elsewhere_on_its_ports(user):
    _, failure = user.client(SEAT)
    shown = user.theow("failures", "show", failure)
    assert shown.returncode == 0, shown.stderr
    assert "licence_seat_refused" in shown.stdout
    doctor = user.theow("doctor", "--json")
    failed = [f for f in json.loads(doctor.stdout)["checks"] if f["status"] == "fail"]
    assert failed == [], failed
    replay = user.theow("replay", "--from-db", "--since", "1h", "--json")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "licence_seat_refused" in replay.stdout


def test_an_approved_rule_goes_to_the_layer_given_on_the_up_line(user):
    _, failure = user.client(UNKNOWN)
    taught = user.theow("teach", failure, "--lines", "1-1", "--json")
    assert taught.returncode == 0, taught.stdout + taught.stderr
    teaching = json.loads(taught.stdout)
    approved = user.theow("review", "approve", teaching["proposal_id"])
    assert approved.returncode == 0, approved.stderr
    written = user.my_rules / f"{teaching['rule']}.rule.yaml"
    assert f"wrote {written}" in approved.stdout, approved.stdout
    assert written.is_file()
    assert "not synced" not in approved.stderr, approved.stderr  # the index of the stack's Milvus
    # Listed in its layer, as the console lists it, by a command given no setting.
    listed = user.theow("rules", "list", "--json")
    layers = {row["name"]: row["layer"] for row in json.loads(listed.stdout)}
    assert layers[teaching["rule"]] == str(user.my_rules)
    assert layers["licence_seat_refused"] == str(user.my_rules)


def test_a_second_up_on_a_running_home_refuses_in_one_line_and_touches_nothing(user):
    kept = {p: p.read_bytes() for p in (user.home / "client.env", user.home / "stack.json")}
    logs = {p: p.stat().st_size for p in (user.home / "milvus.log",)}
    redis_port, milvus_port = free_port(), free_port()
    second = user.theow("up", "--redis-port", str(redis_port), "--milvus-port", str(milvus_port))
    assert second.returncode == 1
    assert second.stdout == ""
    assert second.stderr.count("\n") == 1, second.stderr
    assert second.stderr.startswith(f"error: theow is already up on {user.home} ")
    first = user.up
    assert f"pid {first.proc.pid}" in second.stderr
    assert f"redis port {first.redis_port}" in second.stderr
    assert f"milvus port {first.milvus_port}" in second.stderr
    assert {p: p.read_bytes() for p in kept} == kept  # no token rotated, no env file rewritten
    assert {p: p.stat().st_size for p in logs} == logs  # no Milvus Lite started
    assert not listening(redis_port) and not listening(milvus_port)
    output, _ = user.client(SEAT)  # the running stack still takes the agent's failures
    assert "theow: rule:    licence_seat_refused" in output, output


def test_a_second_home_runs_its_own_stack_and_leaves_the_first_ones_files_alone(user, tmp_path):
    other = tmp_path / "other"
    (other / ".theow").mkdir(parents=True)
    first = {p: p.read_bytes() for p in (user.home / "client.env", user.home / "stack.json")}
    up = theow_up(user.env, other)
    try:
        assert f"{other / '.theow'}/client.env" in "".join(up.output)
        deep = other / "src" / "pkg"  # found as git finds .git/: the nearest one above
        deep.mkdir(parents=True)
        output, _ = user.client(SEAT, cwd=deep)
        # Its own stack, which has no such layer, and its own token (no "bad signature").
        assert "theow: status:  unmatched" in output, output
    finally:
        rest = up.stop()
    assert up.proc.returncode == 0, rest
    assert {p: p.read_bytes() for p in first} == first
    theirs = (other / ".theow" / "client.env").read_text()
    ours = (user.home / "client.env").read_text()
    token = [ln for ln in theirs.splitlines() if ln.startswith("THEOW_AGENT_TOKEN=")]
    assert token and token[0] not in ours
    output, _ = user.client(SEAT)  # the first stack, untouched
    assert "theow: rule:    licence_seat_refused" in output, output


def test_a_damaged_stack_file_is_one_line_naming_it_and_never_breaks_a_build(tmp_path):
    home = tmp_path / "project" / ".theow"
    home.mkdir(parents=True)
    (home / "stack.json").write_text("{not json")
    env = {**user_environment(tmp_path / "user"), "THEOW_CLIENT_WAIT": "0"}
    env["THEOW_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens
    cwd = tmp_path / "project"
    listed = subprocess.run([sys.executable, "-m", "theow_workers.cli", "failures", "list"],
                            env=env, cwd=cwd, capture_output=True, text=True)  # fmt: skip
    assert listed.returncode == 2
    assert listed.stderr.startswith(f"error: {home / 'stack.json'}: not JSON"), listed.stderr
    assert listed.stderr.count("\n") == 1, listed.stderr
    build = subprocess.run(["theow-client", "run", "--", "sh", "-c", "exit 3"],
                           env=env, cwd=cwd, capture_output=True, text=True)  # fmt: skip
    assert build.returncode == 3, build.stderr
    assert "Traceback" not in build.stderr
