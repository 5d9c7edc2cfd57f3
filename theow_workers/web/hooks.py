"""``POST /hooks/github`` and ``POST /hooks/gitlab``: webhook intake on the web process.

A team points its forge's webhook at the console and adopts Theow without
touching its pipelines. Each hook has its own authentication instead of the
console's login: GitHub's ``X-Hub-Signature-256`` HMAC of the body, GitLab's
``X-Gitlab-Token``, both compared in constant time (``integrations.hooks``).
A hook is off (404) until its secret is set. A wrong signature or token is not
throttled per address as a wrong API token is: a forge delivers every
customer's hooks from the same few addresses, and another customer's
misconfigured hook would otherwise shut ours out.

The route only enqueues, so it answers within the forge's timeout (GitHub
gives up after 10 s): its body is bounded (``bodies.HOOK_MAX_BYTES``, 413
before it is read), the signature checked before a byte of JSON is read (the
JSON read off the event loop when large), the job noted as seen
(``names.key_hook_seen``, ``SET NX``: a duplicated or replayed delivery of the
same job and attempt is answered 200 and dropped), and it sends ``theow.hook``, signed with the workers' secret, to
the resolve queue. A GitHub ``workflow_run`` delivery naming a pull request is
sent as ``theow.run`` (the ledger: which pull request the run's jobs belong
to, since ``workflow_job`` does not say) to the passing queue. If the broker is unreachable the job is un-noted and the
forge told 503, so its redelivery is not lost.

=========================== ===========================================
answer                      when
=========================== ===========================================
202                         a finished job, queued
200                         a job already received (duplicate, replay)
204                         an event or action Theow does not read, or a
                            repository not in ``THEOW_HOOK_REPOS``
401                         signature or token missing or wrong
404                         the hook is off (no secret set)
413                         body larger than ``HOOK_MAX_BYTES``
503                         the broker is unreachable: redeliver later
=========================== ===========================================
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from theow_client import names, signing
from theow_workers.config import Settings
from theow_workers.integrations import hooks
from theow_workers.integrations.hooks import HookedJob, HookedRun
from theow_workers.web.bodies import parsed

if TYPE_CHECKING:
    from celery import Celery
    from redis import Redis

log = logging.getLogger("theow.web")

HEADER_CHARS = 100


class HookIntake:
    """The web process's side of the intake: the broker and Redis, made on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._app: Celery | None = None
        self._redis: Redis | None = None
        self._key: bytes | None = None
        self._made = threading.Lock()  # deliveries arrive on many threads at once

    @property
    def github_secret(self) -> str:
        return self.settings.github_webhook_secret.get_secret_value()

    @property
    def gitlab_token(self) -> str:
        return self.settings.gitlab_webhook_token.get_secret_value()

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            import redis

            self._redis = redis.Redis.from_url(self.settings.redis_url)
        return self._redis

    def enqueue(self, job: HookedJob, delivery: str) -> bool:
        """Queue the job once; False when it was already received."""
        seen = names.key_hook_seen(job.key)
        if not self.redis.set(seen, delivery or "-", nx=True, ex=names.HOOK_SEEN_TTL):
            return False
        try:
            self._send(job)
        except Exception:
            self.redis.delete(seen)  # not queued: the forge's redelivery must get through
            raise
        return True

    def enqueue_run(self, hooked: HookedRun) -> None:
        """Send a workflow run's pull request to the ledger (idempotent: no dedup needed)."""
        app, key = self._broker()
        body = {"hooked_run": hooked.to_wire()}
        app.send_task(
            names.TASK_RUN,
            args=[signing.sign(names.TASK_RUN, body, signing.WORKER, key)],
            queue=names.QUEUE_PASSING,
            ignore_result=True,
            retry=False,
            argsrepr=f"[workflow run {hooked.run_id!r} of {hooked.repo!r}]",
        )

    def _broker(self) -> tuple[Celery, bytes]:
        """The Celery app that sends, and the workers' key that signs: made once."""
        with self._made:
            if self._app is None or self._key is None:
                from celery import Celery

                from theow_workers.tokens import worker_key

                self._key = worker_key(self.settings)
                app = Celery("theow-web", broker=self.settings.redis_url)
                app.conf.update(
                    task_serializer="json",
                    task_routes=names.TASK_ROUTES,
                    broker_connection_retry=False,
                    broker_connection_timeout=3,
                )
                self._app = app
            return self._app, self._key

    def _send(self, job: HookedJob) -> None:
        app, key = self._broker()
        app.send_task(
            names.TASK_HOOK,
            args=[signing.sign(names.TASK_HOOK, job.to_wire(), signing.WORKER, key)],
            queue=names.QUEUE_RESOLVE,
            ignore_result=True,
            retry=False,
            argsrepr=f"[{job.key!r}]",
        )

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
        if self._app is not None:
            self._app.close()


def _header(request: Request, name: str) -> str:
    return " ".join(request.headers.get(name, "").split())[:HEADER_CHARS]


async def github(request: Request) -> Response:
    intake: HookIntake = request.app.state.hooks
    secret = intake.github_secret
    if not secret:
        return PlainTextResponse("not found", status_code=404)
    body = await request.body()  # within bodies.HOOK_MAX_BYTES: bodies.BodyLimit
    if not hooks.github_signature_ok(secret, body, request.headers.get("x-hub-signature-256")):
        log.warning(
            "refused GitHub delivery %r: bad or missing X-Hub-Signature-256",
            _header(request, "x-github-delivery"),
        )
        return PlainTextResponse("bad signature", status_code=401)
    event = request.headers.get("x-github-event")
    if event == "workflow_run":
        return await _accept_run(request, intake, body, _header(request, "x-github-delivery"))
    if event != "workflow_job":
        return Response(status_code=204)  # ping and every other event: nothing to do
    return await _accept(
        request, intake, body, hooks.github_job, _header(request, "x-github-delivery")
    )


async def gitlab(request: Request) -> Response:
    intake: HookIntake = request.app.state.hooks
    secret = intake.gitlab_token
    if not secret:
        return PlainTextResponse("not found", status_code=404)
    body = await request.body()  # within bodies.HOOK_MAX_BYTES: bodies.BodyLimit
    if not hooks.gitlab_token_ok(secret, request.headers.get("x-gitlab-token")):
        log.warning(
            "refused GitLab delivery %r: bad or missing X-Gitlab-Token",
            _header(request, "x-gitlab-event-uuid"),
        )
        return PlainTextResponse("bad token", status_code=401)
    if request.headers.get("x-gitlab-event") != "Job Hook":
        return Response(status_code=204)
    return await _accept(
        request, intake, body, hooks.gitlab_job, _header(request, "x-gitlab-event-uuid")
    )


async def _accept(
    request: Request,
    intake: HookIntake,
    body: bytes,
    read: Callable[[object], HookedJob],
    delivery: str,
) -> Response:
    try:
        job = await parsed(request, lambda raw: read(json.loads(raw)), body)
    except (ValueError, RecursionError):  # JSON errors and NotAJob alike
        return Response(status_code=204)
    if not hooks.repo_allowed(intake.settings.hook_repos, job.repo):
        log.info("webhook %r: %s is not in THEOW_HOOK_REPOS, dropped", delivery, job.key)
        return Response(status_code=204)
    try:
        queued = await run_in_threadpool(intake.enqueue, job, delivery)
    except Exception as exc:
        log.error("webhook for %s not queued: %s", job.key, str(exc)[:300])
        return PlainTextResponse(
            "broker unavailable", status_code=503, headers={"Retry-After": "30"}
        )
    if not queued:
        return PlainTextResponse("already received")
    log.info("webhook %r: %s %s queued", delivery, job.key, job.conclusion)
    return PlainTextResponse("queued", status_code=202)


async def _accept_run(request: Request, intake: HookIntake, body: bytes, delivery: str) -> Response:
    """A workflow run's pull request, for the ledger; 204 when it names none."""
    try:
        hooked = await parsed(request, lambda raw: hooks.github_run(json.loads(raw)), body)
    except (ValueError, RecursionError):  # JSON errors and NotAJob alike
        return Response(status_code=204)
    if not hooks.repo_allowed(intake.settings.hook_repos, hooked.repo):
        return Response(status_code=204)
    try:
        await run_in_threadpool(intake.enqueue_run, hooked)
    except Exception as exc:
        log.error("workflow run %s not queued: %s", hooked.run_id, str(exc)[:300])
        return PlainTextResponse(
            "broker unavailable", status_code=503, headers={"Retry-After": "30"}
        )
    log.info(
        "webhook %r: workflow run %s of pull request %s queued", delivery, hooked.run_id, hooked.pr
    )
    return PlainTextResponse("queued", status_code=202)


def routes() -> list[Route]:
    return [
        Route("/hooks/github", github, methods=["POST"]),
        Route("/hooks/gitlab", gitlab, methods=["POST"]),
    ]
