"""Sending failures over HTTPS to the web intake, for agents that hold no broker login.

With ``THEOW_INTAKE_URL`` (and an agent token), ``TheowClient`` posts the
payload it would have sent through Redis to ``<url>/api/v1/failures`` and
polls ``<url>/api/v1/failures/<id>/verdict``; what a verdict's client-side
actions did goes to ``<url>/api/v1/failures/<id>/outcome``, a passing run
to ``<url>/api/v1/passing`` and a passed run's ledger record to
``<url>/api/v1/runs``, so such an agent needs no broker at all.
Standard library only: a build agent installs nothing more for it. What
cannot be sent (no answer, a 5xx, a 408 or 429) is spooled exactly as a
broker outage is; any other 4xx is a refusal, an answer and not an outage,
and is never sent again.

The agent token goes to ``THEOW_INTAKE_URL`` and nowhere else: a redirect is
not followed (urllib's would copy the ``Authorization`` header to the new
host) but is an error naming the URL, and a plain ``http://`` URL is refused
unless its host is this machine (``localhost``, ``127.0.0.0/8``, ``::1``).

>>> HttpIntake("https://theow.example/", token=None).submit_url
'https://theow.example/api/v1/failures'
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote, urlsplit

from theow_client import signing
from theow_client.config import is_loopback
from theow_client.jsontypes import JsonObject

API = "/api/v1"
# A verdict is small; anything larger than this from the intake is not one.
MOST_ANSWER_BYTES = 1024 * 1024
# Answers that say "later", not "no": every other 4xx is a refusal.
RETRIED = (408, 429)


class IntakeUnavailable(ConnectionError):
    """The intake could not take the failure now (unreachable, busy, failing): spool it."""


class IntakeRefused(ValueError):
    """The intake refused the failure for good (its message says why): sending again won't help."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"the intake refused it ({status}): {reason}")
        self.status = status


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 30x is answered as the error it is here: the token is never sent on to its Location."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class HttpIntake:
    def __init__(self, url: str, token: signing.AgentToken | None, timeout: float = 5.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"THEOW_INTAKE_URL {url[:200]!r} is not an http(s) URL")
        if parts.scheme == "http" and not is_loopback(parts.hostname):
            raise ValueError(
                f"THEOW_INTAKE_URL {url[:200]!r} is plain http to another host: the agent token"
                " would cross the network readable; use https:// (http is for localhost only)"
            )
        self.base = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    @property
    def submit_url(self) -> str:
        return f"{self.base}{API}/failures"

    def verdict_url(self, failure_id: str) -> str:
        return f"{self.base}{API}/failures/{quote(failure_id, safe='')}/verdict"

    @property
    def passing_url(self) -> str:
        return f"{self.base}{API}/passing"

    @property
    def runs_url(self) -> str:
        return f"{self.base}{API}/runs"

    def outcome_url(self, failure_id: str) -> str:
        return f"{self.base}{API}/failures/{quote(failure_id, safe='')}/outcome"

    def submit(self, payload: JsonObject) -> str:
        """Send one payload; the failure id the intake answers with.

        Raises IntakeUnavailable when it could not be sent now, IntakeRefused
        when it never will be.
        """
        status, body = self._call("POST", self.submit_url, json.dumps(payload).encode())
        if status == 202 and isinstance(body.get("failure_id"), str):
            return str(body["failure_id"])
        raise IntakeUnavailable(f"unexpected answer {status} from {self.submit_url}")

    def report_outcome(self, report: JsonObject) -> None:
        """Send what a verdict's client-side actions did (``theow_client.outcome``).

        Raises IntakeUnavailable or IntakeRefused as ``submit`` does.
        """
        url = self.outcome_url(str(report.get("failure_id") or ""))
        status, _ = self._call("POST", url, json.dumps(report).encode())
        if status != 202:
            raise IntakeUnavailable(f"unexpected answer {status} from {url}")

    def report_passing(self, payload: JsonObject) -> bool:
        """Send a passing run (``passing.build_passing_payload``); whether it was queued.

        False when a run of its job was learned this interval (the intake answers
        200 and sends nothing). Raises IntakeUnavailable or IntakeRefused.
        """
        status, body = self._call("POST", self.passing_url, json.dumps(payload).encode())
        if status not in (200, 202):
            raise IntakeUnavailable(f"unexpected answer {status} from {self.passing_url}")
        return status == 202 and body.get("sent") is True

    def report_run(self, payload: JsonObject) -> None:
        """Send a run's ledger record (``ledger.run_payload``). Raises IntakeUnavailable or
        IntakeRefused as ``submit`` does."""
        status, _ = self._call("POST", self.runs_url, json.dumps(payload).encode())
        if status != 202:
            raise IntakeUnavailable(f"unexpected answer {status} from {self.runs_url}")

    def verdict(self, failure_id: str) -> JsonObject | None:
        """The failure's verdict, or None while there is none yet (also while not yet known)."""
        try:
            status, body = self._call("GET", self.verdict_url(failure_id))
        except IntakeRefused as refused:
            if refused.status == 404:
                return None
            raise
        return body if status == 200 else None

    def _call(self, method: str, url: str, data: bytes | None = None) -> tuple[int, JsonObject]:
        if self.token is None:
            raise IntakeUnavailable(
                "the HTTP intake needs an agent token ($THEOW_AGENT_TOKEN); none is set"
            )
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                return response.status, _json(response.read(MOST_ANSWER_BYTES + 1))
        except urllib.error.HTTPError as exc:
            with exc:
                body = _json(exc.read(MOST_ANSWER_BYTES + 1))
            reason = str(body.get("error") or exc.reason)[:500]
            if 300 <= exc.code < 400:
                where = str(exc.headers.get("Location") or "")[:200]
                raise IntakeUnavailable(
                    f"{url} answered a redirect ({exc.code} to {where!r}), not followed: the"
                    " agent token goes to THEOW_INTAKE_URL only; set it to the intake's own URL"
                ) from None
            if 400 <= exc.code < 500 and exc.code not in RETRIED:
                raise IntakeRefused(exc.code, reason) from None
            raise IntakeUnavailable(f"{exc.code} from {url}: {reason}") from None
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, a bad answer
            raise IntakeUnavailable(f"{url} unreachable ({exc})") from None


def _json(raw: bytes) -> JsonObject:
    if len(raw) > MOST_ANSWER_BYTES:
        return {}
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
