"""Report a passing run of a job, sampled so a fleet does not flood the queue.

A worker learns each job's normal from its recent passing runs
(``theow_workers.normals``). One passing run per job now and then is plenty:
the worker that learns a run takes the job's sample for the interval
(``SET theow:passing:sample:<agent>/<job> NX EX``), and the client sends a run
only while that key is absent (an ``EXISTS``, the one thing its broker user may
ask of it), so at most a few passing runs per job per interval reach the
``passing`` queue, and no agent can hold a sample, its own or another's. A
sampled job or an unreachable broker simply sends nothing (a passing run is
never spooled: the build passed, nothing is owed). With ``THEOW_INTAKE_URL``
the run is posted to the intake instead, which asks the same question of the
broker and answers whether it sent the run on.

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


def passing_interval() -> float:
    """Seconds between two passing runs of a job that a worker learns (its environment's)."""
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
) -> bool:
    """Send a passing run of ``job`` unless a worker learned one of it this interval.

    ``client`` is a :class:`~theow_client.client.TheowClient`. Returns whether
    the run was sent; never raises for a broker problem. The interval is the
    workers' (``THEOW_PASSING_INTERVAL`` where they run): an agent cannot choose it.
    """
    from theow_client.client import UNREACHABLE, one_line
    from theow_client.intake import IntakeRefused, IntakeUnavailable

    if client.intake_url:
        try:
            intake = client.intake
            assert intake is not None
            return intake.report_passing(build_passing_payload(facts, job=job))
        except (IntakeUnavailable, IntakeRefused, ValueError) as exc:  # a bad URL too
            log.info("theow: passing run of %s not sent: %s", job, one_line(exc))
            return False
    try:
        app = client.app
        redis = app.backend.client
        if redis.exists(names.key_passing_sample(names.agent_job(client.agent, job))):
            return False  # a run of this job was learned this interval
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
