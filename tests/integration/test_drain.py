"""SIGTERM drains a worker: the running task finishes, the rest go back to the queue.

This is what `docker compose stop` (or a rolling upgrade) does to a resolver:
Celery's warm shutdown. With late acks and prefetch 1, nothing is lost and
nothing is done twice: every failure ends with exactly one verdict and one
attempt, whichever worker decided it.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid

import pytest
from sqlalchemy import func, select

from theow_client import Status
from theow_workers.store.schema import AttemptRow, FailureRow, VerdictRow

pytestmark = pytest.mark.integration

BATCH = 12
SLOW_RULE = """\
name: tf_slow
description: A fix that takes a third of a second.
mode: fix
when:
  - fact: stderr
    regex: 'SLOW STEP (?P<n>\\d+)'
then:
  - action: hang
    params: {seconds: "0.3"}
"""


def count(store, column) -> int:
    with store.session() as s:
        return int(s.execute(select(func.count(func.distinct(column)))).scalar_one())


def rows(store, model) -> int:
    with store.session() as s:
        return int(s.execute(select(func.count()).select_from(model)).scalar_one())


def test_sigterm_mid_batch_loses_nothing_and_repeats_nothing(fleet, monkeypatch):
    # Its own collection: the shared fixture index stays as the other tests expect it.
    monkeypatch.setenv("THEOW_MILVUS_COLLECTION", f"drain_{uuid.uuid4().hex[:8]}")
    (fleet.settings.rules_dir / "tf_slow.rule.yaml").write_text(SLOW_RULE)
    first = fleet.start_worker(concurrency=1, name="draining")
    client = fleet.client()
    tickets = [client.submit({"stderr": f"build\nSLOW STEP {i}\n"}) for i in range(BATCH)]
    store = fleet.store()

    deadline = time.monotonic() + 120
    while rows(store, VerdictRow) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rows(store, VerdictRow) >= 3, fleet.worker_log("draining")
    first.send_signal(signal.SIGTERM)
    try:
        assert first.wait(timeout=30) == 0  # warm shutdown: finish the running task, exit cleanly
    except subprocess.TimeoutExpired:
        pytest.fail(
            "the worker did not drain within 30 s:\n" + fleet.worker_log("draining")[-3000:]
        )
    decided_by_first = rows(store, VerdictRow)
    assert decided_by_first < BATCH, "the batch finished before SIGTERM: nothing was drained"
    assert "Warm shutdown" in fleet.worker_log("draining")

    fleet.start_worker(concurrency=1, name="successor")
    verdicts = [t.wait(120) for t in tickets]

    assert {v.status for v in verdicts} == {Status.RESOLVED}
    assert {v.rule for v in verdicts} == {"tf_slow"}
    assert rows(store, FailureRow) == BATCH
    assert rows(store, VerdictRow) == BATCH  # primary key: one verdict per failure
    assert rows(store, AttemptRow) == BATCH  # the drained task was not run again
    assert count(store, AttemptRow.failure_id) == BATCH
    assert rows(store, VerdictRow) > decided_by_first  # the successor did the rest
