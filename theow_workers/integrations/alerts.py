"""Alerts: a signed outgoing webhook when main breaks or is fixed, infrastructure fails, a cause turns flaky.

With ``THEOW_ALERT_URL`` and ``THEOW_ALERT_SECRET`` set, each event of an
incident (``core.history.incidents``) is posted once as JSON:

``main_broken``
    a cause broke a repository's default branch in a job, confirmed (two
    failures, or a failure the classification decided ``main``), with the
    culprit commit;
``main_fixed``
    the job passed on the default branch again, with the commit that fixed it;
``infra_started``
    one cause is failing many repositories at once;
``flaky``
    a cause fails and passes in one job with no commit to blame, with its flip
    rate and cost.

The body has a Slack-compatible ``text`` (so a Slack or Mattermost incoming
webhook shows it as it is), the ``event`` and the ``incident`` (its
``to_dict`` without the timeline). It is signed as GitHub signs its webhooks:
``X-Theow-Signature: sha256=<hex HMAC-SHA256 of the body with the secret>``.

Once: raising an event takes ``names.key_alert_sent(incident, event)`` with
``SET NX`` and a TTL, so the same incident and event raised again (another
worker, a redelivered task, the incident derived again from more history)
sends nothing. Every text in the body came from a build log or a webhook: it
is masked (``core.logs.redact``), bounded, and Slack's control characters
(``&``, ``<``, ``>``) are escaped, so a log line cannot mention ``@channel``
or make a link.

Delivery is a Celery task (``names.TASK_ALERT``): a 5xx, a 429 or no answer is
retried in the call with back-off, then the task is retried with exponential
back-off; a 4xx is logged and dropped. Alerts wait their turn in a sliding
window of ``alerts_per_minute`` shared by every worker (``ratelimit.lua``).

>>> verify(b"secret", b'{"text":"hi"}', signature(b"secret", b'{"text":"hi"}'))
True
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import TYPE_CHECKING

import httpx2 as httpx

from theow_client import names
from theow_client.jsontypes import Json, JsonObject
from theow_workers.core.history.incident import Incident, Kind, Rules, State
from theow_workers.core.history.incidents import around
from theow_workers.core.history.model import Run
from theow_workers.core.history.ports import History
from theow_workers.core.logs.redact import redact_text

if TYPE_CHECKING:
    from redis import Redis

    from theow_workers.config import Settings

log = logging.getLogger("theow.alerts")

SIGNATURE_HEADER = "X-Theow-Signature"
EVENT_HEADER = "X-Theow-Event"
DELIVERY_HEADER = "X-Theow-Delivery"
FRESH = 24 * 3600.0  # an incident whose last news is older raises nothing (a history backfilled)
CAUSE_CHARS = 300
REPOS_SHOWN = 5
TIMEOUT = 10.0
RETRIES = 2  # within one task run; the task itself is retried after that
FIRST_BACKOFF = 0.5
WINDOW_MS = 60_000
MAX_WAIT = 30.0  # longer than this in the rate limit: the task is retried later instead


class Event(StrEnum):
    MAIN_BROKEN = "main_broken"
    MAIN_FIXED = "main_fixed"
    INFRA_STARTED = "infra_started"
    FLAKY = "flaky"

    def __str__(self) -> str:
        return self.value


class AlertRefused(Exception):
    """The receiver refused the alert (a 4xx but 429): sending it again would not help."""


class AlertUnavailable(ConnectionError):
    """No answer, a 5xx or a 429 after the retries, or the rate limit: worth a later try."""

    def __init__(self, message: str, wait: float = 0.0) -> None:
        super().__init__(message)
        self.wait = wait


def events(
    found: Iterable[Incident], now: float, fresh: float = FRESH
) -> list[tuple[Event, Incident]]:
    """What the incidents have to say, oldest news first; nothing older than ``fresh`` seconds."""
    said: list[tuple[float, Event, Incident]] = []
    for incident in found:
        if incident.kind is Kind.MAIN:
            if not incident.confirmed:
                continue  # one failure may yet prove flaky
            latest = incident.closed_at if incident.closed_at is not None else incident.last_seen
            if latest >= now - fresh:
                said.append((incident.first_seen, Event.MAIN_BROKEN, incident))
            if incident.state is State.CLOSED and latest >= now - fresh:
                said.append((latest, Event.MAIN_FIXED, incident))
        elif incident.last_seen >= now - fresh:
            event = Event.INFRA_STARTED if incident.kind is Kind.INFRA else Event.FLAKY
            said.append((incident.first_seen, event, incident))
    return [(event, incident) for _, event, incident in sorted(said, key=lambda s: s[0])]


def text(event: Event, incident: Incident) -> str:
    """The one line a chat shows: Slack mrkdwn, masked, escaped."""
    cause = _shown(incident.cause, CAUSE_CHARS)
    where = f"{_shown(incident.repo, 200)} `{_shown(incident.job, 200)}`"
    runs = f"{incident.runs_affected} run{'s' if incident.runs_affected != 1 else ''}"
    if event is Event.MAIN_BROKEN:
        culprit = _shown(incident.culprit or "?", 80)
        return f":red_circle: {where} is broken on the default branch since `{culprit}` ({runs}): {cause}"
    if event is Event.MAIN_FIXED:
        fixed, culprit = _shown(incident.fixed_by or "?", 80), _shown(incident.culprit or "?", 80)
        return (
            f":large_green_circle: {where} is fixed on the default branch by `{fixed}` "
            f"(broken since `{culprit}`, {runs} affected): {cause}"
        )
    if event is Event.INFRA_STARTED:
        repos = ", ".join(_shown(r, 200) for r in incident.repos[:REPOS_SHOWN])
        more = (
            f" and {len(incident.repos) - REPOS_SHOWN} more"
            if len(incident.repos) > REPOS_SHOWN
            else ""
        )
        return (
            f":warning: infrastructure: one cause is failing {len(incident.repos)} repositories "
            f"({repos}{more}): {cause}"
        )
    flips = "-" if incident.flip_rate is None else f"{incident.flip_rate:.0%}"
    return (
        f":large_yellow_circle: {where} has a flaky cause (flip rate {flips}, "
        f"{incident.failed_runs} failed runs, {incident.minutes_lost:.0f} min lost): {cause}"
    )


def _shown(value: str, limit: int) -> str:
    """Masked, one line, bounded, Slack's control characters escaped."""
    one = " ".join(redact_text(value).split())[:limit]
    return one.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(event: Event, incident: Incident) -> JsonObject:
    """The body posted: ``text``, ``event``, and the incident (masked, without its timeline)."""
    shown = {k: v for k, v in incident.to_dict().items() if k not in ("timeline", "omitted")}
    return {
        "text": text(event, incident),
        "event": event.value,
        "delivery": delivery_id(event, incident),
        "incident": _masked(json.loads(json.dumps(shown))),
    }


def _masked(value: Json) -> Json:
    if isinstance(value, str):
        return redact_text(value)[: CAUSE_CHARS * 4]
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    return value


def delivery_id(event: Event, incident: Incident) -> str:
    return f"{incident.id}:{event.value}"


def signature(secret: bytes, body: bytes) -> str:
    """``sha256=<hex>``: the HMAC-SHA256 of the body as sent, keyed with the shared secret."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, header: str) -> bool:
    """A receiver's check of ``X-Theow-Signature`` (constant-time)."""
    return hmac.compare_digest(signature(secret, body), header)


def raise_events(
    redis: Redis,
    found: Iterable[Incident],
    now: float,
    send: Callable[[JsonObject], None],
    ttl: int = names.ALERT_SENT_TTL,
) -> list[str]:
    """Send each new event of ``found`` once fleet-wide; the delivery ids sent.

    ``send`` enqueues the delivery (``enqueue``). If it raises, the claim is
    given back, so a later raise of the same event tries again.
    """
    sent: list[str] = []
    for event, incident in events(found, now):
        key = names.key_alert_sent(incident.id, event.value)
        if not redis.set(key, str(int(now)), nx=True, ex=ttl):
            continue  # raised before, by this worker or another
        try:
            send(payload(event, incident))
        except Exception:
            redis.delete(key)
            raise
        sent.append(delivery_id(event, incident))
    return sent


def after_run(
    settings: Settings,
    redis: Redis,
    history: History,
    run: Run,
    rules: Rules | None = None,
    send: Callable[[JsonObject], None] | None = None,
) -> list[str]:
    """Alerts for what a newly recorded run opened, joined or closed; the delivery ids sent.

    Called after the ledger records a run. Off (nothing read) while THEOW_ALERT_URL
    is empty. Never raises: an alert is never worth a verdict or a run's record.
    """
    if not settings.alert_url:
        return []
    try:
        found = around(history, run, rules)
        return raise_events(redis, found, time.time(), send or (lambda b: enqueue(settings, b)))
    except Exception as exc:
        log.warning("run %s: alerts not raised: %s", run.id, redact_text(str(exc))[:300])
        return []


def enqueue(settings: Settings, body: JsonObject) -> None:
    """Send one alert to the delivery task, signed as the workers' internal task."""
    from theow_workers.celery_app import app
    from theow_workers.tokens import signed_internal

    signed = signed_internal(settings, names.TASK_ALERT, body)
    app.send_task(names.TASK_ALERT, args=[signed], queue=names.QUEUE_RESOLVE)


class AlertLimiter:
    """Alerts per minute for every worker at once (``ratelimit.lua``, as the forge calls wait)."""

    def __init__(self, redis: Redis, per_minute: int) -> None:
        from theow_workers.adapters.redis_state import _script

        self.per_minute = per_minute
        self._acquire = _script(redis, "ratelimit.lua")

    def acquire(self, max_wait: float = MAX_WAIT) -> None:
        keys = [names.key_alert_rate(p) for p in ("requests", "tokens", "backoff", "stopped")]
        deadline = time.monotonic() + max_wait
        while True:
            code, wait_ms = self._acquire(
                keys=keys, args=[self.per_minute, 1 << 40, 0, uuid.uuid4().hex, WINDOW_MS]
            )
            if int(code) == 0:
                return
            wait = int(wait_ms) / 1000
            if time.monotonic() + wait > deadline:
                raise AlertUnavailable(f"alerts: rate limit, would wait {wait:.0f}s", wait)
            time.sleep(wait + random.uniform(0, 0.05))


class AlertHook:
    """The receiver: a URL and the secret the body is signed with."""

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        retries: int = RETRIES,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url
        self.secret = secret.encode()
        self.retries = retries
        self.sleep = sleep
        self.shown = redact_text(url)  # a chat's webhook URL is itself a secret

    def post(self, body: JsonObject) -> int:
        """POST the body signed; its status. AlertRefused for a 4xx, AlertUnavailable after retries."""
        raw = json.dumps(body, separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "theow-alerts",
            SIGNATURE_HEADER: signature(self.secret, raw),
            EVENT_HEADER: str(body.get("event", "")),
            DELIVERY_HEADER: str(body.get("delivery", "")),
        }
        problem = ""
        with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as http:
            for attempt in range(self.retries + 1):
                try:
                    response = http.post(self.url, content=raw, headers=headers)
                except httpx.TransportError as exc:
                    problem = f"{type(exc).__name__}"
                else:
                    status = response.status_code
                    if status < 300:
                        return status
                    if status != 429 and status < 500:
                        raise AlertRefused(f"alert receiver {self.shown}: {status}")
                    problem = str(status)
                if attempt < self.retries:
                    wait = FIRST_BACKOFF * 2**attempt
                    log.info("alert %s: %s, retrying in %.1fs", body.get("delivery"), problem, wait)
                    self.sleep(wait * random.uniform(1.0, 1.2))
        raise AlertUnavailable(f"alert receiver {self.shown}: {problem}")


def deliver(settings: Settings, redis: Redis, body: JsonObject) -> JsonObject:
    """The delivery task's work: wait for the rate limit, post, say how it went."""
    if not settings.alert_url:
        return {"outcome": "dropped", "reason": "THEOW_ALERT_URL is not set"}
    AlertLimiter(redis, settings.alerts_per_minute).acquire()
    hook = AlertHook(settings.alert_url, settings.alert_secret.get_secret_value())
    try:
        status = hook.post(body)
    except AlertRefused as refused:
        log.warning("alert %s dropped: %s", body.get("delivery"), refused)
        return {"outcome": "refused", "reason": str(refused)[:500]}
    log.info("alert %s delivered (%s)", body.get("delivery"), status)
    return {"outcome": "delivered", "status": status}
