"""The console's Starlette application: authentication, CSRF, and the review POSTs.

Pages (``pages.py``) only read. The two writes, approve and reject, call the
review service the CLI calls (``theow_workers.review.proposals``), so a
proposal approved here is written, re-checked and indexed exactly as
``theow review approve`` does it.

>>> app = create_app(Settings.load(env={"THEOW_WEB_PASSWORD": "pw"}))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from theow_workers.config import Settings
from theow_workers.store import console as queries
from theow_workers.store.explore import ExploreStore
from theow_workers.store.results import SqlStore
from theow_workers.web import pages
from theow_workers.web.affected import AffectedCounter
from theow_workers.web.auth import COOKIE, SESSION_SECONDS, Keys, Session
from theow_workers.web.library import Library
from theow_workers.web.render import stylesheet
from theow_workers.web.snapshot import Snapshot

HERE = Path(__file__).resolve().parent
OPEN_PATHS = ("/login", "/healthz", "/static/")
# No page runs a script (there is none): even a value that escaped escaping could not run.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
FLASH = "theow_flash"
WRONG_PASSWORD_DELAY = 0.5


def templates() -> Jinja2Templates:
    found = Jinja2Templates(directory=str(HERE / "templates"))
    found.env.autoescape = True  # every value escaped, whatever the template's name
    return found


class Console:
    """What every page needs: settings, the store, the keys, templates, the counter."""

    def __init__(self, settings: Settings, store: ExploreStore) -> None:
        self.settings = settings
        self.store = store
        self.keys = Keys.for_deployment(
            settings.web_password.get_secret_value(),
            settings.web_readonly_password.get_secret_value(),
            settings.home,
        )
        self.templates = templates()
        self.affected = AffectedCounter(store)
        self._library = Library(settings.rule_layers, settings.action_layers)
        self.insight = Snapshot(lambda: pages.insight_data(store))
        self.activity = Snapshot(lambda: queries.rule_activity(store))
        self._runtime: Any = None
        self._runtime_lock = threading.Lock()

    def library(self) -> Library:
        return self._library

    def runtime(self) -> Any:
        """One runtime for the index syncs after approvals: the model is loaded once."""
        with self._runtime_lock:
            if self._runtime is None:
                from theow_workers.runtime import Runtime

                self._runtime = Runtime(self.settings)
            return self._runtime

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session: Session = request.state.session
        flash = request.cookies.get(FLASH, "")
        response = self.templates.TemplateResponse(
            request, name, {"session": session, "csrf": self.keys.csrf_token(session),
                            "flash": flash, **context}, status_code=status,
        )  # fmt: skip
        if flash:
            response.delete_cookie(FLASH)
        return response


class AuthMiddleware(BaseHTTPMiddleware):
    """No page without a session; a POST needs the session's CSRF token and a same-site origin."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await self._dispatch(request, call_next)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        console: Console = request.app.state.console
        path = request.url.path
        if path.startswith(OPEN_PATHS):
            return await call_next(request)
        session = console.keys.session(request.cookies.get(COOKIE))
        if session is None:
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                target = quote(path + (f"?{request.url.query}" if request.url.query else ""))
                return RedirectResponse(f"/login?next={target}", status_code=303)
            return PlainTextResponse("authentication required", status_code=401,
                                     headers={"WWW-Authenticate": 'FormBased realm="theow"'})  # fmt: skip
        request.state.session = session
        if request.method == "POST":
            origin = request.headers.get("origin")
            if origin and urlparse(origin).netloc != request.headers.get("host"):
                return PlainTextResponse("cross-origin POST refused", status_code=403)
            form = await request.form()
            request.state.form = form  # the endpoint's request cannot read the body again
            if not console.keys.csrf_ok(session, str(form.get("csrf") or "")):
                return PlainTextResponse("missing or invalid CSRF token", status_code=403)
        return await call_next(request)


def _safe_next(target: str) -> str:
    """Only a path on this site: a login never redirects elsewhere."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


async def login(request: Request) -> Response:
    console: Console = request.app.state.console
    context: dict[str, Any] = {"next": _safe_next(request.query_params.get("next", "/"))}
    if request.method == "POST":
        form = await request.form()
        context["next"] = _safe_next(str(form.get("next") or "/"))
        role = console.keys.role_for(str(form.get("password") or ""))
        if role is not None:
            response = RedirectResponse(context["next"], status_code=303)
            response.set_cookie(
                COOKIE, console.keys.session_cookie(role, str(form.get("name") or "")),
                max_age=SESSION_SECONDS, httponly=True, samesite="strict",
                secure=request.url.scheme == "https",
            )  # fmt: skip
            return response
        await asyncio.sleep(WRONG_PASSWORD_DELAY)  # guessing costs time
        context["error"] = "wrong password"
    status = 401 if "error" in context else 200
    return console.templates.TemplateResponse(request, "login.html", context, status_code=status)


async def logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def pygments_css(request: Request) -> Response:
    return Response(stylesheet(), media_type="text/css")


def create_app(settings: Settings, store: ExploreStore | None = None) -> Starlette:
    """The console over ``settings``' database; raises WebAuthError without a password."""
    console = Console(settings, store or ExploreStore(SqlStore(settings.store_url)))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        console.affected.start()
        yield
        console.affected.stop()

    routes = [
        Route("/healthz", healthz),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/static/pygments.css", pygments_css),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        *pages.routes(),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(AuthMiddleware)], lifespan=lifespan)
    app.state.console = console
    return app
