"""The production topology without Docker: the compose file's commands on this machine's services.

What `docker compose up` runs, run here as processes: the one-shot migration
(`theow db upgrade`), then one worker per role with the compose command and
environment (`theow worker --queues resolve|explore|replay`, the explorer with
`THEOW_EXPLORE=1`, `CELERY_WORKER_HOSTNAME=<role>@%h`, JSON logs), and `theow
metrics`; against the Redis and PostgreSQL given by `THEOW_TEST_REDIS_URL` and
`THEOW_TEST_DATABASE_URL` (skipped without them, failed in CI), a Milvus Lite
server for Milvus standalone, and the fake Gemini server for the API. Failures
go through all three roles; `theow doctor` must then find nothing wrong.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select

from tests.conftest import free_port, unavailable, wait_port
from tests.fakes.gemini_server import FakeGemini, function_call, user_texts
from tests.integration.conftest import add_token
from theow_client import Status, TheowClient
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import FailureRow, ProposalRow, VerdictRow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CAUSE = re.compile(r"component (\w+) failed: code=(\d+)")
HOST = socket.gethostname()
CONTAINER_PATHS = ("THEOW_HOME", "THEOW_RULES_DIR", "THEOW_ACTIONS_DIR")


def compose_service(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][name]


def as_python(command: list[str]) -> list[str]:
    """The compose command, run with this interpreter: `theow …` is `python -m theow_workers.cli …`."""
    assert command[0] == "theow", command
    return [sys.executable, "-m", "theow_workers.cli", *command[1:]]


def proposing_brain(model: str, body: dict[str, Any]) -> dict[str, Any]:
    cause = CAUSE.search("\n".join(user_texts(body))).group(1)  # type: ignore[union-attr]
    rule = (
        f"name: component_{cause}_failure\n"
        f"description: The {cause} component fails with an exit code.\n"
        "mode: track\n"
        "when:\n"
        "  - fact: stderr\n"
        f"    regex: 'component {cause} failed: code=(?P<code>\\d+)'\n"
    )
    return function_call("submit_rule", rule_yaml=rule, actions=[])


@dataclass
class Topology:
    home: Path
    env: dict[str, str]
    redis_url: str
    database_url: str
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(
        self, *args: str, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "theow_workers.cli", *args],
            env={**self.env, **(extra or {})}, cwd=self.home,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    def start(self, role: str, extra: dict[str, str] | None = None) -> None:
        """The role's compose service: its command and its environment."""
        service = compose_service(role)
        env = {**self.env, **(extra or {})}
        for key, value in service.get("environment", {}).items():
            # Interpolated URLs and container paths are this test's own (self.env).
            if not str(value).startswith("${") and key not in CONTAINER_PATHS:
                env[key] = str(value)
        log = (self.home / f"{role}.log").open("wb")
        self.workers[role] = subprocess.Popen(
            as_python(service["command"]), env=env, cwd=self.home, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def wait_for(self, *roles: str, timeout: float = 90) -> None:
        from celery import Celery

        wanted = {f"{role}@{HOST}" for role in roles}
        app = Celery(broker=self.redis_url)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                replies = app.control.ping(timeout=1.0) or []
                if wanted <= {name for reply in replies for name in reply}:
                    return
                for role in roles:
                    if self.workers[role].poll() is not None:
                        raise AssertionError(f"{role} exited:\n{self.log(role)[-3000:]}")
            raise AssertionError(f"{wanted} did not answer; logs:\n{self.log(roles[0])[-3000:]}")
        finally:
            app.close()

    def log(self, role: str) -> str:
        return (self.home / f"{role}.log").read_text(errors="replace")

    def stop(self) -> dict[str, int | None]:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for role, proc in self.workers.items():
            try:
                codes[role] = proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                codes[role] = proc.wait()
        return codes


@pytest.fixture
def topology(request: pytest.FixtureRequest, tmp_path: Path, milvus_uri: str) -> Iterator[Topology]:
    redis_url = os.environ.get("THEOW_TEST_REDIS_URL", "")
    database_url = os.environ.get("THEOW_TEST_DATABASE_URL", "")
    if not (redis_url and database_url):
        unavailable("THEOW_TEST_REDIS_URL and THEOW_TEST_DATABASE_URL (the production topology)")
    request.getfixturevalue("redis_client")  # an empty broker database
    if database_url.startswith("postgresql"):
        from tests.conftest import reset_postgres

        reset_postgres(database_url)
    else:  # a developer's SQLite stand-in: a fresh file
        database_url = f"sqlite:///{tmp_path / 'topology.db'}"
    for name in ("rules", "actions", "prompts"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("THEOW_", "CELERY_", "FLOWER_"))
    }
    env.update(
        THEOW_HOME=str(home),
        THEOW_REDIS_URL=redis_url,
        THEOW_DATABASE_URL=database_url,
        THEOW_MILVUS_URI=milvus_uri,
        THEOW_MILVUS_COLLECTION=f"topology_{uuid.uuid4().hex[:8]}",
        THEOW_RULES_DIR=str(tmp_path / "rules"),
        THEOW_ACTIONS_DIR=str(tmp_path / "actions"),
        THEOW_LOG_FORMAT="json",
        THEOW_WORKER_CONCURRENCY="1",  # a 2-core machine runs every role at once
        THEOW_REPLAY_CONCURRENCY="1",
        HF_HUB_OFFLINE="1",
    )
    topo = Topology(home, env, redis_url, database_url)
    try:
        yield topo
    finally:
        topo.stop()


def test_the_compose_topology_resolves_explores_and_replays_on_real_services(topology, tmp_path):
    migrated = topology.run(*compose_service("migrate")["command"][1:])
    assert migrated.returncode == 0, migrated.stderr

    fake = FakeGemini(brain=proposing_brain, api_key="topology-test-key").start()
    try:
        topology.start("resolver")
        topology.start(
            "explorer",
            {"GEMINI_API_KEY": "topology-test-key", "THEOW_GEMINI_BASE_URL": fake.url},
        )
        topology.start("replay")
        topology.wait_for("resolver", "explorer", "replay")

        # A build agent as production has one: a token of its own (`theow tokens add`).
        token = add_token(topology.database_url, "topology-agent")
        with TheowClient(
            redis_url=topology.redis_url, spool_dir=tmp_path / "spool", token=token
        ) as client:
            # resolver: known failures are fixed, unknown ones recorded as unmatched
            tickets = [client.submit({"stderr": f"ECHO w{i}", "job": f"j{i}"}) for i in range(5)]
            unknown = client.submit({"stderr": "a failure no rule knows"})
            assert {t.wait(120).status for t in tickets} == {Status.RESOLVED}
            assert unknown.wait(120).status is Status.UNMATCHED

            # explorer: an unknown failure submitted for exploration becomes a proposal
            explored = client.submit(
                {"stderr": "step 2\nERROR: component gamma failed: code=7\n"}, explore=True
            )
            assert explored.wait(120).status is Status.EXPLORING
            outcome = explored.wait_exploration(180)
            assert outcome["outcome"] == "proposal", (outcome, topology.log("explorer")[-3000:])

        # replay: history in bulk on the replay queue, through `theow replay`
        history = tmp_path / "history.jsonl"
        lines = [{"stderr": f"ECHO h{i}", "job": "h"} for i in range(8)]
        lines += [{"stderr": f"unknown trouble {i}"} for i in range(4)]
        history.write_text("".join(json.dumps(line) + "\n" for line in lines))
        replayed = topology.run("replay", str(history), "--json")
        assert replayed.returncode == 0, replayed.stderr
        summary = json.loads(replayed.stdout)["summary"]
        assert (summary["total"], summary["matched"], summary["unmatched"]) == (12, 8, 4)

        store = SqlStore(topology.database_url)
        try:
            with store.session() as s:
                failures = s.execute(select(func.count()).select_from(FailureRow)).scalar_one()
                verdicts = s.execute(select(func.count()).select_from(VerdictRow)).scalar_one()
                pending = s.execute(
                    select(ProposalRow.rule_name).where(ProposalRow.status == "pending")
                ).scalars()
                assert list(pending) == ["component_gamma_failure"]
            assert failures == verdicts == 7 + 12
            with store.session() as s:
                live_echo = s.execute(
                    select(func.count())
                    .select_from(VerdictRow)
                    .join(FailureRow, FailureRow.id == VerdictRow.failure_id)
                    .where(VerdictRow.rule == "tf_echo", VerdictRow.status == "resolved")
                    .where(FailureRow.source.not_like("replay:%"))
                ).scalar_one()
        finally:
            store.dispose()

        # doctor, as each role's container would run it: nothing wrong
        doctor = topology.run("doctor", "--json", "--deep")
        report = json.loads(doctor.stdout)
        assert doctor.returncode == 0 and report["ok"], report
        checks = {c["check"]: c for c in report["checks"]}
        assert checks["index"]["status"] == "ok" and checks["sql.migrations"]["status"] == "ok"
        assert "MiniLM loaded" in checks["model"]["detail"]
        explorer_env = {"THEOW_EXPLORE": "1", "GEMINI_API_KEY": "topology-test-key"}
        doctor = topology.run("doctor", "--json", extra=explorer_env)
        assert {c["check"]: c["status"] for c in json.loads(doctor.stdout)["checks"]}["llm"] == "ok"
        assert "topology-test-key" not in doctor.stdout

        # metrics, as the compose `metrics` service serves them
        port = free_port()
        metrics_cmd = [*as_python(compose_service("metrics")["command"])]
        metrics_cmd[metrics_cmd.index("--port") + 1] = str(port)
        metrics_cmd[metrics_cmd.index("--address") + 1] = "127.0.0.1"
        metrics = subprocess.Popen(metrics_cmd, env=topology.env, stdout=subprocess.DEVNULL)
        try:
            wait_port(port, metrics)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
        finally:
            metrics.terminate()
            metrics.wait(20)
        # Live traffic only: replayed history has its own metrics.
        assert live_echo > 0
        assert f'theow_verdicts_total{{rule="tf_echo",status="resolved"}} {live_echo:.1f}' in text
        assert 'theow_explorations_total{outcome="proposal"} 1.0' in text
        assert 'theow_replay_jobs{status="done"} 1.0' in text
    finally:
        fake.stop()

    codes = topology.stop()  # SIGTERM: every role drains and exits cleanly
    assert codes == {"resolver": 0, "explorer": 0, "replay": 0}
    for role in ("resolver", "explorer", "replay"):
        assert records_of(topology, role), role  # every line JSON
        assert "topology-test-key" not in topology.log(role)
    tasks = {r.get("task_name") for r in records_of(topology, "resolver")}
    assert "theow.resolve" in tasks  # task log lines carry the task's name and id


def records_of(topology: Topology, role: str) -> list[dict[str, Any]]:
    """A role's log, one JSON object per line (json.loads fails on any other line)."""
    return [
        json.loads(line)
        for line in topology.log(role).splitlines()
        if line.strip() and not line.startswith("worker: ")
    ]
