"""An agent that holds no broker credentials at all: everything it sends goes to the intake.

A real fleet (Valkey, a resolver and a passing worker, SQLite), the real web
app under uvicorn on loopback, and the real client whose broker URL points at
a port where nothing listens: a fix counted or a normal learned can only have
come through the HTTPS intake.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.integration.test_api_intake import http_client, web
from theow_client import mark, names
from theow_client.passing import report_passing
from theow_client.verdict import Status, Verdict
from theow_workers.adapters.normals import RedisNormals
from theow_workers.store.schema import VerdictRow

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def eventually(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_an_agent_with_only_the_intake_gets_its_fix_counted_and_its_job_a_normal(
    fleet, redis_client, tmp_path, monkeypatch
):
    monkeypatch.setenv("THEOW_PASSING_INTERVAL", "1")  # the workers' sampling interval
    fleet.start_worker()
    fleet.stack.start_worker(["passing"], name="passing")
    fleet.wait_for_worker("passing")
    token = fleet.add_token("https-agent")
    store = fleet.store()
    marker = tmp_path / "app.cfg"

    def step() -> None:
        if not marker.exists():
            subprocess.run(["sh", "-c", "echo 'missing file app.cfg' >&2; exit 2"],
                           check=True, capture_output=True)  # fmt: skip

    with web(fleet) as server:
        client = http_client(tmp_path, token, server.url)
        # The failure, its client-side fix run on the agent, and the step passing again.
        mark(client=client, wait_timeout=60, actions_dir=FIXTURES / "actions",
             workspace=str(tmp_path))(step)()  # fmt: skip
        assert marker.read_text() == "fixed by theow\n"
        stats = eventually(lambda: store.rule_stats().get("tf_client_fix"))
        assert stats is not None, "the agent's outcome never reached client_outcome"
        assert (stats.successes, stats.failures) == (1, 0)
        with store.session() as session:
            (verdict,) = session.execute(select(VerdictRow)).scalars()
        assert store.failure_agent(verdict.failure_id) == (True, "https-agent")
        assert eventually(lambda: store.verdict(verdict.failure_id).status.value == "resolved")

        # Another agent's report on this failure is taken by the intake, and counts nothing.
        intruder = http_client(tmp_path / "other", fleet.add_token("other-agent"), server.url)
        fake = Verdict(failure_id=verdict.failure_id, status=Status.SUGGESTED, rule="tf_client_fix")
        assert intruder.report_outcome(fake, success=False, error="it broke")
        refused = names.TASK_CLIENT_OUTCOME.encode()
        assert eventually(lambda: redis_client.hget(names.KEY_REFUSED, refused))
        stats = store.rule_stats()["tf_client_fix"]
        assert (stats.successes, stats.failures) == (1, 0)

        # A passing run of its job teaches the agent's own job its normal.
        normals = RedisNormals(redis_client, ttl=3600)
        job = "build-12"
        sent = eventually(lambda: report_passing(client, {"stderr": "compiled\nok"}, job=job))
        assert sent, fleet.worker_log("passing")[-2000:]
        assert eventually(lambda: normals.runs(names.agent_job("https-agent", job)) >= 1)
        # Sampled: the next run of the job in the interval is answered, not queued.
        assert report_passing(client, {"stderr": "compiled\nok"}, job=job) is False

    assert client.spool.pending() == []


class _Answering(http.server.BaseHTTPRequestHandler):
    """An intake (a proxy in front of it, say) that answers every submission with one status."""

    status = 422

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": "not like this"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("status", "spooled"), [(422, False), (409, False), (408, True), (429, True)]
)
def test_every_4xx_is_a_refusal_except_408_and_429_which_are_spooled(tmp_path, status, spooled):
    handler = type("Answering", (_Answering,), {"status": status})
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            client = http_client(tmp_path, "tw1.some-agent.c2VjcmV0c2VjcmV0c2VjcmV0", url)
            ticket = client.submit({"stderr": "ECHO refused?"})
            verdict = ticket.wait(1)
        finally:
            server.shutdown()
    assert ticket.spooled is spooled
    if spooled:
        assert verdict.status is Status.SPOOLED
    else:
        assert verdict.status is Status.REJECTED
        assert f"({status})" in verdict.reason and "not like this" in verdict.reason
        assert client.spool.pending() == []
