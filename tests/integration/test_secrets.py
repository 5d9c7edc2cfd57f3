"""No secret of the benchmark corpus leaves a build agent in clear, with real processes throughout.

One failure whose log holds one secret of each of the corpus's 140 formats is
submitted by the real client (spooled while the broker is down, then flushed,
and sent directly) to a real resolver worker. Then nothing of any secret may be
found in the spool file, in the task message waiting in Redis (body and
headers), in anything Redis holds after the worker answered, in any row of any
SQL table, or in the worker's log.
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest
from sqlalchemy import MetaData, create_engine, select

from tests.integration.conftest_client import closed_port
from tests.unit.test_redact import CORPUS
from theow_client import TheowClient, names

pytestmark = pytest.mark.integration

WINDOW = 12  # a secret leaks if any 12-character piece of it is left
TOKEN = "Gm3Q8vLx2Rk7Tz9WbN4pYc6H"


def leaked(secrets: list[str], text: str) -> list[str]:
    return [
        s
        for s in secrets
        if s in text
        or (len(s) > WINDOW and any(s[i : i + WINDOW] in text for i in range(len(s) - WINDOW)))
    ]


def corpus_failure() -> tuple[dict[str, Any], list[str]]:
    r = random.Random(16)
    samples = [make(r) for make in CORPUS.formats().values()]
    log = "\n".join(["step 1: deploy", *(line for line, _ in samples), "ECHO done"])
    secrets = [s for _, values in samples for s in values]
    facts = {
        "stderr": log,
        "job": "deploy/prod",
        "env": {"DB_PASSWORD": "Zq8-not-in-the-corpus", "steps": [f"--token {TOKEN}"]},
    }
    return facts, [*secrets, "Zq8-not-in-the-corpus", TOKEN]


def redis_text(client: Any) -> str:
    """Everything Redis holds, as text, task message bodies decoded."""
    parts: list[str] = []
    for key in client.scan_iter():
        kind = client.type(key).decode()
        if kind == "string":
            values = [client.get(key)]
        elif kind == "list":
            values = client.lrange(key, 0, -1)
        elif kind == "hash":
            values = [b"%s=%s" % kv for kv in client.hgetall(key).items()]
        elif kind == "set":
            values = list(client.smembers(key))
        elif kind == "zset":
            values = client.zrange(key, 0, -1)
        else:
            values = []
        parts += [key.decode(errors="replace"), *(v.decode(errors="replace") for v in values)]
    decoded = []
    for part in parts:
        try:
            envelope = json.loads(part)
            decoded.append(base64.b64decode(envelope["body"]).decode(errors="replace"))
        except (ValueError, KeyError, TypeError):
            continue
    return "\n".join(parts + decoded)


def sql_text(url: str) -> str:
    engine = create_engine(url)
    metadata = MetaData()
    metadata.reflect(engine)
    rows: list[str] = []
    with engine.connect() as connection:
        for table in metadata.sorted_tables:
            rows += [repr(tuple(row)) for row in connection.execute(select(table))]
    engine.dispose()
    assert rows
    return "\n".join(rows)


def test_no_secret_of_the_corpus_reaches_the_spool_redis_sql_or_the_worker_log(
    fleet, redis_client, tmp_path
):
    facts, secrets = corpus_failure()
    assert len(secrets) > 140
    spool = tmp_path / "spool"

    # The broker is down: the failure is spooled on the agent.
    offline = TheowClient(
        redis_url=f"redis://127.0.0.1:{closed_port()}/0", spool_dir=spool, timeout=1
    )
    spooled = offline.submit(facts, idempotency_key="secrets/spooled")
    offline.close()
    assert spooled.spooled
    spool_file = spooled.spool_path.read_text()
    assert "[masked:private-key]" in spool_file and "ECHO done" in spool_file
    assert leaked(secrets, spool_file) == []

    # The broker is up, no worker yet: the messages wait in Redis as sent.
    client = TheowClient(redis_url=fleet.settings.redis_url, spool_dir=spool)
    fleet.clients.append(client)
    sent = client.submit(facts, idempotency_key="secrets/sent")
    assert client.flush() == (1, 0)
    waiting = redis_client.lrange(names.QUEUE_RESOLVE, 0, -1)
    messages = [json.loads(raw) for raw in waiting]
    ours = {m["headers"]["id"]: m for m in messages}
    assert {sent.failure_id, spooled.failure_id} <= set(ours)
    for failure_id in (sent.failure_id, spooled.failure_id):
        headers = ours[failure_id]["headers"]
        # What Flower shows: the failure and the sizes of its facts, never their text.
        assert headers["argsrepr"].startswith(f"failure {failure_id} facts={{'stderr': ")
        assert "deploy" not in headers["argsrepr"]
        assert headers["kwargsrepr"] == "{}"
    assert leaked(secrets, redis_text(redis_client)) == []

    fleet.start_worker()
    for ticket in (sent, client.ticket(spooled.failure_id)):
        verdict = ticket.wait(60)
        assert verdict.failure_id == ticket.failure_id

    assert leaked(secrets, redis_text(redis_client)) == []
    stored = sql_text(fleet.settings.store_url)
    assert sent.failure_id in stored and "[masked:" in stored
    assert leaked(secrets, stored) == []
    assert leaked(secrets, fleet.worker_log()) == []


def test_a_replay_chunk_shows_its_job_and_size_in_the_task_message_not_the_facts(
    fleet, redis_client, monkeypatch
):
    import theow_workers.celery_app
    from theow_workers.replay.driver import celery_sender

    app = theow_workers.celery_app.make_app(fleet.settings)
    monkeypatch.setattr(theow_workers.celery_app, "app", app)
    items = [{"line": n, "facts": {"stderr": f"step {n}: deploy/prod failed"}} for n in range(3)]
    result = celery_sender()({"job_id": "job-7", "items": items})
    app.close()

    (raw,) = [m for m in redis_client.lrange(names.QUEUE_REPLAY, 0, -1) if result.id.encode() in m]
    headers = json.loads(raw)["headers"]
    assert headers["argsrepr"] == "replay job job-7 items=3"
    assert headers["kwargsrepr"] == "{}"
