"""Celery tasks: verify the sender, deserialize, call a service, return what it recorded.

Every task first checks who sent its message (``theow_workers.identity``):
agent tasks take an agent token's signature, internal ones the workers'. A
refused message is never acted on; a refused submission is recorded as a
``rejected`` failure under an id of its own, so a forged message can never
take the id, and with it the verdict, of another agent's failure.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from celery.exceptions import SoftTimeLimitExceeded

from theow_client import names, signing
from theow_client.facts import FactsError
from theow_client.jsontypes import Json, JsonObject
from theow_client.messages import ExploreRequest, PassingRun, SubmitRequest
from theow_client.outcome import MAX_ERROR_CHARS as MAX_OUTCOME_ERROR
from theow_client.outcome import bounded_outputs
from theow_client.passing import passing_interval
from theow_workers.adapters.forges import ForgeAPI, ForgeError
from theow_workers.celery_app import app, settings
from theow_workers.config import ConfigError
from theow_workers.core.explore.service import InFlight
from theow_workers.core.llm.explanation import InFlight as ExplainInFlight
from theow_workers.core.logs.normal import passing_run
from theow_workers.core.logs.redact import redact, redact_text
from theow_workers.core.ports import OwnerTimeout
from theow_workers.delivery import DeliveryPolicy
from theow_workers.explainer import after_verdict, explain_failure
from theow_workers.explorer.run import explore_failure, record_explore_error
from theow_workers.identity import (
    AGENT,
    WORKER,
    Identity,
    Refused,
    count_refused,
    refused_id,
    submission_id,
)
from theow_workers.integrations import alerts, feedback, intake
from theow_workers.integrations.hooks import HookedJob, NotAJob
from theow_workers.ledger import service as ledger
from theow_workers.runtime import RulesInvalid, Runtime
from theow_workers.store import StoreUnavailable
from theow_workers.worker import ServicesTask

log = logging.getLogger("theow.tasks")

IN_FLIGHT_RETRY_SECONDS = 1
IN_FLIGHT_MAX_RETRIES = 1800  # longer than any exploration's time limit
# Worth retrying: the broker, the database or Milvus was briefly unreachable.
TRANSIENT: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, StoreUnavailable)
STORE_RETRIES = 3
# An explanation whose call failed for a while (a 429, a timeout): its task tries again.
EXPLAIN_AGAIN = frozenset({"rate_limited", "failed"})
EXPLAIN_RETRIES = 2
EXPLAIN_TIME_LIMIT = int(
    3 * settings.llm_request_timeout
    + settings.llm_max_wait_seconds
    + settings.explain_wait_seconds
    + 60
)


@app.task(name=names.TASK_RESOLVE, base=ServicesTask, bind=True)
def resolve(self: ServicesTask, payload: Json = None, *_: object, **__: object) -> JsonObject:
    """Resolve one failure; returns its Verdict as a dict.

    Whatever arguments arrive are accepted: a malformed message is recorded as rejected, not
    failed in Celery's call with no outcome of its own.
    """
    rt = self.services
    request = SubmitRequest.from_wire(
        signing.unsigned(payload) if isinstance(payload, dict) else payload
    )
    requested = request.failure_id_or(str(self.request.id))
    try:
        who = rt.verifier.verify(names.TASK_RESOLVE, payload, AGENT)
    except Refused as refused:
        return _refused_submission(rt, payload, request, refused, str(self.request.id))
    request = _as_sent_by(rt, who, request, requested)
    failure_id = request.failure_id_or(requested)
    try:
        verdict = _resolve_delivered(self, rt, request, failure_id, who.name)
        verdict = after_verdict(rt, verdict, who.name)  # explain, after the verdict is recorded
        recorded = ledger.record_failure(rt, who.name, failure_id, verdict)  # its run, origin
        verdict = recorded.onto(verdict)
        _deliver(rt, who.name, {requested, failure_id}, verdict)
        ledger.revise(rt, recorded)  # the earlier failures it changes, after the agent has it
        return verdict
    except StoreUnavailable as exc:
        # The database is down, or dropped a pooled connection used in the last 10 s
        # (not pinged before use: store.schema.PING_AFTER_IDLE_S); the pool replaces
        # it. A verdict this try stored ends the next one at once; else it runs again.
        retries = int(self.request.retries or 0)
        log.warning("failure %s: the store is unavailable, retrying: %s", failure_id, exc)
        raise self.retry(countdown=1 + retries, max_retries=STORE_RETRIES, exc=exc) from None


def _as_sent_by(
    rt: Runtime, who: Identity, request: SubmitRequest, requested: str
) -> SubmitRequest:
    """The request with its failure id derived from the verified agent, the conflict noted.

    The id is ``signing.failure_id`` of the agent, the job, the idempotency key
    and the facts as sent: never what the message names. Another use of the
    same key (another agent's, or this agent's with other facts) is a failure
    of its own, with the others noted under ``notes.conflict``. A ``session_id``
    the agent names is dropped: an agent's explorations share its own hourly
    budget (``explorer.run.default_session_id``), not one it picks.
    """
    failure_id = submission_id(who.name, request, requested)
    key = request.idempotency_key
    notes = dict(request.notes) if isinstance(request.notes, dict) else {}
    notes.pop("conflict", None)  # the worker's to say, not the agent's
    if key is not None:
        others = rt.store.same_key(key, but=failure_id)
        if others:
            notes["conflict"] = {
                "idempotency_key": key,
                "with": others,
                "why": "the same idempotency key was sent before by another agent or job, "
                "or with other facts: recorded as a failure of its own",
            }
    return replace(request, failure_id=failure_id, notes=notes, session_id=None)


def _refused_submission(
    rt: Runtime, payload: Json, request: SubmitRequest, refused: Refused, task_id: str
) -> JsonObject:
    """Record a submission whose sender is unverified as rejected, under an id of its own.

    The sender reads why: an old client without a token in the task's result,
    a client whose token is wrong under ``names.refusal_key`` (its message's
    own signature: a forger's refusal never stands in for a real verdict).
    """
    unreadable = isinstance(payload, dict) and names.UNREADABLE in payload
    if not unreadable:  # a message no one could read is not a refused sender
        count_refused(rt.redis, names.TASK_RESOLVE)
    # Its own id, from the message's task id: never another failure's, and one row however
    # often the message is delivered.
    own_id = refused_id(task_id)
    requested = request.failure_id_or(task_id)
    claimed = {"failure_id": requested, "agent": refused.claimed}
    if not isinstance(payload, dict):  # kept as sent, for a person to look at
        request = SubmitRequest.from_wire({"payload": payload})
    request = replace(request, failure_id=own_id, extra={**request.extra, "claimed": claimed})
    reason = str(payload[names.UNREADABLE])[:500] if unreadable else f"refused: {refused}"
    verdict = rt.service.reject(request, own_id, reason).to_dict()
    found = signing.signed_by(payload)
    if found is not None and signing.NAME.match(found.name):
        answer = {**verdict, "failure_id": requested}
        with_key = names.refusal_key(found.name, requested, found.sig)
        try:
            rt.redis.set(with_key, json.dumps(answer), ex=names.VERDICT_TTL)
        except Exception as exc:  # the rejection is recorded; telling the agent is best effort
            log.warning("could not tell %s why its message was refused: %s", refused.claimed, exc)
    return verdict


def _deliver(rt: Runtime, agent: str, failure_ids: set[str], verdict: JsonObject) -> None:
    """The verdict under the agent's verdict key(s): what its client reads, woken at once."""
    text = json.dumps(verdict)
    pipe = rt.redis.pipeline(transaction=False)  # one round trip
    for failure_id in failure_ids:
        pipe.set(names.verdict_key(agent, failure_id), text, ex=names.VERDICT_TTL)
        ready = names.verdict_ready_key(agent, failure_id)
        pipe.rpush(ready, 1)
        pipe.expire(ready, names.READY_TTL)
    pipe.execute()


def _resolve_delivered(
    self: ServicesTask, rt: Runtime, request: SubmitRequest, failure_id: str, agent: str
) -> JsonObject:
    with rt.deliveries.claim(failure_id) as claim:
        # A second message for the same failure (a duplicate submit) waits for the
        # first one's verdict rather than running the actions twice.
        try:
            decided = claim.wait(
                lambda: rt.service.store.verdict(failure_id), rt.settings.resolve_time_limit
            )
        except OwnerTimeout:
            reason = "another worker held this failure too long"
            return rt.service.give_up(request, failure_id, reason, agent=agent).to_dict()
        if decided is not None:
            return decided.to_dict()
        return _resolve_claimed(self, rt, request, failure_id, agent)


def _resolve_claimed(
    self: ServicesTask, rt: Runtime, request: SubmitRequest, failure_id: str, agent: str
) -> JsonObject:
    delivery = rt.deliveries.count(failure_id)
    policy = DeliveryPolicy.live(rt.settings.max_deliveries, rt.settings.resolve_time_limit)
    try:
        return policy.resolve(rt.service, request, failure_id, delivery, agent).verdict.to_dict()
    except StoreUnavailable:
        rt.deliveries.uncount(failure_id)  # the store failed, not this delivery
        raise
    except RulesInvalid as exc:
        # No valid rules version was ever loaded: an error verdict now would be final for
        # a failure that valid rules may resolve, so the failure waits for them instead.
        rt.deliveries.uncount(failure_id)  # waiting is not a crashed delivery
        retries, most = int(self.request.retries or 0), rt.settings.rules_wait_retries
        pause = rt.settings.rules_wait_seconds
        if retries >= most:
            reason = f"rules are invalid and no valid version was ever loaded: {exc}"
            return rt.service.give_up(request, failure_id, reason, agent=agent).to_dict()
        log.error(
            "failure %s waits for valid rules (try %d of %d, next in %ds): %s",
            failure_id,
            retries + 1,
            most,
            pause,
            exc,
        )
        raise self.retry(countdown=pause, max_retries=most, exc=exc) from None


@app.task(
    name=names.TASK_EXPLORE,
    base=ServicesTask,
    bind=True,
    time_limit=settings.explore_time_limit,
    soft_time_limit=max(1, settings.explore_time_limit - 30),
    autoretry_for=TRANSIENT,
    retry_backoff=True,
    max_retries=3,
)
def explore(self: ServicesTask, request: Json = None, *_: object, **__: object) -> JsonObject:
    """Explore one unmatched failure; returns the exploration's summary.

    Internal: only a message signed with the workers' secret is explored
    (a forged one could otherwise name any failure and any session budget).
    """
    rt = self.services
    try:
        rt.verifier.verify(names.TASK_EXPLORE, request, WORKER)
    except Refused as refused:
        count_refused(rt.redis, names.TASK_EXPLORE)
        log.warning("explore request refused: %s", refused)
        return {"outcome": "refused", "proposal_id": None, "reason": f"refused: {refused}"}
    wanted = ExploreRequest.from_wire(signing.unsigned(request))
    try:
        return explore_failure(rt, wanted, rt.explorer).summary()
    except InFlight as waiting:
        # The same root cause is being explored elsewhere: come back for its outcome
        # instead of holding this worker process (prefetch 1) while we wait.
        log.info("failure %s: %s; retrying later", wanted.failure_id, waiting)
        raise self.retry(
            exc=waiting, countdown=IN_FLIGHT_RETRY_SECONDS, max_retries=IN_FLIGHT_MAX_RETRIES
        ) from None
    except SoftTimeLimitExceeded:
        reason = f"exploration exceeded {rt.settings.explore_time_limit}s"
        return record_explore_error(rt, wanted, reason)
    except ConfigError as exc:
        # No retry can fix a missing key or a bad model name: record why, once.
        log.error("failure %s: cannot explore: %s", wanted.failure_id, exc)
        return record_explore_error(rt, wanted, f"this explorer cannot explore: {exc}")


@app.task(
    name=names.TASK_CLIENT_OUTCOME,
    base=ServicesTask,
    bind=True,
    autoretry_for=TRANSIENT,
    retry_backoff=True,
    max_retries=3,
)
def client_outcome(self: ServicesTask, report: Json) -> JsonObject:
    """What a build agent's client-side fix did; counts the rule's success or failure.

    ``report``: ``{"failure_id", "rule", "outcome": "success" | "error",
    "error", "outputs": [{"action", "output"}], "rerun_passed": bool}``.
    ``outcome`` says whether the actions ran, ``rerun_passed`` whether the
    step passed when run again after them: the fix worked only if both. The
    failure becomes ``resolved`` or ``failed``, once per pending attempt; a
    report for anything else counts nothing and says why. Only the agent that
    sent the failure may report on it.
    """
    rt = self.services
    try:
        who = rt.verifier.verify(names.TASK_CLIENT_OUTCOME, report, AGENT)
    except Refused as refused:
        count_refused(rt.redis, names.TASK_CLIENT_OUTCOME)
        return {"counted": False, "reason": f"refused: {refused}"}
    report = signing.unsigned(report)
    if report.get("outcome") not in ("success", "error"):
        return {
            "counted": False,
            "reason": redact_text(f"malformed client outcome: {report!r}"[:500]),
        }
    failure_id, rule = str(report.get("failure_id")), str(report.get("rule"))
    ran = report["outcome"] == "success"
    if ran and not isinstance(report.get("rerun_passed"), bool):
        # An older client reports when its actions ran, before the re-run: that the
        # fix works is not known, so the failure stays suggested and nothing counts.
        reason = f"failure {failure_id}: reported before the step ran again; left suggested"
        return {"counted": False, "reason": reason}
    worked = ran and bool(report["rerun_passed"])
    # Masked again on store: an older client sent outputs and errors as the agent had them.
    error = redact_text(str(report.get("error") or "")[:MAX_OUTCOME_ERROR])
    if ran and not worked:
        error = error or "the step failed again after the client-side fix ran"
    exists, owner = rt.store.failure_agent(failure_id)
    if exists and owner != who.name:
        count_refused(rt.redis, names.TASK_CLIENT_OUTCOME)
        log.warning("agent %s reported on failure %s, not its own", who.name, failure_id)
        return {"counted": False, "reason": f"failure {failure_id} was not sent by {who.name}"}
    sent = report.get("outputs")
    outputs = redact({"outputs": bounded_outputs(sent if isinstance(sent, list) else [])})
    listed = outputs["outputs"] if isinstance(outputs["outputs"], list) else []
    kept = [output for output in listed if isinstance(output, dict)]
    counted = rt.store.settle_client_attempt(failure_id, rule, worked, error, kept)
    if not counted:
        reason = f"failure {failure_id} has no attempt of rule {rule} waiting for its client"
        return {"counted": False, "reason": reason}
    log.info("failure %s: client-side fix of %s worked: %s", failure_id, rule, worked)
    settled = rt.store.verdict(failure_id)
    if settled is not None:  # the agent's verdict key shows the fix's outcome too
        _deliver(rt, who.name, {failure_id}, settled.to_dict())
    return {"counted": True, "reason": ""}


@app.task(
    name=names.TASK_PASSING,
    base=ServicesTask,
    bind=True,
    autoretry_for=TRANSIENT,
    retry_backoff=True,
    max_retries=3,
)
def passing(self: ServicesTask, payload: Json = None, *_: object, **__: object) -> JsonObject:
    """A passing run of a job: its lines are mined into the job's normal.

    ``payload``: ``{"job", "run_id", "facts_json"}`` (``theow_client.passing``).
    A malformed one is dropped with the reason: a passing run is never owed anything.
    It teaches the normal of the sending agent's own job (``names.agent_job``), once
    per interval: the worker takes the sample, with its TTL, never the agent.
    """
    rt = self.services
    try:
        who = rt.verifier.verify(names.TASK_PASSING, payload, AGENT)
    except Refused as refused:
        count_refused(rt.redis, names.TASK_PASSING)
        return {"learned": False, "reason": f"refused: {refused}"}
    try:
        job, lines = passing_run(PassingRun.from_wire(signing.unsigned(payload)))
    except (FactsError, TypeError, ValueError) as exc:
        log.warning("passing run dropped: %s", str(exc)[:300])
        return {"learned": False, "reason": str(exc)[:500]}
    own_job = names.agent_job(who.name, job)
    if not rt.normals.sample(own_job, int(passing_interval())):
        return {"learned": False, "reason": "a passing run of this job was learned this interval"}
    kept = rt.normals.learn(own_job, lines)
    log.info("job %s: passing run learned, %d templates", job, kept)
    return {"learned": True, "job": job, "templates": kept}


@app.task(
    name=names.TASK_EXPLAIN,
    base=ServicesTask,
    bind=True,
    autoretry_for=TRANSIENT,
    retry_backoff=True,
    max_retries=3,
    # Past a request's three tries, the rate limiter's wait and another worker's lock; both
    # set (the app's defaults are the resolver's, and a soft limit above them is refused).
    soft_time_limit=EXPLAIN_TIME_LIMIT,
    time_limit=EXPLAIN_TIME_LIMIT + 30,
)
def explain(self: ServicesTask, request: Json = None, *_: object, **__: object) -> JsonObject:
    """Explain one unexplained failure (``theow_workers.explainer``); internal, signed by a worker.

    Whatever the model answers (or fails to), the failure's verdict records it;
    a cause another worker is explaining is tried again once its answer is in.
    """
    rt = self.services
    try:
        rt.verifier.verify(names.TASK_EXPLAIN, request, WORKER)
    except Refused as refused:
        count_refused(rt.redis, names.TASK_EXPLAIN)
        return {"state": "refused", "reason": f"refused: {refused}"}
    request = signing.unsigned(request)
    try:
        result = explain_failure(rt, request)
    except ExplainInFlight as waiting:
        raise self.retry(
            exc=waiting, countdown=IN_FLIGHT_RETRY_SECONDS, max_retries=IN_FLIGHT_MAX_RETRIES
        ) from None
    if result.get("state") in EXPLAIN_AGAIN and int(self.request.retries or 0) < EXPLAIN_RETRIES:
        # Recorded on the failure meanwhile; asked again once the cause's rest is over.
        countdown = rt.settings.explain_retry_seconds + 1
        raise self.retry(countdown=countdown, max_retries=EXPLAIN_RETRIES)
    return result


@app.task(
    name=names.TASK_HOOK,
    base=ServicesTask,
    bind=True,
    autoretry_for=TRANSIENT,
    retry_backoff=True,
    max_retries=5,
)
def hook(self: ServicesTask, payload: Json = None, *_: object, **__: object) -> JsonObject:
    """A finished CI job a forge's webhook named (``web.hooks``): its log read, then resolved.

    Internal: signed by the web process with the workers' secret. A failed job
    is resolved as the client's submission of it would be, under the forge's
    agent (``github-hooks``, ``gitlab-hooks``), then, with ``pr_comments`` on,
    written into its pull requests' comment; a passing one of the default branch teaches its normal
    (sampled) and, if a comment lists it as failed, is shown passing there.
    """
    rt = self.services
    try:
        rt.verifier.verify(names.TASK_HOOK, payload, WORKER)
        job = HookedJob.from_wire(signing.unsigned(payload))
    except (Refused, NotAJob) as refused:
        if isinstance(refused, Refused):
            count_refused(rt.redis, names.TASK_HOOK)
        log.warning("hooked job refused: %s", refused)
        return {"outcome": "refused", "reason": f"refused: {refused}"[:500]}
    api = ForgeAPI.for_settings(rt.settings, job.forge, rt.redis)
    try:
        if not job.failed:
            # Before the normal's sampling: a comment listing the job must say it passed.
            marked = (
                feedback.mark_passed_or_log(rt.redis, api, job) if rt.settings.pr_comments else []
            )
            ledger.revise(rt, ledger.record_hooked(rt, job))
            learned = intake.learn_passing(rt, api, job)
            return {**learned, "comments": marked} if marked else learned
        request = intake.submission(job, api.job_log(job))
        request = _as_sent_by(rt, Identity(job.agent, "agent"), request, str(request.failure_id))
        failure_id = str(request.failure_id)
        verdict = _resolve_delivered(self, rt, request, failure_id, job.agent)
        verdict = after_verdict(rt, verdict, job.agent)  # explain, as for an agent's failure
        recorded = ledger.record_hooked(rt, job, failure_id, verdict)
        verdict = recorded.onto(verdict)
        if rt.settings.pr_comments:
            feedback.post_or_log(rt.redis, api, job, verdict)
        ledger.revise(rt, recorded)
        return verdict
    except ForgeError as exc:
        if isinstance(exc, ConnectionError):
            raise  # retried (TRANSIENT)
        log.warning("%s job %s: the forge refused: %s", job.forge, job.key, exc)
        return {"outcome": "error", "reason": str(exc)[:500]}
    finally:
        api.close()


@app.task(
    name=names.TASK_ALERT,
    base=ServicesTask,
    bind=True,
    autoretry_for=(alerts.AlertUnavailable, *TRANSIENT),
    retry_backoff=30,
    retry_backoff_max=600,  # under the visibility timeout: a waiting retry is never redelivered
    max_retries=7,
)
def alert(self: ServicesTask, payload: Json = None, *_: object, **__: object) -> JsonObject:
    """One alert (``integrations.alerts``) posted to THEOW_ALERT_URL, signed; retried with back-off.

    Internal: signed by the worker that raised it with the workers' secret.
    """
    rt = self.services
    try:
        rt.verifier.verify(names.TASK_ALERT, payload, WORKER)
    except Refused as refused:
        count_refused(rt.redis, names.TASK_ALERT)
        log.warning("alert refused: %s", refused)
        return {"outcome": "refused", "reason": f"refused: {refused}"[:500]}
    return alerts.deliver(rt.settings, rt.redis, signing.unsigned(payload))
