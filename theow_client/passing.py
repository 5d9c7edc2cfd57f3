"""Report a passing run of a job, sampled so a fleet does not flood the queue.

A worker learns each job's normal from its recent passing runs
(``theow_workers.normals``). One passing run per job now and then is plenty:
the client sends one only when it wins ``SET theow:passing:sample:<job> NX EX
interval`` in Redis, so however many agents run the job, at most one passing
run per job per interval reaches the ``passing`` queue. The decision is one
round trip; a lost race or an unreachable broker simply sends nothing (a
passing run is never spooled: the build passed, nothing is owed).

>>> report_passing(client, {"log": text}, job="github:o/r/CI/test")  # doctest: +SKIP
True
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from theow_client import names
from theow_client.facts import PASSING_LIMITS, bound_facts, dumps_facts
from theow_client.jsontypes import JsonObject
from theow_client.messages import PassingRun
from theow_client.redact import redact

if TYPE_CHECKING:
    from theow_client.client import TheowClient

log = logging.getLogger("theow.client")

ENV_PASSING_INTERVAL = "THEOW_PASSING_INTERVAL"
DEFAULT_PASSING_INTERVAL = 3600.0  # seconds: one passing run per job per hour


def passing_interval(explicit: float | None = None) -> float:
    if explicit is not None:
        return float(explicit)
    raw = os.environ.get(ENV_PASSING_INTERVAL, "")
    try:
        return float(raw) if raw.strip() else DEFAULT_PASSING_INTERVAL
    except ValueError:
        return DEFAULT_PASSING_INTERVAL


def build_passing_payload(facts: JsonObject, *, job: str) -> JsonObject:
    """The argument of ``theow.passing``: the run's facts bounded and masked, and its job."""
    bounded, _ = bound_facts(facts, limits=PASSING_LIMITS)
    run = PassingRun(
        job=job,
        run_id=str(uuid.uuid4()),
        facts_json=dumps_facts(redact(bounded)),
        submitted_at=datetime.now(UTC).isoformat(),
    )
    return run.to_wire()


def report_passing(
    client: TheowClient,
    facts: JsonObject,
    *,
    job: str,
    interval: float | None = None,
) -> bool:
    """Send a passing run of ``job`` if no other run of it was sent this interval.

    ``client`` is a :class:`~theow_client.client.TheowClient`. Returns whether
    the run was sent; never raises for a broker problem.
    """
    from theow_client.client import UNREACHABLE, one_line

    seconds = max(1, int(passing_interval(interval)))
    try:
        app = client.app
        redis = app.backend.client
        if not redis.set(names.key_passing_sample(job), "1", nx=True, ex=seconds):
            return False  # another run of this job was sent this interval
        payload = build_passing_payload(facts, job=job)
        app.send_task(
            names.TASK_PASSING,
            args=[client.signed(names.TASK_PASSING, payload)],
            queue=names.QUEUE_PASSING,
            retry=False,
            ignore_result=True,
            argsrepr=f"[passing run of {job!r}]",
            kwargsrepr="{}",
        )
    except UNREACHABLE as exc:
        client.close()
        log.info("theow: passing run of %s not sent: %s", job, one_line(exc))
        return False
    return True
