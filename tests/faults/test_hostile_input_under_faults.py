"""Hostile input mixed into 1,000 good failures while workers are killed and the broker restarts.

Pass: every good failure gets exactly one verdict (resolved), every hostile
one a recorded outcome (a rejection with its reason, or a verdict on bounded
facts), nothing unbounded in SQL, and every worker alive at the end.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from tests.faults.conftest import FaultStack
from tests.faults.corpus import Case, cases, good
from theow_client import FactsError, TheowClient, names, signing
from theow_client.client import build_payload
from theow_client.config import celery_app
from theow_client.facts import DEFAULT_LIMITS
from theow_client.messages import SubmitRequest
from theow_workers.identity import refused_id, submission_id
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import FailureRow, VerdictRow
from theow_workers.wire import MAX_MESSAGE_DEPTH, deeper_than

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]

GOOD = 1000
# Stored sizes no hostile input may exceed (characters of JSON, or of text).
MAX_FACTS_JSON = DEFAULT_LIMITS.total + 512 * 1024
MAX_NOTES_JSON = 1024 * 1024 + 256 * 1024
MAX_REASON = 2100

# Cases whose outcome is known exactly: (status, words the reason must hold).
EXPECTED = {
    "deep list 520": ("rejected", "nested deeper than"),
    "deep list 33": ("rejected", "facts.n[0][0]"),
    "deep dict 600": ("rejected", "nested deeper than"),
    "deep text 100000": ("rejected", "nested too deeply to parse"),
    "deep raw message 5000": ("rejected", "nested too deeply to decode"),
    "deep raw message 600": ("rejected", "nested deeper than 48 levels"),
    "raw message not JSON": ("rejected", "not JSON"),
    "8 MB key": ("rejected", "more than 256"),
    "200k keys": ("rejected", "200000 keys, more than 1000"),
    "lone surrogate escape": ("unmatched", ""),
    "invalid UTF-8 via argv": ("unmatched", ""),
    "facts_json 20 MB": ("rejected", "characters of JSON, more than"),
    "facts_json duplicate keys": ("resolved", ""),
}


def publish_raw(app: Any, task_id: str, body: str) -> None:
    """A message as any program could put it on the queue: headers of a task, any body."""
    headers = {
        "lang": "py", "task": names.TASK_RESOLVE, "id": task_id, "root_id": task_id,
        "parent_id": None, "group": None, "retries": 0, "timelimit": [None, None],
        "eta": None, "expires": None, "argsrepr": "(raw)", "kwargsrepr": "{}",
        "origin": "fault-suite", "ignore_result": False,
    }  # fmt: skip
    with app.producer_or_acquire() as producer:
        producer.publish(
            body, exchange=names.QUEUE_RESOLVE, routing_key=names.QUEUE_RESOLVE,
            content_type="application/json", content_encoding="utf-8",
            headers=headers, correlation_id=task_id, delivery_mode=2,
        )  # fmt: skip


def send_hostile(
    client: TheowClient, app: Any, case: Case, task_id: str | None = None
) -> tuple[str, str, str]:
    """Send one case the way it would arrive; return (failure id, how it was sent, task id)."""
    task_id = task_id or str(uuid.uuid4())
    if case.body is not None:
        publish_raw(app, task_id, case.body)
        return refused_id(task_id), "raw message", task_id
    if case.payload is not None or case.facts_json is not None:
        payload = case.payload
        if case.facts_json is not None:
            payload = {"failure_id": task_id, "facts_json": case.facts_json}
        sent = signed(client, payload)
        app.send_task(names.TASK_RESOLVE, args=[sent], task_id=task_id,
                      queue=names.QUEUE_RESOLVE, retry=False)  # fmt: skip
        return recorded_id(client, sent, task_id), "raw payload", task_id
    # Facts: the client bounds them or refuses them with a FactsError, never anything else.
    try:
        payload = build_payload(case.facts, failure_id=task_id, agent=client.agent)
    except FactsError:
        # An old client would send them anyway: the worker must refuse them itself.
        sent = signed(client, {"failure_id": task_id, "facts": case.facts})
        app.send_task(names.TASK_RESOLVE, args=[sent],
                      task_id=task_id, queue=names.QUEUE_RESOLVE, retry=False)  # fmt: skip
        return recorded_id(client, sent, task_id), "refused by the client, sent raw", task_id
    client.send(payload)
    return recorded_id(client, payload, task_id), "bounded by the client", task_id


def signed(client: TheowClient, payload: Any) -> Any:
    """A raw payload signed by the suite's agent, when it is one that can be signed."""
    try:
        return client.signed(names.TASK_RESOLVE, payload)
    except (AttributeError, TypeError, ValueError, RecursionError):
        return payload  # not an object of JSON: it arrives unsigned, and is refused


def recorded_id(client: TheowClient, payload: Any, task_id: str) -> str:
    """The id the worker records a payload under: derived from the agent, or a refused one's.

    A message too deep to decode (``wire``) is refused whatever it carries.
    """
    readable = not deeper_than([[payload], {}, {}], MAX_MESSAGE_DEPTH)  # as the message's body
    if readable and isinstance(payload, dict) and (signing.AUTH in payload or "nonce" in payload):
        body = signing.unsigned(payload)
        request = SubmitRequest.from_wire(body)
        return submission_id(client.agent, request, request.failure_id_or(task_id))
    return refused_id(task_id)


def good_id(client: TheowClient, n: int) -> str:
    """The failure id of good failure ``n``, as its agent's client derives it."""
    payload = build_payload(good(n), agent=client.agent, idempotency_key=f"good-{n}")
    return str(payload["failure_id"])


def wait_for_verdicts(store: SqlStore, ids: set[str], timeout: float) -> dict[str, VerdictRow]:
    deadline = time.monotonic() + timeout
    found: dict[str, VerdictRow] = {}
    while time.monotonic() < deadline:
        with store.session() as s:
            found = {v.failure_id: v for v in s.execute(select(VerdictRow)).scalars()}
        if ids <= set(found):
            break
        time.sleep(1)
    return found


def test_hostile_inputs_and_faults_lose_no_failure_and_crash_no_worker(fault_stack: FaultStack):
    fs = fault_stack
    fs.start_worker("resolver-a", concurrency=2)
    fs.start_worker("resolver-b", concurrency=1)
    url = fs.settings.redis_url
    client = TheowClient(redis_url=url, spool_dir=fs.home / "spool", timeout=1.0)
    app = celery_app(url, 2.0)
    hostile_cases = cases()
    hostile: dict[str, tuple[Case, str, str]] = {}  # recorded id -> case, how sent, task id
    good_ids = {good_id(client, n) for n in range(GOOD)}
    spooled = 0

    def submit_good(numbers: range, with_hostile: bool = True) -> None:
        nonlocal spooled
        for n in numbers:
            ticket = client.submit(good(n), idempotency_key=f"good-{n}")
            spooled += ticket.spooled
            if with_hostile and n % 16 == 0 and hostile_cases:
                case = hostile_cases.pop(0)
                fid, how, task_id = send_hostile(client, app, case)
                hostile[fid] = (case, how, task_id)

    started = time.monotonic()
    submit_good(range(0, 400))
    fs.kill_pool_process("resolver-a")
    submit_good(range(400, 600))
    fs.kill_main_and_restart("resolver-b")
    fs.restart_broker(while_down=lambda: submit_good(range(600, 650), with_hostile=False))
    assert spooled >= 50, "the client should have spooled while the broker was down"
    sent, remaining = client.flush()
    assert (sent, remaining) == (spooled, 0)
    fs.restart_broker_casualties()
    fs.kill_pool_process("resolver-a")
    submit_good(range(650, GOOD))
    for case in hostile_cases:  # the rest of the corpus, after the last good one
        fid, how, task_id = send_hostile(client, app, case)
        hostile[fid] = (case, how, task_id)
    fs.kill_pool_process("resolver-b")
    time.sleep(2)  # the scenario's pacing, not a wait: the two kills hit different tasks in flight
    fs.kill_pool_process("resolver-a")

    store = SqlStore(fs.settings.store_url)
    verdicts = wait_for_verdicts(store, good_ids | set(hostile), timeout=45)
    # kombu's Redis transport can drop a message that is in flight at the instant the
    # broker stops. A build agent that got no verdict submits again under the same
    # idempotency key: at-least-once delivery, exactly one verdict.
    resubmitted = 0
    for n in range(GOOD):
        if good_id(client, n) not in verdicts:
            client.submit(good(n), idempotency_key=f"good-{n}")
            resubmitted += 1
    for fid in set(hostile) - set(verdicts):
        send_hostile(client, app, hostile[fid][0], task_id=hostile[fid][2])
        resubmitted += 1
    if resubmitted:
        verdicts = wait_for_verdicts(store, good_ids | set(hostile), timeout=90)
    elapsed = time.monotonic() - started

    missing_good = good_ids - set(verdicts)
    missing_hostile = {hostile[f][0].name for f in set(hostile) - set(verdicts)}
    assert not missing_good and not missing_hostile, (
        f"{len(missing_good)} good and these hostile failures have no verdict: "
        f"{sorted(missing_hostile)}\n{fs.log('resolver-a')[-4000:]}"
    )
    not_resolved = {f: verdicts[f].status for f in good_ids if verdicts[f].status != "resolved"}
    assert not not_resolved, not_resolved

    for fid, (case, how, _) in hostile.items():
        verdict = verdicts[fid]
        if case.name in EXPECTED:
            status, words = EXPECTED[case.name]
            assert (verdict.status, words in verdict.reason) == (status, True), (
                case.name, how, verdict.status, verdict.reason,
            )  # fmt: skip

    with store.session() as s:
        rows = list(s.execute(select(FailureRow)).scalars())
        reasons = [v.reason for v in s.execute(select(VerdictRow)).scalars()]
    assert len(rows) == GOOD + len(hostile)  # one row each: nothing twice, nothing lost
    assert max(len(json.dumps(r.facts)) for r in rows) <= MAX_FACTS_JSON
    assert max(len(json.dumps(r.notes)) for r in rows) <= MAX_NOTES_JSON
    assert max(len(r.source) for r in rows) <= 200
    assert max(len(reason) for reason in reasons) <= MAX_REASON

    # Every worker is alive, with its whole pool (a supervisor restarted the killed main).
    assert fs.alive() == {"resolver-a": 2, "resolver-b": 1}
    for name in ("resolver-a", "resolver-b"):
        assert "RecursionError" not in fs.log(name)

    rejected = sum(verdicts[f].status == "rejected" for f in hostile)
    print(
        f"\nfault suite: {GOOD} good + {len(hostile)} hostile inputs, "
        f"{len(fs.faults)} faults ({'; '.join(fs.faults)}), {spooled} spooled while the broker "
        f"was down, {resubmitted} submitted again for want of a verdict, {rejected} hostile "
        f"rejected, {len(hostile) - rejected} bounded, failures lost: 0, in {elapsed:.0f}s"
    )
