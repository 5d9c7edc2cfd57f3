"""`theow up` keeps its workers running: a killed resolver comes back, nothing else stops."""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import free_port, wait_until
from theow_client import names

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLIENT = Path(sys.executable).parent / "theow-client"

pytestmark = pytest.mark.integration


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Output:
    """Every line `theow up` prints (stdout and stderr), read as it comes."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)


class Outages:
    """Watches ports from a thread; any moment one does not answer is kept."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.ports, self.seen = ports, []  # type: ignore[var-annotated]
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(0.2):
            self.seen.extend(name for name, port in self.ports.items() if not listening(port))

    def stop(self) -> list[str]:
        self.done.set()
        self.thread.join()
        return self.seen


def resolver_pid(broker: redis.Redis, killed: set[int]) -> int | None:
    """The main process of the worker consuming `resolve` now (its heartbeat), if not one killed."""
    for key in broker.scan_iter(names.key_consumer(names.QUEUE_RESOLVE, "*")):
        beat = broker.get(key)
        pid = int(json.loads(beat)["pid"]) if beat else None
        if pid is not None and pid not in killed:
            return pid
    return None


def submit(env: dict[str, str], spool: Path, stderr: str, job: str) -> subprocess.Popen[str]:
    """`theow-client submit --wait` as an agent on this machine runs it (the env file's token)."""
    facts = ["--fact", f"stderr={stderr}", "--fact", f"job={job}"]
    return subprocess.Popen(
        [
            str(CLIENT),
            "--spool-dir",
            str(spool),
            "submit",
            "--wait",
            "--json",
            "--timeout",
            "180",
            *facts,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Up:
    """`theow up` on free ports, as a user starts it, with what it prints kept."""

    def __init__(self, tmp_path: Path) -> None:
        self.redis_port, self.milvus_port, self.web_port = free_port(), free_port(), free_port()
        self.home = tmp_path / "home"
        self.env = dict(os.environ)
        self.env.update(
            THEOW_WEB_PASSWORD="console-password",
            THEOW_HOME=str(self.home),
            THEOW_RULES_DIR=str(FIXTURES / "rules"),
            THEOW_ACTIONS_DIR=str(FIXTURES / "actions"),
            THEOW_DATABASE_URL="",
        )
        for name in ("THEOW_REDIS_URL", "THEOW_MILVUS_URI", "THEOW_WEB_PORT", "THEOW_AGENT_TOKEN"):
            self.env.pop(name, None)  # the ports are the flags'; the client's token the env file's
        ports = (self.redis_port, self.milvus_port, self.web_port)
        flags = "--workers 1 --redis-port {} --milvus-port {} --web-port {}".format(*ports)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "theow_workers.cli", "up", *flags.split()],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output = Output(self.proc)
        wait_until(lambda: "theow is up" in self.shown() or self.proc.poll() is not None, 240)
        assert self.proc.poll() is None, self.shown()
        wait_until(lambda: listening(self.web_port), 60, "the web console")

    def shown(self) -> str:
        return self.output.text()

    def broker(self) -> redis.Redis:
        password = (self.home / "valkey.password").read_text().strip()
        return redis.Redis.from_url(f"redis://:{password}@127.0.0.1:{self.redis_port}/0")

    def stop(self, how: signal.Signals = signal.SIGINT) -> str:
        """Stop it as Ctrl-C (or ``how``) does; what it printed, all of it."""
        if self.proc.poll() is None:
            self.proc.send_signal(how)
        self.proc.wait(timeout=90)
        self.output.thread.join(10)
        return self.shown()


def test_theow_up_restarts_a_killed_resolver_three_times_and_nothing_else_stops(tmp_path):
    up = Up(tmp_path)
    env = up.env
    redis_port, milvus_port, web_port = up.redis_port, up.milvus_port, up.web_port
    outages: Outages | None = None
    submitted: list[subprocess.Popen[str]] = []
    back_after: list[float] = []
    kills_within = 0.0
    try:
        outages = Outages({"valkey": redis_port, "milvus": milvus_port, "console": web_port})
        broker = up.broker()
        valkey_run = broker.info("server")["run_id"]
        killed: set[int] = set()
        verdicts = []
        first_kill = time.monotonic()
        for n in range(3):
            pid = wait_until(lambda: resolver_pid(broker, killed), 120, "a resolver heartbeat")
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
            gone = time.monotonic()
            first_kill = first_kill if n else gone
            # Submitted while the resolver is down: it waits on the queue for the next one.
            submitted.append(submit(env, tmp_path / "spool", f"ECHO round{n}", f"j{n}"))
            wait_until(lambda: resolver_pid(broker, killed), 60, "the resolver back")
            back_after.append(time.monotonic() - gone)
            # Its verdict before the next kill: a task in flight on a SIGKILLed worker comes
            # back only after the visibility timeout, which is not what this test is about.
            stdout, stderr = submitted[-1].communicate(timeout=240)
            assert submitted[-1].returncode == 0, stderr
            verdicts.append(json.loads(stdout))
        kills_within = time.monotonic() - first_kill
        assert [(v["status"], v["rule"]) for v in verdicts] == [("resolved", "tf_echo")] * 3
        assert broker.info("server")["run_id"] == valkey_run  # the same Valkey throughout
        broker.close()
        assert outages.stop() == []  # Valkey, Milvus Lite and the console always answered
        doctor = subprocess.run(
            [sys.executable, "-m", "theow_workers.cli", "doctor", "--json"],
            env=dict(
                env,
                THEOW_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
                THEOW_MILVUS_URI=f"http://127.0.0.1:{milvus_port}",
            ),
            capture_output=True,
            text=True,
            timeout=180,
        )
        checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
        restarted = checks["restarts.resolver"]
        assert restarted["status"] == "warn"
        assert "worker resolver restarted 3 times" in restarted["detail"]
        assert "last killed by SIGKILL" in restarted["detail"]
        assert not {"restarts.valkey", "restarts.milvus-lite", "restarts.web"} & set(checks)
    finally:
        if outages is not None:
            outages.stop()
        shown = up.stop()
        for client in submitted:
            if client.poll() is None:
                client.kill()
    assert up.proc.returncode == 0, shown
    assert "Traceback" not in shown
    for n in (1, 2, 3):
        assert f"killed by SIGKILL (nothing takes from resolve meanwhile); restart {n} in" in shown
        assert "worker resolver started again (pid" in shown and f", restart {n})" in shown
    assert shown.count("started again (pid") == 3  # nothing else restarted, nor while stopping
    assert not listening(redis_port) and not listening(milvus_port) and not listening(web_port)
    print(
        f"\nresolver back (heartbeat) after SIGKILL: {', '.join(f'{s:.1f}' for s in back_after)} s; "
        f"median {statistics.median(back_after):.1f} s; three kills and verdicts in {kills_within:.0f} s"
    )


def test_a_killed_valkey_is_said_and_started_again_with_its_users_and_sigterm_stops_cleanly(
    tmp_path,
):
    up = Up(tmp_path)
    try:
        broker = up.broker()
        before = broker.info("server")
        os.kill(int(before["process_id"]), signal.SIGKILL)
        # The same password and the agents' broker users (the ACL file) come back with it.
        again = wait_until(lambda: _run_id(broker) not in (None, before["run_id"]), 60, "valkey")
        assert again
        client = submit(up.env, tmp_path / "spool", "ECHO again", "after-valkey")
        stdout, stderr = client.communicate(timeout=240)
        assert client.returncode == 0, stderr
        assert json.loads(stdout)["status"] == "resolved"
        # Killed while stopping: nothing is started again once stopping has begun.
        pid = wait_until(lambda: resolver_pid(broker, set()), 60, "a resolver heartbeat")
        broker.close()
        os.kill(pid, signal.SIGKILL)
    finally:
        shown = up.stop(signal.SIGTERM)
    assert up.proc.returncode == 0, shown
    assert "Traceback" not in shown
    assert "valkey (pid " in shown
    assert "killed by SIGKILL (the broker is down: agents spool their failures" in shown
    assert "valkey started again (pid" in shown
    assert "worker resolver started again" not in shown.partition("stopping…")[2]
    assert not listening(up.redis_port) and not listening(up.milvus_port)
    assert not listening(up.web_port)


def _run_id(broker: redis.Redis) -> str | None:
    try:
        return str(broker.info("server")["run_id"])
    except redis.RedisError:
        return None
