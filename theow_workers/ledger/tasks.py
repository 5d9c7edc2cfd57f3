"""The Celery task ``theow.run``: one run for the ledger, verified, recorded, answered.

From an agent (its token's signature): a passed run, or a failed one without
its log (``theow_client.ledger``, or the intake's ``POST /api/v1/runs``), at most
``THEOW_RUNS_PER_MINUTE`` a minute per agent (a token bucket in Redis shared by
every worker; past it a run is refused, counted and dropped). From
the web process (the workers' secret): a ``workflow_run`` delivery naming the
pull request of a workflow run's jobs. A malformed report is dropped with the
reason: a run is never owed anything.
"""

from __future__ import annotations

from theow_client import names, signing
from theow_client.jsontypes import Json, JsonObject
from theow_workers.adapters.agent_rate import RedisBuckets, over_rate, run_burst
from theow_workers.celery_app import app
from theow_workers.identity import AGENT, RATE_LIMITED, WORKER, Refused, count_refused
from theow_workers.integrations.hooks import HookedRun, NotAJob
from theow_workers.ledger import service
from theow_workers.store import StoreUnavailable
from theow_workers.worker import ServicesTask

# Who may send a run: an agent reporting its own, or the web process passing on a forge's word.
SENDERS = AGENT | WORKER
HOOKED_RUN = "hooked_run"


@app.task(
    name=names.TASK_RUN,
    base=ServicesTask,
    bind=True,
    autoretry_for=(ConnectionError, TimeoutError, StoreUnavailable),
    retry_backoff=True,
    max_retries=3,
)
def run(self: ServicesTask, payload: Json = None, *_: object, **__: object) -> JsonObject:
    """Record one run (``payload``: ``{"job", "outcome", "run"}``, ``messages.RunReport``)."""
    rt = self.services
    try:
        who = rt.verifier.verify(names.TASK_RUN, payload, SENDERS)
    except Refused as refused:
        count_refused(rt.redis, names.TASK_RUN)
        return {"recorded": False, "reason": f"refused: {refused}"[:500]}
    body = signing.unsigned(payload)
    if who.scope == "worker":
        try:
            hooked = HookedRun.from_wire(body.get(HOOKED_RUN) if isinstance(body, dict) else None)
        except NotAJob as exc:
            return {"recorded": False, "reason": str(exc)[:500]}
        return service.note_pull_request(rt, hooked)
    per_minute = rt.settings.runs_per_minute
    wait = RedisBuckets(rt.redis, per_minute, run_burst(per_minute)).take(who.name)
    if wait > 0:  # an agent past its rate: this run is dropped, counted, and said why
        count_refused(rt.redis, names.TASK_RUN, RATE_LIMITED)
        return {"recorded": False, "reason": f"refused: {over_rate(who.name, per_minute, wait)}"}
    source = "intake" if isinstance(body, dict) and body.get("via") == "intake" else "client"
    return service.record_report(rt, who.name, body, source)
