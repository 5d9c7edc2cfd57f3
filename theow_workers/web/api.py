"""The read-only JSON API under ``/api/v1``: failures, verdicts, rules, insight, replays.

For dashboards and bots. Every request carries a token of the token store
(``theow tokens add NAME --scope api-read``) as ``Authorization: Bearer
<token>``; the console's cookie login plays no part here, and no route
writes: any method but GET (and HEAD) is answered 405. The agents' intake
(``POST /api/v1/failures`` and the verdict read) is ``intake.py``'s, behind
agent tokens; an ``api-read`` token there is refused with 403, as an agent
token is on these lists.

The answers are the CLI's and the console's own views (``theow_workers.views``
on the read model, ``console.reads``): the failure list is
``views.failures.failure_list`` (the console's failure page and ``theow
failures list`` read it too), one failure is ``views.failures.failure_detail``
(``theow failures show --json``), rules are the console's catalogue, insight its snapshot, replays
``views.replays``, incidents ``views.incidents`` (``theow incidents list/show --json``), flaky
tests ``views.tests`` (``theow tests flaky --json``). Each answer goes through its model in
``api_schema``, which also writes the OpenAPI document served at
``/api/v1/openapi.json`` (no token needed: it holds no data).

Each token may make ``api_requests_per_minute`` requests a minute (``rate.py``);
past it, 429 with ``Retry-After``. Unknown or revoked tokens are counted per
client address (``throttle.py``): past a few, that address is answered 429
without a lookup.

>>> # curl -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:8808/api/v1/failures?job=build&limit=20"
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from functools import partial
from typing import TYPE_CHECKING

from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from theow_client.jsontypes import Json
from theow_workers.core.history.model import Origin
from theow_workers.store.tokens import TokenInfo, TokenStore
from theow_workers.views.failures import api_page, checked, failure_detail
from theow_workers.views.incidents import (
    WINDOW_DAYS,
    BadIncidentQuery,
    IncidentFilter,
    api_incidents,
    incident_detail,
)
from theow_workers.views.ports import LIVE, Cursor, FailureFilter, Window
from theow_workers.views.replays import api_replays
from theow_workers.views.tests import api_flaky
from theow_workers.web import api_schema as schema
from theow_workers.web.proxies import client
from theow_workers.web.rate import TokenBuckets

if TYPE_CHECKING:
    from theow_workers.web.console import Console

API = schema.API
READ_SCOPES = ("api-read", "operator")
AGENT_SCOPES = ("agent",)
PAGE, MOST = 50, 200
FILTER_CHARS = 200
ORIGINS = tuple(origin.value for origin in Origin)
TOKEN_CHARS = 200  # a token is ~60 characters; a longer header is not one
BURST = 60  # requests a token may make at once, within its rate
log = logging.getLogger("theow.web")


class Api:
    """What the API's routes share: the token store and the per-token request buckets."""

    def __init__(self, console: Console) -> None:
        settings = console.settings
        self.console = console
        self.tokens = TokenStore(console.store.sql.engine)
        self.reads = TokenBuckets(
            settings.api_requests_per_minute, min(BURST, settings.api_requests_per_minute)
        )
        self.document = schema.openapi()


def problem(status: int, error: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def answer(model: type[BaseModel], value: object, status: int = 200) -> Response:
    """``value`` as ``model`` says it is (the document's promise), as JSON."""
    body = model.model_validate(plain(value)).model_dump(mode="json", exclude_none=False)
    return JSONResponse(body, status_code=status)


def plain(value: object) -> Json:
    """Dates and times as ISO 8601 text, everything else as JSON has it."""

    def default(v: object) -> str:
        if isinstance(v, (datetime, date)):
            return v.isoformat()
        return str(v)

    return json.loads(json.dumps(value, default=default))


def api_of(request: Request) -> Api:
    api: Api = request.app.state.api
    return api


def presented(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip() or len(value) > TOKEN_CHARS:
        return None
    return value.strip()


async def authorize(
    request: Request,
    scopes: tuple[str, ...],
    buckets: TokenBuckets | None = None,
    over_rate: Callable[[str, float], str] | None = None,
) -> TokenInfo | Response:
    """The live token of this request, of one of ``scopes``; else the response refusing it.

    ``over_rate(name, wait)``: a request past the token's rate, counted refused and said why
    (run off the event loop); else a 429 says it in general.
    """
    api = api_of(request)
    text = presented(request)
    if text is None:
        return problem(
            401,
            "a token is required: Authorization: Bearer <token>",
            {"WWW-Authenticate": 'Bearer realm="theow"'},
        )
    address, throttle = client(request), api.console.token_throttle
    wait = throttle.retry_after(address)
    if wait > 0:
        if throttle.first_refusal(address):
            log.warning(
                "token checks refused for %.0f s: %s presented %d unknown or revoked tokens",
                wait,
                address,
                throttle.failures(address),
            )
        seconds = math.ceil(wait)
        return problem(
            429,
            f"too many unknown or revoked tokens from this address; retry in {seconds} s",
            {"Retry-After": str(seconds)},
        )
    # Counted before the lookup (no await between the check and the count), so concurrent
    # requests from one address cannot all pass the check; a live token clears it again.
    throttle.failed(address)
    token = await run_in_threadpool(api.tokens.find, text)
    if token is None:
        log.warning(
            "unknown or revoked token from %s on %s %s (%d in a row)",
            address,
            request.method,
            " ".join(request.url.path[:FILTER_CHARS].split()),  # decoded: may hold a newline
            throttle.failures(address),
        )
        return problem(
            401,
            "this token is unknown or revoked",
            {"WWW-Authenticate": 'Bearer realm="theow", error="invalid_token"'},
        )
    throttle.succeeded(address)
    if token.scope not in scopes:
        why = (
            "an api-read token is read-only: only agent tokens submit"
            if token.scope in READ_SCOPES and request.method != "GET"
            else f"a token of scope {token.scope!r} cannot use this route "
            f"(it needs {' or '.join(scopes)})"
        )
        return problem(403, why)
    wait = (buckets or api.reads).take(token.name)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        said = f"too many requests for token {token.name!r}; retry in {seconds} s"
        if over_rate is not None:
            said = await run_in_threadpool(over_rate, token.name, wait)
        return problem(429, said, {"Retry-After": str(seconds)})
    return token


def _when(text: str, name: str) -> datetime | None:
    """An ISO 8601 time (UTC unless it says otherwise); ValueError naming the parameter."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}={text[:40]!r} is not an ISO 8601 time") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _limit(text: str) -> int:
    if not text:
        return PAGE
    if not text.isdigit() or not 1 <= int(text) <= MOST:
        raise ValueError(f"limit={text[:20]!r}: use a number from 1 to {MOST}")
    return int(text)


def _origin(text: str) -> str:
    """An ``origin`` filter: one of the origins, or "" (any); ValueError names the choices."""
    if text and text not in ORIGINS:
        raise ValueError(f"origin={text[:20]!r}: use {', '.join(ORIGINS)}")
    return text


async def failures(request: Request) -> Response:
    token = await authorize(request, READ_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    params = request.query_params
    given = {
        k: params.get(k, "").strip()[:FILTER_CHARS]
        for k in (
            "repo",
            "job",
            "rule",
            "mode",
            "status",
            "source",
            "origin",
            "since",
            "until",
            "limit",
            "cursor",
        )
    }
    try:
        where = checked(
            FailureFilter(
                repo=given["repo"],
                job=given["job"],
                rule=given["rule"],
                mode=given["mode"],
                outcome=given["status"],
                source=given["source"] or LIVE,
                origin=_origin(given["origin"]),
            )
        )
        window = Window(_when(given["since"], "since"), _when(given["until"], "until"))
        limit = _limit(given["limit"])
    except ValueError as exc:
        return problem(400, str(exc))
    after = None
    if given["cursor"]:
        after = Cursor.decode(given["cursor"])
        if after is None or after.id is None:
            return problem(400, "cursor is not one this API gave (pass a page's `next` as is)")
    page = await run_in_threadpool(
        api_page, api_of(request).console.reads, where, after, limit, window
    )
    return answer(schema.FailurePage, page)


async def failure(request: Request) -> Response:
    token = await authorize(request, READ_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    fid = request.path_params["fid"][:FILTER_CHARS]
    info = await run_in_threadpool(failure_detail, api_of(request).console.reads, fid)
    if info is None:
        return problem(404, f"no failure {fid!r}")
    return answer(schema.FailureDetail, info)


async def rules(request: Request) -> Response:
    token = await authorize(request, READ_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    console = api_of(request).console
    activity = await run_in_threadpool(console.activity.get)
    view = await run_in_threadpool(console.library().overview, console.store, activity)
    view = {**view, "stopped": [r["name"] for r in view["stopped"]]}
    return answer(schema.RuleList, view)


async def insight(request: Request) -> Response:
    token = await authorize(request, READ_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    taken = await run_in_threadpool(api_of(request).console.insight.get)
    return answer(schema.Insight, {**taken.value, "as_of": taken.at})


async def replays(request: Request) -> Response:
    token = await authorize(request, READ_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    jobs = await run_in_threadpool(api_replays, api_of(request).console.reads)
    return answer(schema.ReplayList, jobs)


async def incidents(request: Request) -> Response:
    token = await authorize(request, READ_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    params = request.query_params
    where = IncidentFilter(
        state=params.get("state", "").strip()[:FILTER_CHARS],
        kind=params.get("kind", "").strip()[:FILTER_CHARS],
    )
    try:
        where.checked()
    except BadIncidentQuery as bad:
        return problem(400, str(bad))
    found = await run_in_threadpool(api_incidents, api_of(request).console.runs, where, time.time())
    return answer(schema.IncidentList, found)


async def incident(request: Request) -> Response:
    token = await authorize(request, READ_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    iid = request.path_params["iid"][:FILTER_CHARS]
    try:
        found = await run_in_threadpool(
            incident_detail, api_of(request).console.runs, iid, time.time()
        )
    except BadIncidentQuery as bad:
        return problem(400, str(bad))
    if found is None:
        return problem(404, f"no incident {iid!r} in the last {WINDOW_DAYS} days")
    return answer(schema.IncidentDetail, found.to_dict())


async def flaky_tests(request: Request) -> Response:
    token = await authorize(request, READ_SCOPES)
    if not isinstance(token, TokenInfo):
        return token
    given = {k: request.query_params.get(k, "").strip()[:FILTER_CHARS] for k in ("repo", "job")}
    try:
        limit = _limit(request.query_params.get("limit", "").strip()[:FILTER_CHARS])
    except ValueError as exc:
        return problem(400, str(exc))
    found = await run_in_threadpool(
        partial(
            api_flaky,
            api_of(request).console.tests,
            time.time(),
            repo=given["repo"] or None,
            job=given["job"] or None,
            limit=limit,
        )
    )
    return answer(schema.FlakyTestList, found)


async def openapi(request: Request) -> Response:
    return JSONResponse(api_of(request).document)


async def not_found(request: Request) -> Response:
    return problem(404, f"no route {request.url.path[:FILTER_CHARS]!r} (see {API}/openapi.json)")


def routes() -> list[Route]:
    """After ``intake.routes()`` (POST /failures, the verdict): see the catch-all below."""
    return [
        Route(f"{API}/openapi.json", openapi, methods=["GET"]),
        Route(f"{API}/failures", failures, methods=["GET"]),
        Route(f"{API}/failures/{{fid}}", failure, methods=["GET"]),
        Route(f"{API}/rules", rules, methods=["GET"]),
        Route(f"{API}/insight", insight, methods=["GET"]),
        Route(f"{API}/replays", replays, methods=["GET"]),
        Route(f"{API}/incidents", incidents, methods=["GET"]),
        Route(f"{API}/incidents/{{iid}}", incident, methods=["GET"]),
        Route(f"{API}/tests/flaky", flaky_tests, methods=["GET"]),
        # GET only: a POST to a read route must stay a 405, not become this 404.
        Route(API + "/{rest:path}", not_found, methods=["GET"]),
    ]
