"""The fault suite's own stack: a Valkey it can restart, workers it can kill.

Valkey runs with its append-only file (as ``theow up`` runs it), so a broker
restart keeps queued messages. Short time limits let a message whose worker
was SIGKILLed come back within seconds instead of the production hour.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from theow_workers.config import Settings
from theow_workers.runtime import Runtime
from theow_workers.stack import EmbeddedStack
from theow_workers.store.tokens import TokenStore

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# Redelivery of a message whose main worker process was SIGKILLed waits for the
# visibility timeout, which must exceed the task time limit (celery_app).
FAST_LIMITS = {
    "THEOW_RESOLVE_TIME_LIMIT": "40",
    "THEOW_VISIBILITY_TIMEOUT": "45",
    "THEOW_CLAIM_TTL": "3",
}


@dataclass
class FaultStack:
    settings: Settings
    home: Path
    stack: EmbeddedStack
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    concurrency: dict[str, int] = field(default_factory=dict)
    queues: dict[str, list[str]] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)

    def start_worker(self, name: str, concurrency: int, queues: list[str] | None = None) -> None:
        """Start a worker and wait until it is ready, as a supervisor's health check would.

        Celery gives up for good ("Could not start worker processes") when a pool
        process dies before the worker is up, so the suite's faults start after that.
        """
        log = self.home / f"worker-{name}.log"
        offset = log.stat().st_size if log.exists() else 0
        queues = queues or self.queues.get(name) or ["resolve"]
        proc = self.stack.start_worker(queues, concurrency, name=name)
        self.workers[name] = proc
        self.concurrency[name], self.queues[name] = concurrency, queues
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"worker {name} exited at start: {self.log(name)[-3000:]}"
            with log.open("rb") as f:
                f.seek(offset)
                if b" ready." in f.read():
                    return
            time.sleep(0.1)
        raise AssertionError(f"worker {name} was not ready within 120 s: {self.log(name)[-3000:]}")

    def pool(self, name: str) -> list[int]:
        """The pool processes of a worker (children of its main process)."""
        pid = self.workers[name].pid
        try:
            return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    def kill_pool_process(self, name: str) -> None:
        pool = self.pool(name)
        if pool:
            os.kill(pool[0], signal.SIGKILL)
            self.faults.append(f"SIGKILL pool process of {name}")

    def kill_main_and_restart(self, name: str) -> None:
        """SIGKILL a worker's main process; restart it, as a supervisor would."""
        proc = self.workers[name]
        pool = self.pool(name)
        proc.kill()
        proc.wait(10)
        for pid in pool:  # orphaned pool processes end once their pipe closes
            _wait_gone(pid, 10)
        self.faults.append(f"SIGKILL main process of {name}")
        self.start_worker(name, self.concurrency[name])

    def restart_broker(self, while_down: Any = None) -> None:
        (entry,) = [e for e in self.stack.processes if e[0] == "valkey"]
        self.stack.processes.remove(entry)
        entry[1].send_signal(signal.SIGTERM)  # Valkey writes its append-only file and exits
        entry[1].wait(20)
        if while_down is not None:
            while_down()
        self.stack.start_valkey()
        self.faults.append("broker restarted")

    def restart_broker_casualties(self) -> None:
        """Restart, as a supervisor would, a worker the broker restart ended.

        kombu's Redis transport can end a worker's main process when the broker
        goes away mid-ack (an AttributeError in its restore path after
        "Connection to broker lost"). Only such an exit is restarted here: a
        worker that died any other way still fails the suite. A casualty may
        still be winding down when this looks (its "Unrecoverable error" is
        logged seconds before it exits): it is waited for, then restarted.
        """
        for name, proc in list(self.workers.items()):
            log = self.log(name)
            lost = log.rfind("Connection to broker lost")
            ended = lost >= 0 and "Unrecoverable error" in log[lost:]
            if proc.poll() is None and not ended:
                continue
            assert ended, f"worker {name} exited, not on losing the broker: {log[-3000:]}"
            proc.wait(30)
            self.faults.append(f"{name} ended by kombu on the broker restart, restarted")
            self.start_worker(name, self.concurrency[name])

    def alive(self) -> dict[str, int]:
        """Workers whose main process runs, with how many pool processes each has."""
        return {n: len(self.pool(n)) for n, p in self.workers.items() if p.poll() is None}

    def log(self, name: str) -> str:
        return (self.home / f"worker-{name}.log").read_text(errors="replace")


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


@pytest.fixture
def fault_stack(
    tmp_path: Path, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FaultStack]:
    home = tmp_path / "home"
    rules, actions = tmp_path / "rules", tmp_path / "actions"
    shutil.copytree(FIXTURES / "rules", rules)
    shutil.copytree(FIXTURES / "actions", actions)
    env = {
        "THEOW_HOME": str(home),
        "THEOW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "THEOW_MILVUS_URI": milvus_uri,
        "THEOW_MILVUS_COLLECTION": "fleet_fixture_rules",
        "THEOW_DATABASE_URL": f"sqlite:///{tmp_path / 'theow.db'}",
        "THEOW_RULES_DIR": str(rules),
        "THEOW_ACTIONS_DIR": str(actions),
        "THEOW_ACTION_TIMEOUT": "2",
        **FAST_LIMITS,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings.load(env=env)
    home.mkdir(parents=True)
    stack = EmbeddedStack(settings)
    stack.start_valkey()
    settings = stack.settings  # with the password the stack gave its Valkey
    monkeypatch.setenv("THEOW_REDIS_URL", settings.redis_url)
    stack.migrate()
    # The agent the suite's client signs as (its raw payloads too: hostile content from a
    # real agent must reach the resolver, not stop at the signature check).
    tokens = TokenStore.at(settings.store_url)
    monkeypatch.setenv("THEOW_AGENT_TOKEN", str(tokens.add("fault-agent", "agent")))
    tokens.close()
    # As a deployment does before starting workers (`theow rules sync`): the index
    # holds the rules, so no worker spends its first task loading MiniLM.
    Runtime(settings).knowledge()
    faults = FaultStack(settings, home, stack)
    try:
        yield faults
    finally:
        stack.stop(timeout=10)
