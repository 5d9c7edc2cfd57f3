"""The HTTP intake: build agents that hold no broker credentials submit over HTTPS.

A public pull request's build or a hosted runner should not hold a broker
login. With an agent token (``theow tokens add NAME --scope agent``) and
``THEOW_INTAKE_URL``, ``theow-client`` posts the very payload it would send
over Redis (``client.build_payload``: bounded, masked) to ``POST
/api/v1/failures`` and reads the verdict at ``GET
/api/v1/failures/{id}/verdict``.

Here, in order: the body is at most ``intake_max_bytes`` (413, read no
further: ``bodies.BodyLimit``, before anything else); the token is a live
agent token (401, 403 otherwise); the agent is under ``intake_per_minute``
submissions (429); the body is JSON no deeper than a task message may be
(``wire.MAX_MESSAGE_DEPTH``) and reads as a ``SubmitRequest`` (400), parsed
off the event loop when large (``bodies.parsed``). Then it is signed as the agent, with the signing
key the token store keeps for it, and queued on the resolve queue like any
client's message: the worker verifies that signature, derives the failure
id from the agent, and resolves it on the normal path. Whatever signature
the body carried is dropped: the bearer token is the proof here.

A verdict is readable only by the agent that submitted the failure: another
agent's id answers 404, exactly as an unknown one does.

The rest of what an agent sends comes the same way, so an agent that uses the
intake needs no broker at all: ``POST /api/v1/failures/{id}/outcome`` (what a
verdict's client-side actions did, ``theow_client.outcome``) and ``POST
/api/v1/passing`` (a passing run, ``theow_client.passing``) and ``POST
/api/v1/runs`` (a run's ledger record, ``theow_client.ledger``, at most
``runs_per_minute`` per agent, refused 429 and counted past it). Each is checked
as a submission is, signed as the agent and queued for the very task the
broker would have carried it to (``client_outcome``, ``passing``, ``run``), which
verifies it and decides what it counts. A passing run of a job whose sample is
taken this interval is answered 200 ``{"sent": false}`` and not queued.

>>> # curl -X POST -H "Authorization: Bearer $AGENT_TOKEN" --data @payload.json $URL/api/v1/failures
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from theow_client import names, signing
from theow_client.ci_run import RunFact
from theow_client.config import celery_app
from theow_client.jsontypes import JsonObject
from theow_client.messages import PassingRun, RunReport, SubmitRequest
from theow_client.redact import summary
from theow_workers.adapters.agent_rate import over_rate, run_burst
from theow_workers.identity import RATE_LIMITED, count_refused, submission_id
from theow_workers.store.tokens import TokenInfo
from theow_workers.web import api_schema as schema
from theow_workers.web.api import AGENT_SCOPES, answer, api_of, authorize, problem
from theow_workers.web.bodies import parsed
from theow_workers.web.rate import TokenBuckets
from theow_workers.wire import MAX_MESSAGE_DEPTH, deeper_than

if TYPE_CHECKING:
    from celery import Celery

    from theow_workers.config import Settings
    from theow_workers.web.console import Console

log = logging.getLogger("theow.web.intake")
BURST = 30  # submissions an agent may make at once (a matrix build failing)
SEND_TIMEOUT = 5.0


class Intake:
    """The intake's per-agent buckets and its sender to the resolve queue (made on first use)."""

    def __init__(self, console: Console) -> None:
        settings: Settings = console.settings
        self.console = console
        self.submissions = TokenBuckets(
            settings.intake_per_minute, min(BURST, settings.intake_per_minute)
        )
        # Outcomes and passing runs: a bucket of their own, so they never crowd out failures.
        self.reports = TokenBuckets(
            settings.intake_per_minute, min(BURST, settings.intake_per_minute)
        )
        # Runs for the ledger, one per job run: their own rate (THEOW_RUNS_PER_MINUTE); the
        # workers bound an agent's runs again across web processes (adapters.agent_rate).
        self.runs = TokenBuckets(settings.runs_per_minute, run_burst(settings.runs_per_minute))
        self._app: Celery | None = None
        self._lock = threading.Lock()

    @property
    def sender(self) -> Celery:
        """A publish-only Celery app on the fleet's broker: the client's, with the web's URL."""
        with self._lock:
            if self._app is None:
                self._app = celery_app(self.console.settings.redis_url, SEND_TIMEOUT)
            return self._app

    def queue(self, agent: str, key: bytes, body: JsonObject) -> str:
        """Sign ``body`` as ``agent`` and send it to the resolvers; the failure's id."""
        request = SubmitRequest.from_wire(body)
        requested = request.failure_id_or(str(uuid.uuid4()))
        failure_id = submission_id(agent, request, requested)
        redis = self.console.runtime().redis
        redis.set(names.intake_key(agent, failure_id), "queued", ex=names.VERDICT_TTL)
        try:
            self.publish(names.TASK_RESOLVE, names.QUEUE_RESOLVE, agent, key, body, requested)
        except Exception:
            with contextlib.suppress(Exception):  # not queued: its verdict is not to be awaited
                redis.delete(names.intake_key(agent, failure_id))
            raise
        return failure_id

    def queue_outcome(self, agent: str, key: bytes, report: JsonObject) -> None:
        """Sign what ``agent``'s client-side actions did and queue it for ``client_outcome``."""
        self.publish(names.TASK_CLIENT_OUTCOME, names.QUEUE_RESOLVE, agent, key, report)

    def queue_passing(self, agent: str, key: bytes, run: JsonObject) -> bool:
        """Sign ``agent``'s passing run and queue it, unless its job was sampled this interval."""
        job = PassingRun.from_wire(run).job
        sample = names.key_passing_sample(names.agent_job(agent, job))
        if self.console.runtime().redis.exists(sample):
            return False
        self.publish(names.TASK_PASSING, names.QUEUE_PASSING, agent, key, run)
        return True

    def run_refused(self, agent: str, wait: float) -> str:
        """Why ``agent``'s run is refused past its rate, counted as the workers count theirs."""
        count_refused(self.console.runtime().redis, names.TASK_RUN, RATE_LIMITED)
        return over_rate(agent, self.console.settings.runs_per_minute, wait)

    def queue_run(self, agent: str, key: bytes, report: JsonObject) -> None:
        """Sign ``agent``'s run record and queue it for ``theow.run``."""
        self.publish(names.TASK_RUN, names.QUEUE_PASSING, agent, key, {**report, "via": "intake"})

    def publish(
        self,
        task: str,
        queue: str,
        agent: str,
        key: bytes,
        body: JsonObject,
        task_id: str | None = None,
    ) -> None:
        """Send ``body`` signed as ``agent`` for ``task``; Flower is shown ids and sizes only."""
        signed = signing.sign(task, body, agent, key)
        try:
            self.sender.send_task(
                task,
                args=[signed],
                task_id=task_id,
                queue=queue,
                retry=False,
                ignore_result=True,
                argsrepr=summary([body]),
                kwargsrepr="{}",
            )
        except Exception:
            with self._lock:  # a half-connected app is never reused
                app, self._app = self._app, None
            if app is not None:
                app.close()
            raise

    def verdict(self, agent: str, failure_id: str) -> tuple[int, JsonObject | None]:
        """200 and the verdict, 202 (queued, undecided) or 404: only ``agent``'s own failures."""
        redis = self.console.runtime().redis
        raw = redis.get(names.verdict_key(agent, failure_id))
        if raw is not None:
            try:
                return 200, json.loads(raw)
            except ValueError:
                pass  # the stored verdict below is the record
        store = self.console.store.sql
        exists, sender = store.failure_agent(failure_id)
        if exists and sender == agent:
            decided = store.verdict(failure_id)
            return (200, decided.to_dict()) if decided is not None else (202, None)
        if not exists and redis.exists(names.intake_key(agent, failure_id)):
            return 202, None
        return 404, None


def intake_of(request: Request) -> Intake:
    intake: Intake = request.app.state.intake
    return intake


def json_object(raw: bytes, what: str) -> JsonObject:
    """The JSON object in a body, without any signature it carried; ValueError saying why not."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ValueError(f"the body is nested deeper than {MAX_MESSAGE_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the body is not JSON: {str(exc)[:200]}") from None
    if deeper_than(body, MAX_MESSAGE_DEPTH):
        raise ValueError(f"the body is nested deeper than {MAX_MESSAGE_DEPTH} levels")
    if not isinstance(body, dict):
        raise ValueError(f"{what} is a JSON object, not {type(body).__name__}")
    return signing.unsigned(body)


def parse(raw: bytes) -> JsonObject:
    """The submission in a body; ValueError saying why it is none."""
    body = json_object(raw, "a submission")
    request = SubmitRequest.from_wire(body)
    if request.malformed:
        raise ValueError(request.malformed)
    if request.facts_json is None and request.facts is None:
        raise ValueError("a submission carries its facts as facts_json (or facts)")
    return body


async def submit(request: Request) -> Response:
    intake = intake_of(request)
    checked = await _agent_body(request, parse, intake.submissions)
    if isinstance(checked, Response):
        return checked
    agent, key, body = checked
    try:
        failure_id = await run_in_threadpool(intake.queue, agent, key, body)
    except Exception as exc:  # the broker: the client keeps the failure in its spool
        return _unqueued(agent, "failure", exc)
    path = f"{schema.API}/failures/{failure_id}/verdict"
    return answer(schema.Accepted, {"failure_id": failure_id, "verdict": path}, status=202)


def parse_outcome(raw: bytes) -> JsonObject:
    """What client-side actions did, from a body; ValueError saying why it is not that.

    >>> parse_outcome(b'{"failure_id": "f-1", "outcome": "maybe"}')
    Traceback (most recent call last):
    ...
    ValueError: an outcome's "outcome" is "success" or "error", not 'maybe'
    """
    report = json_object(raw, "an outcome")
    if report.get("outcome") not in ("success", "error"):
        shown = repr(report.get("outcome"))[:100]
        raise ValueError(f'an outcome\'s "outcome" is "success" or "error", not {shown}')
    for name, kind in (("rule", str), ("error", str), ("outputs", list)):
        if name in report and not isinstance(report[name], kind | type(None)):
            raise ValueError(f'an outcome\'s "{name}" is a {kind.__name__}')
    return report


def parse_passing(raw: bytes) -> JsonObject:
    """A passing run, from a body; ValueError saying why it is not one."""
    run = json_object(raw, "a passing run")
    PassingRun.from_wire(run)  # its job
    if not isinstance(run.get("facts_json"), str):
        raise ValueError("a passing run carries its facts as facts_json, a JSON text")
    return run


def parse_run(raw: bytes) -> JsonObject:
    """A run's ledger record, from a body; ValueError saying the first thing wrong with it."""
    body = json_object(raw, "a run")
    report = RunReport.from_wire(body)
    RunFact.from_wire(report.run, time.time())  # the worker checks it again; a 400 says it now
    return report.to_wire()


async def _agent_body(
    request: Request,
    read: Callable[[bytes], JsonObject],
    buckets: TokenBuckets,
    over_rate: Callable[[str, float], str] | None = None,
) -> tuple[str, bytes, JsonObject] | Response:
    """The agent of a request, its signing key and its body as ``read`` parses it; else the
    refusal (``over_rate``: said and counted past the agent's rate, ``api.authorize``)."""
    token = await authorize(request, AGENT_SCOPES, buckets, over_rate)
    if not isinstance(token, TokenInfo):
        return token
    raw = await request.body()  # within its bound: bodies.BodyLimit
    try:
        body = await parsed(request, read, raw)
    except ValueError as exc:
        return problem(400, str(exc))
    known = await run_in_threadpool(api_of(request).tokens.known, token.name)
    if known is None or known.revoked:  # revoked since ``authorize``: refused the same way
        return problem(401, "this token is unknown or revoked")
    return token.name, known.key, body


def _unqueued(agent: str, what: str, exc: Exception) -> Response:
    log.warning("intake: could not queue %s's %s: %s", agent, what, exc)
    return problem(
        503, "the resolve queue cannot be reached; send it again later", {"Retry-After": "5"}
    )


async def outcome(request: Request) -> Response:
    checked = await _agent_body(request, parse_outcome, intake_of(request).reports)
    if isinstance(checked, Response):
        return checked
    agent, key, report = checked
    failure_id = request.path_params["fid"][:100]
    report["failure_id"] = failure_id  # the path names the failure; the task checks it is theirs
    try:
        await run_in_threadpool(intake_of(request).queue_outcome, agent, key, report)
    except Exception as exc:  # the broker: the client says it could not report
        return _unqueued(agent, "outcome", exc)
    return JSONResponse({"failure_id": failure_id, "queued": True}, status_code=202)


async def passing(request: Request) -> Response:
    checked = await _agent_body(request, parse_passing, intake_of(request).reports)
    if isinstance(checked, Response):
        return checked
    agent, key, run = checked
    try:
        sent = await run_in_threadpool(intake_of(request).queue_passing, agent, key, run)
    except Exception as exc:  # the broker: a passing run is never owed, the client moves on
        return _unqueued(agent, "passing run", exc)
    if not sent:
        why = "a passing run of this job was learned this interval"
        return JSONResponse({"sent": False, "reason": why}, status_code=200)
    return JSONResponse({"sent": True}, status_code=202)


async def run(request: Request) -> Response:
    intake = intake_of(request)
    checked = await _agent_body(request, parse_run, intake.runs, intake.run_refused)
    if isinstance(checked, Response):
        return checked
    agent, key, report = checked
    try:
        await run_in_threadpool(intake_of(request).queue_run, agent, key, report)
    except Exception as exc:  # the broker: a run is never owed, the client moves on
        return _unqueued(agent, "run", exc)
    return JSONResponse({"queued": True}, status_code=202)


async def verdict(request: Request) -> Response:
    token = await authorize(request, AGENT_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    failure_id = request.path_params["fid"][:100]
    status, found = await run_in_threadpool(intake_of(request).verdict, token.name, failure_id)
    if status == 404:
        return problem(404, f"no failure {failure_id!r} of agent {token.name!r}")
    if status == 202:
        return answer(schema.Pending, {"failure_id": failure_id}, status=202)
    return JSONResponse(found, status_code=200)


def routes() -> list[Route]:
    """Before ``api.routes()``: its catch-all would answer these paths with 404."""
    return [
        Route(f"{schema.API}/failures", submit, methods=["POST"]),
        Route(f"{schema.API}/failures/{{fid}}/verdict", verdict, methods=["GET"]),
        Route(f"{schema.API}/failures/{{fid}}/outcome", outcome, methods=["POST"]),
        Route(f"{schema.API}/passing", passing, methods=["POST"]),
        Route(f"{schema.API}/runs", run, methods=["POST"]),
    ]
