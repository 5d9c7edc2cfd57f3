"""Send a failure to Theow and read its verdict, without ever breaking the build.

The client sends ``theow.resolve`` by name through Redis (broker and result
backend at one URL) and never imports worker code. When the broker cannot be
reached within ``timeout`` seconds the failure is spooled to local disk, and
``flush`` sends it later.

>>> ticket = TheowClient().submit({"stderr": log}, tags=["go"])  # doctest: +SKIP
>>> ticket.wait(timeout=60).status                               # doctest: +SKIP
<Status.RESOLVED: 'resolved'>

Warning: ``wait`` blocks until a worker answers and raises ``TimeoutError``
after ``timeout``; a spooled ticket answers at once with status ``spooled``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from theow_client import config, names, signing
from theow_client.facts import bound_facts_kept, dumps_facts
from theow_client.intake import HttpIntake, IntakeRefused, IntakeUnavailable
from theow_client.job import job_fact
from theow_client.jsontypes import Json, JsonObject
from theow_client.lines import to_wire
from theow_client.messages import SubmitRequest
from theow_client.outcome import outcome_report
from theow_client.redact import redact, summary
from theow_client.spool import Spool, SpoolError, remasked
from theow_client.verdict import Status, Verdict

if TYPE_CHECKING:
    from celery import Celery
    from celery.result import AsyncResult

log = logging.getLogger("theow.client")

DEFAULT_SOURCE = "theow-client"
DEFAULT_WAIT_TIMEOUT = 60.0
# How often a waiting client reads its verdict key: quickly at first, then calmly.
POLL_FIRST, POLL_MOST = 0.02, 0.25
POLL_HTTP_FIRST, POLL_HTTP_MOST = 0.1, 1.0

# What "the broker is unreachable" looks like from here. RuntimeError is how
# Celery's Redis result backend reports a failed reconnect.
UNREACHABLE = (OperationalError, RedisError, OSError, CeleryTimeoutError, RuntimeError)


class TheowUnavailable(ConnectionError):
    """Theow could not be reached and the failure could not be kept either."""


def failure_id_for(
    idempotency_key: str | None = None,
    *,
    agent: str = "",
    job: str | None = None,
    facts_json: str = "",
) -> str:
    """A new failure id, or the one that ``idempotency_key`` maps to for this agent, job and facts.

    The worker derives the same id from the verified agent (``signing.failure_id``).

    >>> failure_id_for("build-42/step-3") == failure_id_for("build-42/step-3")
    True
    """
    if idempotency_key is None:
        return signing.failure_id(agent, job, None, facts_json, nonce=str(uuid.uuid4()))
    return signing.failure_id(agent, job, idempotency_key, facts_json)


def build_payload(
    facts: object,
    *,
    failure_id: str | None = None,
    agent: str = "",
    idempotency_key: str | None = None,
    explore: bool = False,
    source: str = DEFAULT_SOURCE,
    rules: list[str] | tuple[str, ...] | None = None,
    tags: list[str] | tuple[str, ...] | None = None,
    fallback: bool = True,
    max_retries: int = 3,
) -> JsonObject:
    """The single argument of the ``theow.resolve`` task, facts bounded and secrets masked.

    The facts travel as one JSON text (``facts_json``), which the worker
    parses under limits inside the task; for a log that was cut,
    ``kept_lines`` says which of its lines were kept (``theow_client.lines``). Raises FactsError (a ValueError)
    naming what is wrong and where when the facts cannot be sent.
    """
    bounded, truncated, kept = bound_facts_kept(facts)
    # Before the payload is spooled or sent: no secret leaves the agent in clear.
    bounded = redact(bounded)
    facts_json = dumps_facts(bounded)
    job = job_fact(bounded) if isinstance(bounded, dict) else None
    nonce = failure_id or str(uuid.uuid4())
    if failure_id is None or idempotency_key is not None:
        # The id the worker will derive from the verified agent: where the verdict comes back.
        failure_id = signing.failure_id(agent, job, idempotency_key, facts_json, nonce=nonce)
    # Which lines of each cut log were kept: line numbers shown count in the build's own log.
    kept = {fact: pieces for fact, pieces in kept.items() if fact in bounded}
    request = SubmitRequest(
        failure_id=failure_id,
        job=job,
        idempotency_key=idempotency_key,
        nonce=nonce,
        facts_json=facts_json,
        explore=bool(explore),
        source=source,
        extra={"submitted_at": datetime.now(UTC).isoformat()},
        hints={
            "rules": list(rules or []),
            "tags": list(tags or []),
            "fallback": bool(fallback),
            "max_retries": int(max_retries),
        },
        notes={"truncated": truncated},
        kept_lines=to_wire(kept) if kept else None,
    )
    return request.to_wire()


def _agent_token(text: str | None) -> signing.AgentToken | None:
    """The parsed token; a malformed one is logged and not used (the worker then says why)."""
    if not text:
        return None
    try:
        return signing.AgentToken.parse(text, where=f"the agent token (${config.ENV_AGENT_TOKEN})")
    except signing.TokenError as exc:
        log.warning("theow: %s; sending unsigned", exc)
        return None


def _stop_listening(result: AsyncResult) -> None:
    """Unsubscribe from ``result``'s channel now, while the interpreter is whole.

    Otherwise Celery's ``AsyncResult.__del__`` does it at exit, when imports
    fail, and prints "Exception ignored in AsyncResult.__del__". A later
    ``get`` subscribes again.
    """
    remove = getattr(result.backend, "remove_pending_result", None)
    if remove is None:
        return
    with contextlib.suppress(Exception):  # the broker may be gone; nothing to release then
        remove(result)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass
class Ticket:
    """A submitted (or spooled) failure whose verdict can be waited for."""

    failure_id: str
    # celery AsyncResult: how a client without a token reads its (rejected) verdict.
    result: Any = field(default=None, repr=False)
    spool_path: Path | None = None
    # Why it was spooled instead of sent.
    spooled_for: BaseException | None = field(default=None, repr=False)
    # With a token: the client reads the verdict from its agent's verdict key.
    client: TheowClient | None = field(default=None, repr=False)
    agent: str = ""
    # The submission's signature: a refusal of this very message is kept under it.
    signature: str = field(default="", repr=False)
    # Why the HTTP intake refused it (its answer, final): the verdict is that refusal.
    refused: str = ""

    @property
    def spooled(self) -> bool:
        return self.spool_path is not None

    @property
    def misconfigured(self) -> bool:
        """Spooled because the broker URL cannot work: a fix for the agent's owner, not a wait."""
        return isinstance(self.spooled_for, config.RedisURLError)

    def wait(self, timeout: float = DEFAULT_WAIT_TIMEOUT) -> Verdict:
        """Block until a worker returns the verdict, at most ``timeout`` seconds.

        A failed worker task or a malformed answer becomes a Verdict with
        status ``error``; no answer in time raises ``TimeoutError``; losing
        the broker while waiting raises TheowUnavailable.
        """
        if self.refused:
            return Verdict(failure_id=self.failure_id, status=Status.REJECTED, reason=self.refused)
        if self.spooled or (self.result is None and self.client is None):
            cause = self.spooled_for
            why = one_line(cause) if cause and not isinstance(cause, UNREACHABLE) else ""
            return Verdict(
                failure_id=self.failure_id,
                status=Status.SPOOLED,
                reason=f"{why or 'broker unreachable'}; spooled to {self.spool_path}",
            )
        if self.client is not None and self.client.intake is not None:
            return self._poll_http(self.client.intake, timeout)
        if self.agent and self.client is not None:
            return self._poll(self.client, timeout)
        try:
            value = self.result.get(timeout=timeout, propagate=False, disable_sync_subtasks=False)
        except CeleryTimeoutError as exc:
            raise TimeoutError(self._no_verdict(timeout)) from exc
        except UNREACHABLE as exc:
            raise TheowUnavailable(
                f"lost the broker while waiting for failure {self.failure_id}: {one_line(exc)}"
            ) from exc
        finally:
            _stop_listening(self.result)
        if self.result.failed():
            return self._error(f"the resolve task failed on the worker: {one_line(value)}")
        return self._read(value)

    def _poll(self, client: TheowClient, timeout: float) -> Verdict:
        """Read the agent's verdict key until it is there: a GET, so any waiter sees it again."""
        key = names.verdict_key(self.agent, self.failure_id)
        refusal = names.refusal_key(self.agent, self.failure_id, self.signature)
        ready = names.verdict_ready_key(self.agent, self.failure_id)
        deadline, pause, woken = time.monotonic() + timeout, POLL_FIRST, False
        while True:
            try:
                redis = client.app.backend.client
                raw = redis.get(key)
                if raw is None and self.signature:
                    raw = redis.get(refusal)
                left = deadline - time.monotonic()
                if raw is None and not woken and left > 0:
                    # Woken as the worker sets the verdict (or after a pause, as polled):
                    # a verdict in 10 ms is read then, not at the next poll.
                    woken = bool(redis.blpop([ready], timeout=max(0.001, min(pause, left))))
                    pause = min(pause * 2, POLL_MOST)
                    continue
            except UNREACHABLE as exc:
                client.close()
                raise TheowUnavailable(
                    f"lost the broker while waiting for failure {self.failure_id}: {one_line(exc)}"
                ) from exc
            if raw is not None:
                try:
                    return self._read(json.loads(raw))
                except ValueError as exc:
                    return self._error(f"malformed verdict from the worker ({one_line(exc)})")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(self._no_verdict(timeout))
            time.sleep(min(pause, left))
            pause = min(pause * 2, POLL_MOST)

    def wait_explanation(self, timeout: float) -> Verdict | None:
        """After a verdict whose explanation is ``pending``: the verdict once the explanation
        (or why there is none) is in, or None when it is not within ``timeout`` seconds.

        The workers write it under the same verdict key; a client without a token
        (which reads its verdict as a task result) or using the HTTP intake gets None at once.
        """
        if not (self.agent and self.client is not None) or timeout <= 0:
            return None
        if self.client.intake_url:  # no broker to read it from: the verdict's own is shown
            return None
        key = names.verdict_key(self.agent, self.failure_id)
        deadline, pause = time.monotonic() + timeout, POLL_MOST
        while time.monotonic() < deadline:
            time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
            try:
                raw = self.client.app.backend.client.get(key)
                verdict = self._read(json.loads(raw)) if raw is not None else None
            except (*UNREACHABLE, ValueError):
                return None  # the verdict is already shown; its explanation is a bonus
            if verdict is not None and (verdict.explanation or {}).get("state") != "pending":
                return verdict
        return None

    def _poll_http(self, intake: HttpIntake, timeout: float) -> Verdict:
        """Ask the HTTP intake for the verdict until there is one (calmer than Redis: a request)."""
        deadline, pause = time.monotonic() + timeout, POLL_HTTP_FIRST
        while True:
            try:
                found = intake.verdict(self.failure_id)
            except (IntakeUnavailable, IntakeRefused) as exc:
                raise TheowUnavailable(
                    f"lost the intake while waiting for failure {self.failure_id}: {one_line(exc)}"
                ) from exc
            if found is not None:
                return self._read(found)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(self._no_verdict(timeout))
            time.sleep(min(pause, left))
            pause = min(pause * 2, POLL_HTTP_MOST)

    def _no_verdict(self, timeout: float) -> str:
        return (
            f"no verdict for failure {self.failure_id} within {timeout:g}s "
            "(is a resolver worker running?)"
        )

    def _read(self, value: Json) -> Verdict:
        try:
            return Verdict.from_dict(value)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return self._error(f"malformed verdict from the worker ({one_line(exc)}): {value!r}")

    def wait_exploration(self, timeout: float = DEFAULT_WAIT_TIMEOUT) -> JsonObject:
        """After a verdict of ``exploring``: the exploration's outcome.

        A dict with ``outcome`` (proposal, cache_hit, deduplicated, gave_up,
        budget, rate_limited, session_limit, error), ``proposal_id`` when
        there is one, and ``reason``. Raises TimeoutError like ``wait``.
        """
        if self.spooled or (self.result is None and self.client is None):
            return {"outcome": "spooled", "proposal_id": None, "reason": "not sent yet"}
        app = self.client.app if self.client is not None else self.result.app
        pending = app.AsyncResult(names.explore_task_id(self.failure_id))
        try:
            value = pending.get(timeout=timeout, propagate=False, disable_sync_subtasks=False)
        except CeleryTimeoutError as exc:
            raise TimeoutError(
                f"no exploration outcome for failure {self.failure_id} within {timeout:g}s "
                "(is an explorer worker running with THEOW_EXPLORE=1?)"
            ) from exc
        except UNREACHABLE as exc:
            raise TheowUnavailable(
                f"lost the broker while waiting for failure {self.failure_id}'s exploration: "
                f"{one_line(exc)}"
            ) from exc
        finally:
            _stop_listening(pending)
        if pending.failed() or not isinstance(value, dict):
            return {
                "outcome": "error",
                "proposal_id": None,
                "reason": f"explore task failed: {one_line(value)}",
            }
        return value

    def _error(self, reason: str) -> Verdict:
        log.warning("theow: failure %s: %s", self.failure_id, reason)
        return Verdict(failure_id=self.failure_id, status=Status.ERROR, reason=reason)


class TheowClient:
    """Submits failures to the resolve queue; spools them when it cannot.

    ``timeout`` bounds every connection attempt and broker round trip, so a
    dead or hung broker costs a build a couple of seconds, not minutes.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
        timeout: float = config.DEFAULT_CONNECT_TIMEOUT,
        *,
        url_name: str = "redis_url",
        token: str | None = None,
        intake_url: str | None = None,
    ) -> None:
        self._token_arg = token
        self._token: signing.AgentToken | None = None
        # With an intake URL every failure goes over HTTP(S), never through the broker.
        self.intake_url = config.intake_url(intake_url)
        self.redis_url = config.redis_url(redis_url)
        # How messages name the URL's origin: ``url_name`` (e.g. --redis-url) when given.
        self.url_source = config.redis_url_source(redis_url, url_name)
        self.spool = Spool(config.spool_dir(spool_dir))
        self.timeout = timeout
        self._app: Celery | None = None

    @property
    def token(self) -> signing.AgentToken | None:
        """The agent's token, looked for until found: ``theow up`` may write it after we start."""
        if self._token is None:
            self._token = _agent_token(config.agent_token(self._token_arg))
        return self._token

    @property
    def intake(self) -> HttpIntake | None:
        """The HTTP intake when ``THEOW_INTAKE_URL`` (or ``intake_url``) names one."""
        if not self.intake_url:
            return None
        return HttpIntake(self.intake_url, self.token, self.timeout)

    @property
    def agent(self) -> str:
        """This client's agent name, from its token ("" without one)."""
        token = self.token
        return token.name if token is not None else ""

    def signed(self, task: str, payload: JsonObject) -> JsonObject:
        """``payload`` signed for ``task`` with the agent's token (as it is, without one)."""
        token = self.token
        if token is None:
            return payload
        return signing.sign(task, payload, token.name, token.signing_key)

    @property
    def app(self) -> Celery:
        """The minimal Celery app used to send tasks and read results.

        Raises RedisURLError when the URL cannot work, before Celery reads it.
        """
        if self._app is None:
            config.check_redis_url(self.redis_url, self.url_source)
            self._app = config.celery_app(self.redis_url, self.timeout)
        return self._app

    def close(self) -> None:
        """Release broker and backend connections (a new app is made on next use)."""
        app, self._app = self._app, None
        if app is None:
            return
        with contextlib.suppress(Exception):  # closing a dead connection must not raise
            app.close()

    def __enter__(self) -> TheowClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def submit(
        self,
        facts: JsonObject,
        explore: bool = False,
        idempotency_key: str | None = None,
        *,
        rules: list[str] | tuple[str, ...] | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
        fallback: bool = True,
        max_retries: int = 3,
        source: str = DEFAULT_SOURCE,
    ) -> Ticket:
        """Send one failure; spool it when it cannot be sent, whatever the reason.

        ``rules`` are tried first, in order, then rules sharing a ``tag``; with
        ``fallback`` the resolver goes on to semantic search. Facts that are
        not a JSON object raise ValueError: that is the caller's bug.
        """
        payload = build_payload(
            facts,
            agent=self.agent,
            idempotency_key=idempotency_key,
            explore=explore,
            source=source,
            rules=rules,
            tags=tags,
            fallback=fallback,
            max_retries=max_retries,
        )
        if self.intake_url:
            return self._submit_http(payload)
        signed = self.signed(names.TASK_RESOLVE, payload)
        try:
            result = self._publish(signed)
        except Exception as exc:  # a bad URL, a broken install, a bug: kept all the same
            path = self._spool(payload, exc)  # unsigned: signed again when flushed
            return Ticket(payload["failure_id"], spool_path=path, spooled_for=exc)
        log.debug("theow: submitted failure %s", payload["failure_id"])
        signature = signing.signed_by(signed)
        return Ticket(
            payload["failure_id"],
            result,
            client=self,
            agent=self.agent,
            signature=signature.sig if signature else "",
        )

    def _submit_http(self, payload: JsonObject) -> Ticket:
        """Post to the HTTP intake; spool what cannot be sent, answer a refusal at once."""
        try:
            intake = self.intake
            assert intake is not None
            failure_id = intake.submit(payload)
        except IntakeRefused as exc:
            log.warning("theow: failure %s: %s", payload["failure_id"], exc)
            return Ticket(payload["failure_id"], client=self, agent=self.agent, refused=str(exc))
        except Exception as exc:  # unreachable, a bad URL, a bug: kept all the same
            path = self._spool(payload, exc)
            return Ticket(payload["failure_id"], spool_path=path, spooled_for=exc)
        return Ticket(failure_id, client=self, agent=self.agent)

    def send(self, payload: JsonObject) -> str | AsyncResult:
        """Sign and publish a ready payload; raise one of UNREACHABLE if that fails.

        With an HTTP intake the payload is posted there (the intake signs it for the
        bearer agent); IntakeRefused when the intake will never take it.
        """
        intake = self.intake
        if intake is not None:
            return intake.submit(payload)
        # Signed as it leaves (a spooled failure is signed when flushed): the time is now.
        return self._publish(self.signed(names.TASK_RESOLVE, payload))

    def _publish(self, payload: JsonObject) -> AsyncResult:
        """Publish a signed payload.

        The result backend is pinged first: it is the same Redis, and a ping
        fails fast and cleanly where Celery's own reconnect logic would not.
        """
        app = self.app
        try:
            app.backend.client.ping()
            return app.send_task(
                names.TASK_RESOLVE,
                args=[payload],
                task_id=payload["failure_id"],
                queue=names.QUEUE_RESOLVE,
                retry=False,
                # An agent with a token reads its verdict under its own key: the
                # broker's ACL refuses it Celery's result keys and channels.
                ignore_result=bool(self.agent),
                # What Flower and task events show: ids and sizes, never the facts.
                argsrepr=summary([payload]),
                kwargsrepr="{}",
            )
        except Exception:
            self.close()  # a half-connected app must not be reused
            raise

    def report_outcome(
        self,
        verdict: Verdict,
        *,
        success: bool,
        error: str = "",
        outputs: list[JsonObject] | None = None,
        rerun_passed: bool | None = None,
    ) -> bool:
        """Tell the workers what the verdict's client-side actions did; never raises.

        ``success``: the actions ran; ``rerun_passed``: the step passed when
        run again after them. Only this report counts a client-side fix as a
        success (both) or a failure in the rule's track record. Returns
        whether it was sent.
        """
        # Masked before it leaves: an action's output is whatever the agent had in hand.
        report = outcome_report(
            verdict.failure_id,
            verdict.rule,
            success=success,
            error=error,
            outputs=outputs,
            rerun_passed=rerun_passed,
        )
        try:
            intake = self.intake
            if intake is not None:  # the intake signs it as the bearer agent
                intake.report_outcome(report)
            else:
                self.app.send_task(
                    names.TASK_CLIENT_OUTCOME,
                    args=[self.signed(names.TASK_CLIENT_OUTCOME, report)],
                    queue=names.QUEUE_RESOLVE,
                    retry=False,
                    ignore_result=True,
                    # What Flower and task events show: the failure and sizes, never outputs.
                    argsrepr=summary([report]),
                    kwargsrepr="{}",
                )
        except Exception as exc:  # never raises: the build goes on whatever happened here
            self.close()
            log.warning(
                "theow: could not report the outcome of failure %s's actions: %s",
                verdict.failure_id,
                one_line(exc),
            )
            return False
        return True

    def ticket(self, failure_id: str) -> Ticket:
        """A Ticket for a failure submitted earlier, e.g. by another process."""
        return Ticket(failure_id, self.app.AsyncResult(failure_id), client=self, agent=self.agent)

    def flush(self) -> tuple[int, int]:
        """Send spooled failures, oldest first; return ``(sent, remaining)``.

        A file is deleted only after its payload was published. Stops at the
        first send that fails, leaving the rest for the next flush. A broker
        URL that cannot work raises RedisURLError before anything is sent.
        """
        sent = 0
        for path in self.spool.pending():
            try:
                payload = self.spool.load(path)
            except SpoolError as exc:
                self.spool.set_aside(path, reason=str(exc))
                continue
            # Spooled by an older client, or edited since: masked again before it leaves.
            payload = remasked(payload, self.agent)
            try:
                self.send(payload)
            except IntakeRefused as exc:  # an answer, not an outage: sending again won't help
                self.spool.set_aside(path, reason=str(exc))
                continue
            except config.RedisURLError:
                raise
            except UNREACHABLE as exc:
                where = (
                    f"intake unreachable at {self.intake_url}"
                    if self.intake_url
                    else (f"broker unreachable at {self.safe_url}")
                )
                log.warning("theow: %s (%s)", where, one_line(exc))
                break
            except Exception as exc:
                log.warning(
                    "theow: could not send %s (%s: %s)", path, type(exc).__name__, one_line(exc)
                )
                break
            self.spool.remove(path)
            sent += 1
        return sent, len(self.spool.pending())

    @property
    def safe_url(self) -> str:
        """The broker URL with any password masked, for messages."""
        return config.safe_url(self.redis_url)

    def _spool(self, payload: JsonObject, exc: BaseException) -> Path:
        """Keep the payload on disk and say so in one line on stderr, naming why."""
        failure_id = payload["failure_id"]
        if isinstance(exc, config.RedisURLError):
            why, later = str(exc), "fix the URL, then run `theow-client flush`"
        elif isinstance(exc, (IntakeUnavailable, ValueError)) and self.intake_url:
            why, later = f"intake: {one_line(exc)}", "run `theow-client flush` later"
        elif isinstance(exc, UNREACHABLE):
            why = f"broker unreachable at {self.safe_url} ({one_line(exc)})"
            later = "run `theow-client flush` later"
        else:
            why = f"could not send ({type(exc).__name__}: {one_line(exc)})"
            later = "run `theow-client flush` later"
        try:
            path = self.spool.put(payload)
        except SpoolError as spool_exc:
            raise TheowUnavailable(
                f"{why} and the failure could not be spooled: {spool_exc}"
            ) from exc
        print(f"theow: {why}; spooled failure {failure_id} to {path}; {later}", file=sys.stderr)
        return path
