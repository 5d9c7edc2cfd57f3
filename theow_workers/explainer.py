"""Wiring explain to this worker process: enqueue after a verdict, explain one failure.

The resolve task calls :func:`after_verdict` once a verdict is recorded: for a
failure no specific rule explains, with ``THEOW_EXPLAIN`` on, it sends
``{"failure_id", "agent"}`` to the ``explain`` queue (an internal, signed task)
and marks the verdict the agent reads ``explanation: pending``. The verdict is
never delayed by it. The ``theow.explain`` task calls :func:`explain_failure`,
which reads the failure from SQL (secrets already masked), asks
``core.llm.explanation.ExplainService`` and puts the verdict, now with its
explanation, back under the agent's verdict key, where ``theow-client run``
still waiting picks it up.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Protocol

from theow_client import names
from theow_client.jsontypes import JsonObject
from theow_client.verdict import Verdict
from theow_workers.core.llm.explanation import (
    ExplainService,
    cause_key,
    explains,
    project_of,
    render_prompt,
    summary_of,
)
from theow_workers.core.logs.redact import Masker, settings_secrets
from theow_workers.core.logs.summary import wrapper_predicate
from theow_workers.core.ports import PENDING

if TYPE_CHECKING:
    from redis import Redis

    from theow_workers.config import Settings
    from theow_workers.core.llm.model import FallbackRunner
    from theow_workers.core.resolve.library import Library
    from theow_workers.core.resolve.service import ResolveService
    from theow_workers.identity import Verifier
    from theow_workers.store.results import SqlStore


class Runtime(Protocol):
    """What explain uses of its process's services (``runtime.Runtime``)."""

    settings: Settings

    @property
    def redis(self) -> Redis: ...
    @property
    def store(self) -> SqlStore: ...
    @property
    def service(self) -> ResolveService: ...
    @property
    def explainer(self) -> ExplainService: ...
    @property
    def verifier(self) -> Verifier: ...
    def knowledge(self) -> Library: ...


log = logging.getLogger("theow.explain")


def after_verdict(runtime: Runtime, verdict: JsonObject, agent: str | None) -> JsonObject:
    """The verdict as its agent should read it now; an explain task sent when it is one.

    Never raises: the verdict goes out whatever happens to its explanation.
    """
    if not runtime.settings.explain or verdict.get("explanation"):
        return verdict
    try:
        if not explains(Verdict.from_dict(verdict)):
            return verdict
        enqueue(runtime, str(verdict["failure_id"]), agent)
    except Exception as exc:  # the broker hiccuped: the verdict still goes out, unexplained
        log.warning("failure %s: explain not sent: %s", verdict.get("failure_id"), exc)
        return verdict
    return {**verdict, "explanation": {"state": PENDING}}


def enqueue(runtime: Runtime, failure_id: str, agent: str | None) -> None:
    """Send one failure to the explain queue, signed as the workers' internal task."""
    from theow_workers.celery_app import app
    from theow_workers.tokens import signed_internal

    request = {"failure_id": failure_id, "agent": agent}
    signed = signed_internal(runtime.settings, names.TASK_EXPLAIN, request)
    app.send_task(names.TASK_EXPLAIN, args=[signed], queue=names.QUEUE_EXPLAIN)


def service(runtime: Runtime) -> ExplainService:
    """The explain service of this worker process: Redis cache, SQL, the configured model."""
    from theow_workers.adapters.explanations import RedisExplanations
    from theow_workers.store.explanations import ExplanationStore

    s = runtime.settings
    # A killed worker's lock lasts as long as its call could: the request and its retries.
    hold = 3 * s.llm_request_timeout + s.llm_max_wait_seconds + 10
    return ExplainService(
        cache=RedisExplanations(runtime.redis, hold=hold, retry_after=s.explain_retry_seconds),
        store=ExplanationStore(runtime.store),
        ask=lambda: model(runtime).generate,
        mask=Masker(settings_secrets(s)).text,
        max_output_tokens=s.explain_max_output_tokens,
        wait_seconds=s.explain_wait_seconds,
        retry_after=s.explain_retry_seconds,
    )


def model(runtime: Runtime) -> FallbackRunner:
    """The configured models behind the shared rate limiter and the daily spend cap."""
    from theow_workers.adapters.providers import gateway_from_settings
    from theow_workers.adapters.redis_state import RedisLimiter, spend_cap

    s = runtime.settings
    limiter = RedisLimiter(runtime.redis, s.llm_requests_per_minute, s.llm_tokens_per_minute)
    return gateway_from_settings(s, limiter, spend_cap(runtime.redis, s.llm_daily_budget))


def explain_failure(runtime: Runtime, request: JsonObject) -> JsonObject:
    """Explain one failure (raises ``core.llm.explanation.InFlight`` to be tried again later)."""
    from theow_workers.store.explore import ExploreStore

    failure_id = str(request.get("failure_id"))
    agent = request.get("agent") if isinstance(request.get("agent"), str) else None
    failure = ExploreStore(runtime.store).failure(failure_id)
    verdict = runtime.store.verdict(failure_id)
    if failure is None or verdict is None:
        return {"failure_id": failure_id, "state": "skipped", "reason": "no such verdict"}
    if not explains(verdict):
        return {"failure_id": failure_id, "state": "skipped", "reason": f"{verdict.status}"}
    facts = dict(failure.facts)
    # Shared only within what the failure's signature proved: its agent, or a repository
    # its token may speak for; never the repository its facts name (``Verifier.scope``).
    scope = runtime.verifier.scope(failure.agent, project_of(facts))
    book = runtime.knowledge().book
    normal = runtime.service.normal_of(facts, failure_id, agent)
    summary = summary_of(
        facts, normal.is_normal if normal is not None else None, wrapper_predicate(book.rules)
    )
    prompt = render_prompt(summary, verdict.where)
    # Keyed on what the model is shown too: an answer is only reused for the same text.
    cause = cause_key(scope, failure.fingerprint, prompt)

    explanation, shown = runtime.explainer.explain(failure_id, cause, scope, lambda: prompt)
    if agent and shown is not None:  # the agent's client may still be waiting for it
        text = json.dumps(shown.to_dict())
        runtime.redis.set(names.verdict_key(agent, failure_id), text, ex=names.VERDICT_TTL)
    return {"failure_id": failure_id, "cause": cause, **explanation.shown()}
