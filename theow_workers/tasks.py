"""Celery tasks: deserialize, call a service, return what it recorded."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded

from theow_client import names
from theow_workers import runtime
from theow_workers.celery_app import app
from theow_workers.runtime import RulesInvalid

log = logging.getLogger("theow.tasks")

DELIVERY_TTL = 24 * 3600


@app.task(name=names.TASK_RESOLVE, bind=True)
def resolve(self: Task, payload: Any) -> dict[str, Any]:
    """Resolve one failure; returns its Verdict as a dict."""
    rt = runtime.current()
    failure_id = str(self.request.id)
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
