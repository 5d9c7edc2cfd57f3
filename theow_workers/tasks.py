"""Celery tasks: deserialize, call a service, return what it recorded."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.exc import OperationalError

from theow_client import names
from theow_workers import runtime
from theow_workers.adapters.redis_state import FailureClaim
from theow_workers.celery_app import app
from theow_workers.core.explorer import InFlight
from theow_workers.explorer.run import explore_failure, record_explore_error
from theow_workers.runtime import RulesInvalid

log = logging.getLogger("theow.tasks")

DELIVERY_TTL = 24 * 3600
IN_FLIGHT_RETRY_SECONDS = 1
IN_FLIGHT_MAX_RETRIES = 1800  # longer than any exploration's time limit
# Worth retrying: the broker, the database or Milvus was briefly unreachable.
TRANSIENT: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, OperationalError)


@app.task(name=names.TASK_RESOLVE, bind=True)
def resolve(self: Task, payload: Any) -> dict[str, Any]:
    """Resolve one failure; returns its Verdict as a dict."""
    rt = runtime.current()
    failure_id = str(self.request.id)
    with FailureClaim(rt.redis, failure_id) as claim:
        # A second message for the same failure (a duplicate submit) waits for the
        # first one's verdict rather than running the actions twice.
        deadline = time.monotonic() + rt.settings.resolve_time_limit
        pause = 0.02
        while not claim.try_take():
            decided = rt.service.store.verdict(failure_id)
            if decided is not None:
                return decided.to_dict()
            if time.monotonic() > deadline:
                return rt.service.give_up(
                    payload, failure_id, "another worker held this failure too long"
                ).to_dict()
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        return _resolve_claimed(rt, payload, failure_id)


def _resolve_claimed(rt: runtime.Runtime, payload: Any, failure_id: str) -> dict[str, Any]:
    key = names.key_deliveries(failure_id)
    delivery = int(rt.redis.incr(key))
    rt.redis.expire(key, DELIVERY_TTL)
    if delivery > rt.settings.max_deliveries:
        reason = (
            f"delivered {delivery} times without a verdict (worker crashed or was killed each time)"
        )
        return rt.service.give_up(payload, failure_id, reason).to_dict()
    try:
        return rt.service.resolve(payload, failure_id, delivery).to_dict()
    except SoftTimeLimitExceeded:
        reason = f"resolution exceeded the {rt.settings.resolve_time_limit}s task time limit"
        return rt.service.give_up(payload, failure_id, reason).to_dict()
    except RulesInvalid as exc:
        return rt.service.give_up(payload, failure_id, f"rules are invalid: {exc}").to_dict()


@app.task(
    name=names.TASK_EXPLORE,
    bind=True,
    time_limit=runtime.current().settings.explore_time_limit,
    soft_time_limit=max(1, runtime.current().settings.explore_time_limit - 30),
    autoretry_for=TRANSIENT,
    retry_backoff=True,
    max_retries=3,
)
def explore(self: Task, request: dict[str, Any]) -> dict[str, Any]:
    """Explore one unmatched failure; returns the exploration's summary."""
    rt = runtime.current()
    try:
        return explore_failure(rt, request, rt.explorer).summary()
    except InFlight as waiting:
        # The same root cause is being explored elsewhere: come back for its outcome
        # instead of holding this worker process (prefetch 1) while we wait.
        log.info("failure %s: %s; retrying later", request.get("failure_id"), waiting)
        raise self.retry(
            exc=waiting, countdown=IN_FLIGHT_RETRY_SECONDS, max_retries=IN_FLIGHT_MAX_RETRIES
        ) from None
    except SoftTimeLimitExceeded:
        reason = f"exploration exceeded {rt.settings.explore_time_limit}s"
        return record_explore_error(rt, request, reason)
