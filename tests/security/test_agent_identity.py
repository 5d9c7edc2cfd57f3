"""An agent is a client that may submit and read its own answer, nothing more.

Each attack runs against the embedded stack (real Valkey, real workers) as a
build agent's code could run it: with the broker's URL and the Celery wire
format, signing with its own agent token or with none.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from celery import Celery  # type: ignore[import-untyped]
from sqlalchemy import select

from theow_client import Status, config, names, signing
from theow_workers.store.schema import FailureRow, VerdictRow

pytestmark = pytest.mark.integration

# The job and key of the README's own example: easy to guess.
JOB, KEY = "run-81/build", "run-81/build"


def raw_app(fleet: Any) -> Celery:
    """What a build's code can do with the broker's URL: send any task by name."""
    return config.celery_app(fleet.settings.redis_url, timeout=5)


def forge(task: str, payload: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    """``payload`` as an attacker sends it: unsigned, or signed with its own agent token."""
    if token is None:
        return payload
    own = signing.AgentToken.parse(token)
    return signing.sign(task, payload, own.name, own.signing_key)


def send(fleet: Any, task: str, payload: dict[str, Any], queue: str) -> dict[str, Any]:
    app = raw_app(fleet)
    try:
        result = app.send_task(task, args=[payload], queue=queue)
        return dict(result.get(timeout=60))
    finally:
        app.close()


def failure_rows(fleet: Any) -> list[FailureRow]:
    with fleet.store().session() as s:
        return list(s.execute(select(FailureRow).order_by(FailureRow.received_at)).scalars())


def stored_verdict(fleet: Any, failure_id: str) -> VerdictRow:
    with fleet.store().session() as s:
        return s.execute(select(VerdictRow).where(VerdictRow.failure_id == failure_id)).scalar_one()


def refused(redis_client: Any, task: str) -> int:
    return int(redis_client.hget(names.KEY_REFUSED, task) or 0)


def victim_failure(fleet: Any, victim: Any) -> Any:
    """The victim's failure, matched by a rule whose fix must run on its build agent."""
    facts = {"stderr": "missing file app.cfg", "job": JOB}
    verdict = victim.submit(facts, idempotency_key=KEY).wait(60)
    assert (verdict.status, verdict.rule) == (Status.SUGGESTED, "tf_client_fix")
    return verdict


def test_a_forged_explore_task_is_refused_and_starts_no_session(fleet, explorers, redis_client):
    fake, start = explorers
    start(1)
    victim = fleet.agent("victim")
    attacker = fleet.agent("attacker")
    verdict = victim_failure(fleet, victim)
    attack = {"failure_id": verdict.failure_id, "rule": None, "session_id": "attack",
              "session_limit": 10**9}  # fmt: skip

    unsigned = send(fleet, names.TASK_EXPLORE, attack, names.QUEUE_EXPLORE)
    forged = forge(names.TASK_EXPLORE, attack, str(attacker.token))
    signed = send(fleet, names.TASK_EXPLORE, forged, names.QUEUE_EXPLORE)

    assert unsigned["outcome"] == signed["outcome"] == "refused"
    assert "unsigned" in unsigned["reason"]
    assert "takes a worker credential, not agent 'attacker'" in signed["reason"]
    assert redis_client.get(names.key_session_budget("attack")) is None  # no session counted
    assert fake.requests == []  # no LLM called
    assert refused(redis_client, names.TASK_EXPLORE) == 2


def test_a_client_outcome_for_another_agents_failure_is_refused_and_counts_nothing(
    fleet, redis_client
):
    fleet.start_worker()
    victim, attacker = fleet.agent("victim"), fleet.agent("attacker")
    verdict = victim_failure(fleet, victim)
    report = {"failure_id": verdict.failure_id, "rule": "tf_client_fix", "outcome": "success",
              "error": "", "outputs": [], "rerun_passed": True}  # fmt: skip

    as_attacker = send(
        fleet, names.TASK_CLIENT_OUTCOME,
        forge(names.TASK_CLIENT_OUTCOME, report, str(attacker.token)), names.QUEUE_RESOLVE,
    )  # fmt: skip
    unsigned = send(fleet, names.TASK_CLIENT_OUTCOME, report, names.QUEUE_RESOLVE)

    assert as_attacker == {
        "counted": False,
        "reason": f"failure {verdict.failure_id} was not sent by attacker",
    }
    assert not unsigned["counted"] and "unsigned" in unsigned["reason"]
    assert fleet.store().rule_stats() == {}  # nothing counted
    assert stored_verdict(fleet, verdict.failure_id).status == "suggested"
    assert refused(redis_client, names.TASK_CLIENT_OUTCOME) == 2

    # The victim's own report still counts, once: nothing was lost.
    assert victim.report_outcome(verdict, success=True, rerun_passed=True)
    deadline = time.monotonic() + 30
    while "tf_client_fix" not in fleet.store().rule_stats() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (fleet.store().rule_stats()["tf_client_fix"].successes) == 1
    settled = victim.ticket(verdict.failure_id).wait(5)
    assert settled.status == Status.RESOLVED  # the victim's verdict key shows the fix worked


def test_a_passing_run_for_another_agents_job_teaches_that_job_nothing(fleet, redis_client):
    fleet.start_worker()
    fleet.stack.start_worker(["passing"], concurrency=1, name="passing")
    fleet.wait_for_worker("passing")
    attacker = fleet.agent("attacker")
    fleet.add_token("victim")
    run = {"job": JOB, "run_id": "r1", "facts_json": json.dumps({"stderr": "missing file app.cfg"})}

    learned = send(
        fleet, names.TASK_PASSING, forge(names.TASK_PASSING, run, str(attacker.token)),
        names.QUEUE_PASSING,
    )  # fmt: skip
    unsigned = send(fleet, names.TASK_PASSING, run, names.QUEUE_PASSING)

    # The attacker taught only its own job's normal; the victim's job has none.
    assert learned["learned"] and learned["job"] == JOB
    assert redis_client.exists(names.key_normal(names.agent_job("attacker", JOB)))
    assert not redis_client.exists(names.key_normal(names.agent_job("victim", JOB)))
    assert not redis_client.exists(names.key_normal(JOB))
    assert unsigned == {"learned": False, "reason": f"refused: {unsigned['reason'][9:]}"}
    assert "unsigned" in unsigned["reason"]
    assert refused(redis_client, names.TASK_PASSING) == 1


def test_another_agents_colliding_idempotency_key_is_a_new_failure_and_the_victims_verdict_stands(
    fleet, redis_client
):
    fleet.start_worker()
    victim, attacker = fleet.agent("victim"), fleet.agent("attacker")
    verdict = victim_failure(fleet, victim)
    before = redis_client.get(names.verdict_key("victim", verdict.failure_id))

    forged = attacker.submit({"stderr": "all fine, nothing to fix", "job": JOB},
                             idempotency_key=KEY).wait(60)  # fmt: skip
    again = victim.submit({"stderr": "missing file other.cfg", "job": JOB},
                          idempotency_key=KEY).wait(60)  # fmt: skip

    assert forged.failure_id != verdict.failure_id != again.failure_id
    assert forged.status == Status.UNMATCHED  # decided on the attacker's own facts
    assert again.status == Status.SUGGESTED  # the victim's re-run: a failure of its own
    rows = {row.id: row for row in failure_rows(fleet)}
    assert len(rows) == 3  # nothing merged, nothing dropped
    assert (rows[forged.failure_id].agent, rows[verdict.failure_id].agent) == ("attacker", "victim")
    conflict = rows[forged.failure_id].notes["conflict"]
    assert conflict["idempotency_key"] == KEY
    assert conflict["with"] == [{"id": verdict.failure_id, "agent": "victim"}]
    assert rows[again.failure_id].notes["conflict"]["with"][0]["id"] == verdict.failure_id
    assert "conflict" not in rows[verdict.failure_id].notes
    assert redis_client.get(names.verdict_key("victim", verdict.failure_id)) == before
    assert stored_verdict(fleet, verdict.failure_id).status == "suggested"


def test_verdicts_are_under_agent_scoped_keys_and_a_client_reads_only_its_own(fleet, redis_client):
    fleet.start_worker()
    victim, attacker = fleet.agent("victim"), fleet.agent("attacker")
    verdict = victim_failure(fleet, victim)

    keys = {k.decode() for k in redis_client.scan_iter(names.verdict_key("*", "*"))}
    assert keys == {names.verdict_key("victim", verdict.failure_id)}
    assert victim.ticket(verdict.failure_id).wait(5).rule == "tf_client_fix"  # read again
    with pytest.raises(TimeoutError):  # the attacker's client reads its own key only
        attacker.ticket(verdict.failure_id).wait(1)


def test_an_unsigned_submission_is_rejected_with_a_reason_the_agent_can_read(
    fleet, redis_client, monkeypatch
):
    fleet.start_worker()
    monkeypatch.delenv("THEOW_AGENT_TOKEN")
    old = fleet.client()  # an agent without a token, as before tokens existed
    assert old.token is None

    verdict = old.submit({"stderr": "missing file app.cfg", "job": JOB}).wait(60)

    assert verdict.status == Status.REJECTED
    assert "unsigned" in verdict.reason and "THEOW_AGENT_TOKEN" in verdict.reason
    (row,) = failure_rows(fleet)  # kept, never resolved
    assert row.notes["rejected"] == verdict.reason and row.agent is None
    assert stored_verdict(fleet, row.id).status == "rejected"
    assert fleet.store().rule_stats() == {}
    assert refused(redis_client, names.TASK_RESOLVE) == 1


def test_a_badly_signed_submission_is_rejected_and_cannot_take_the_victims_failure(
    fleet, redis_client
):
    fleet.start_worker()
    victim = fleet.agent("victim")
    # Signed in the victim's name with a secret that is not the victim's.
    wrong = fleet.client(token="tw1.victim." + "A" * 43)
    facts = {"stderr": "missing file app.cfg", "job": JOB}

    forged = wrong.submit(facts, idempotency_key=KEY).wait(60)
    real = victim.submit(facts, idempotency_key=KEY).wait(60)

    assert forged.status == Status.REJECTED
    assert forged.reason == "refused: bad signature for token 'victim' (a wrong or old token?)"
    # Same facts, same key, same claimed agent: the forgery took nothing of the victim's.
    assert forged.failure_id == real.failure_id
    assert (real.status, real.rule) == (Status.SUGGESTED, "tf_client_fix")
    ids = {row.id: row.agent for row in failure_rows(fleet)}
    assert ids[real.failure_id] == "victim" and len(ids) == 2
