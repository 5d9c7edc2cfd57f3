"""The console's incidents: the list (``/incidents``) and one incident with its timeline.

Both read ``views.incidents`` over the ledger's recent runs (``console.runs``),
as ``theow incidents list/show`` and ``GET /api/v1/incidents`` do. Causes,
repositories and jobs came from build logs and webhooks: the templates escape
every value (``console.templates`` autoescapes).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from theow_workers.core.history.incident import TIMELINE_HEAD
from theow_workers.views.incidents import (
    KINDS,
    STATES,
    WINDOW_DAYS,
    BadIncidentQuery,
    IncidentFilter,
    incident_detail,
    incident_list,
)

if TYPE_CHECKING:
    from theow_workers.web.console import Console

FILTER_CHARS = 40


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def when(at: float | None) -> str:
    """Epoch seconds as the console shows a time (UTC)."""
    if at is None:
        return "—"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M")


async def incidents_page(request: Request) -> Response:
    console = _console(request)
    params = request.query_params
    where = IncidentFilter(
        state=params.get("state", "")[:FILTER_CHARS], kind=params.get("kind", "")[:FILTER_CHARS]
    )
    try:
        where.checked()
    except BadIncidentQuery as bad:
        where, problem = IncidentFilter(), str(bad)
    else:
        problem = ""
    found = await run_in_threadpool(incident_list, console.runs, where, time.time())
    return console.render(
        request,
        "incidents.html",
        incidents=found,
        where=where,
        problem=problem,
        kinds=KINDS,
        states=STATES,
        days=WINDOW_DAYS,
        when=when,
    )


async def incident_page(request: Request) -> Response:
    console = _console(request)
    wanted = request.path_params["iid"][:64]
    try:
        found = await run_in_threadpool(incident_detail, console.runs, wanted, time.time())
    except BadIncidentQuery:
        found = None
    if found is None:
        return console.render(request, "missing.html", status=404, what=f"incident {wanted}")
    return console.render(request, "incident.html", incident=found, when=when, head=TIMELINE_HEAD)


def routes() -> list[Route]:
    return [
        Route("/incidents", incidents_page),
        Route("/incidents/{iid}", incident_page),
    ]
