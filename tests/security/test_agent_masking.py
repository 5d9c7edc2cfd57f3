"""Every text an agent sends is masked before it leaves: spooled failures and fix outcomes.

A real fleet (Valkey, a resolver worker, SQLite). What crosses the broker is
read off the queue itself; what is stored is read from SQL.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
from sqlalchemy import select

from theow_client import names
from theow_client.client import build_payload
from theow_client.verdict import Status, Verdict
from theow_workers.store.schema import AttemptRow, VerdictRow

pytestmark = pytest.mark.integration

SECRET = "ghp_" + "Zq7x" * 9  # a GitHub token's shape


def messages(redis_client, task: str) -> list[tuple[dict, str]]:
    """The queued messages of ``task``: each envelope and its body, decoded."""
    found = []
    for raw in redis_client.lrange(names.QUEUE_RESOLVE, 0, -1):
        envelope = json.loads(raw)
        if envelope["headers"].get("task") == task:
            found.append((envelope, base64.b64decode(envelope["body"]).decode()))
    return found


def eventually(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_flush_masks_a_spooled_facts_json_before_it_crosses_the_broker(fleet, redis_client):
    client = fleet.client()
    payload = build_payload({"stderr": "deploy failed"}, agent=client.agent)
    # A spool file written by an older client, or edited since: a token in clear in facts_json.
    payload["facts_json"] = json.dumps({"stderr": f"export GITHUB_TOKEN={SECRET}\ndeploy failed"})
    client.spool.put(payload)

    assert client.flush() == (1, 0)

    (sent,) = [m for m in messages(redis_client, names.TASK_RESOLVE) if "deploy failed" in m[1]]
    envelope, body = sent
    assert SECRET not in body and SECRET not in json.dumps(envelope)
    assert "GITHUB_TOKEN=[masked:github-token]" in json.loads(body)[0][0]["facts_json"]


def test_an_outcome_is_masked_on_the_agent_and_flower_sees_no_output(fleet, redis_client):
    client = fleet.client()  # no worker yet: the message waits on the queue to be read
    verdict = Verdict(failure_id="f-masked", status=Status.SUGGESTED, rule="tf_client_fix")
    assert client.report_outcome(
        verdict,
        success=False,
        error=f"push failed: https://bot:{SECRET}@git.example/repo",
        outputs=[{"action": "touch_file", "output": {"log": f"GITHUB_TOKEN={SECRET}"}}],
    )

    ((envelope, body),) = messages(redis_client, names.TASK_CLIENT_OUTCOME)
    assert SECRET not in body
    assert envelope["headers"]["argsrepr"] == "failure f-masked outputs=1"
    report = json.loads(body)[0][0]
    assert report["outputs"][0]["output"]["log"] == "GITHUB_TOKEN=[masked:github-token]"
    assert "git.example" in report["error"]


def test_an_older_clients_outcome_is_masked_again_before_it_is_stored(fleet):
    fleet.start_worker()
    client = fleet.client()
    verdict = client.submit({"stderr": "missing file app.cfg"}).wait(60)
    assert (verdict.status, verdict.rule) == (Status.SUGGESTED, "tf_client_fix")

    # Sent as a client before masking sent it: outputs and error as the agent had them.
    report = {
        "failure_id": verdict.failure_id,
        "rule": verdict.rule,
        "outcome": "success",
        "rerun_passed": False,
        "error": f"step failed again; token {SECRET}",
        "outputs": [{"action": "touch_file", "output": {"changed": [f"GITHUB_TOKEN={SECRET}"]}}],
    }
    client.app.send_task(
        names.TASK_CLIENT_OUTCOME,
        args=[client.signed(names.TASK_CLIENT_OUTCOME, report)],
        queue=names.QUEUE_RESOLVE,
        ignore_result=True,
    )

    store = fleet.store()
    assert eventually(lambda: store.rule_stats().get("tf_client_fix")), fleet.worker_log()[-2000:]
    with store.session() as session:
        stored = [
            *session.execute(select(AttemptRow)).scalars(),
            *session.execute(select(VerdictRow)).scalars(),
        ]
    text = json.dumps([row.__dict__ for row in stored], default=str)
    assert "touch_file" in text and "[masked:github-token]" in text
    assert SECRET not in text
