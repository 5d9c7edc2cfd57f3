"""The console's Starlette application: authentication, CSRF, and the review POSTs.

Its door: every body is bounded before it is read (``bodies.py``), every
request's Host is checked and every POST's Origin (``hosts.py``), logins and
token lookups are throttled per client address (``throttle.py``; whose address
that is: ``proxies.py``), and every refused or failed login is logged on
``theow.web`` with the client's address and the name typed, never the password.

Pages (``pages.py``) only read. The two writes, approve and reject, call the
review service the CLI calls (``theow_workers.review.proposals``), so a
proposal approved here is written, re-checked and indexed exactly as
``theow review approve`` does it.

>>> app = create_app(Settings.load(env={"THEOW_WEB_PASSWORD": "..."}))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from theow_client.jsontypes import JsonObject
from theow_workers.config import Settings
from theow_workers.store.explore import ExploreStore
from theow_workers.store.results import SqlStore
from theow_workers.web import api, hooks, incidents, intake, pages
from theow_workers.web.auth import COOKIE, NAME_CHARS, SESSION_SECONDS
from theow_workers.web.bodies import BodyLimit, parsers
from theow_workers.web.console import HERE, Console
from theow_workers.web.hosts import same_origin
from theow_workers.web.proxies import believed, client
from theow_workers.web.render import stylesheet

# The JSON API authenticates each request with a token of its own (web/api.py), the webhooks
# each delivery by its signature (web/hooks.py): never with the console's cookie.
OPEN_PATHS = ("/login", "/healthz", "/static/", "/api/", "/hooks/")
# No page runs a script (there is none): even a value that escaped escaping could not run.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
log = logging.getLogger("theow.web")


class AuthMiddleware(BaseHTTPMiddleware):
    """No page without a session or under a foreign Host; a POST needs the console's own
    Origin and the session's CSRF token."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await self._dispatch(request, call_next)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        console: Console = request.app.state.console
        path = request.url.path
        host, origin = request.headers.get("host"), request.headers.get("origin")
        if not console.hosts.allows(host):
            log.warning(
                "refused %s %s from %s: Host %r is not one of the console's "
                "(THEOW_WEB_ALLOWED_HOSTS)",
                request.method,
                path,
                client(request),
                _shown(host),
            )
            return PlainTextResponse("host not allowed (THEOW_WEB_ALLOWED_HOSTS)", status_code=403)
        if request.method == "POST" and origin is not None and not same_origin(origin, host):
            log.warning(
                "refused POST %s from %s: Origin %r is not the console's",
                path,
                client(request),
                _shown(origin),
            )
            return PlainTextResponse("cross-origin POST refused", status_code=403)
        if path.startswith(OPEN_PATHS):
            return await call_next(request)
        session = console.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                target = quote(path + (f"?{request.url.query}" if request.url.query else ""))
                return RedirectResponse(f"/login?next={target}", status_code=303)
            return PlainTextResponse(
                "authentication required",
                status_code=401,
                headers={"WWW-Authenticate": 'FormBased realm="theow"'},
            )
        request.state.session = session
        if request.method == "POST":
            form = await request.form()
            request.state.form = form  # the endpoint's request cannot read the body again
            if not console.keys.csrf_ok(session, str(form.get("csrf") or "")):
                return PlainTextResponse("missing or invalid CSRF token", status_code=403)
        return await call_next(request)


def _shown(text: str | None) -> str:
    """Attacker-written text as one short log field: no line breaks, bounded."""
    return " ".join(str(text or "").split())[:NAME_CHARS]


def _safe_next(target: str) -> str:
    """Only a path on this site: a login never redirects elsewhere."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


async def login(request: Request) -> Response:
    console: Console = request.app.state.console
    context: JsonObject = {"next": _safe_next(request.query_params.get("next", "/"))}
    status, headers = 200, {}
    if request.method == "POST":
        form = await request.form()
        context["next"] = _safe_next(str(form.get("next") or "/"))
        address, name = client(request), str(form.get("name") or "")
        # No await from here to failed(): concurrent attempts from one client cannot
        # all pass the check before the first failure is counted.
        wait = console.throttle.retry_after(address)
        if wait > 0:
            if console.throttle.first_refusal(address):
                log.warning(
                    "login refused for %.0f s: %s failed %d times (last name %r)",
                    wait,
                    address,
                    console.throttle.failures(address),
                    _shown(name),
                )
            seconds = math.ceil(wait)
            status, headers = 429, {"Retry-After": str(seconds)}
            context["error"] = f"too many failed logins; try again in {seconds} s"
        elif (role := console.keys.role_for(str(form.get("password") or ""))) is not None:
            console.throttle.succeeded(address)
            response = RedirectResponse(context["next"], status_code=303)
            response.set_cookie(
                COOKIE,
                console.sessions.open(role, name),
                max_age=SESSION_SECONDS,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            return response
        else:
            delay = console.throttle.failed(address)
            log.warning(
                "failed login from %s as %r (%d in a row)",
                address,
                _shown(name),
                console.throttle.failures(address),
            )
            await asyncio.sleep(delay)  # guessing costs time, more when many guess at once
            status, context["error"] = 401, "wrong password"
    return console.templates.TemplateResponse(
        request, "login.html", context, status_code=status, headers=headers
    )


async def logout(request: Request) -> Response:
    """Ends the session itself: the cookie, if kept, opens nothing any more."""
    request.app.state.console.sessions.close(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def pygments_css(request: Request) -> Response:
    return Response(stylesheet(), media_type="text/css")


def create_app(settings: Settings, store: ExploreStore | None = None, bound: str = "") -> Starlette:
    """The console over ``settings``' database, served at address ``bound``; raises
    WebAuthError without a password or with a weak one."""
    console = Console(settings, store or ExploreStore(SqlStore(settings.store_url)), bound)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        console.affected.start()
        yield
        console.affected.stop()
        app.state.hooks.close()

    routes = [
        Route("/healthz", healthz),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/static/pygments.css", pygments_css),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        *intake.routes(),
        *api.routes(),
        *pages.routes(),
        *incidents.routes(),
        *hooks.routes(),
    ]
    middleware = [
        *believed(settings.web_trusted_proxies),  # first: the address the others count
        Middleware(BodyLimit, intake_max_bytes=settings.intake_max_bytes),
        Middleware(AuthMiddleware),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.console, app.state.parsers = console, parsers()
    app.state.api, app.state.intake = api.Api(console), intake.Intake(console)
    app.state.hooks = hooks.HookIntake(settings)
    return app
