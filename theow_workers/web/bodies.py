"""Request bodies: bounded before they are read, large ones parsed off the event loop.

Every request's body has a bound, by path:

======================== ================================================
path                     most bytes
======================== ================================================
``POST /api/v1/failures`` ``THEOW_INTAKE_MAX_BYTES`` (4 MiB): the intake
``POST /api/v1/passing``  the same: a passing run is a log too
``/hooks/…``             ``HOOK_MAX_BYTES`` (1 MiB): a delivery is a few KB
anything else            ``FORM_MAX_BYTES`` (256 KiB): the console's forms,
                         the longest an edited rule of 20,000 characters
======================== ================================================

``BodyLimit`` answers 413 before the application sees a request whose
``Content-Length`` is over its bound, and the moment a body sent without one
(chunked) passes it: nothing is parsed, the connection is closed, one line is
logged with the path and the client.

The console is one event loop: a body that takes a second to parse (a 4 MB
``[{},{},…]`` is a million objects) would hold every other request for that
second. So a body over ``INLINE_BYTES`` is parsed in a worker thread
(``parsed``), one such body at a time: ``json.loads`` holds the interpreter
lock while it runs, and two at once would leave the loop no turn between them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from theow_workers.web.api_schema import API
from theow_workers.web.proxies import client

HOOK_MAX_BYTES = 1024 * 1024  # a workflow_job or Job Hook delivery is a few KB
FORM_MAX_BYTES = 256 * 1024  # teach.MAX_RULE_CHARS (20,000), url-encoded, with room
INLINE_BYTES = 64 * 1024  # parsed on the loop below this: well under a millisecond
INTAKE = (f"{API}/failures", f"{API}/passing")

log = logging.getLogger("theow.web")
T = TypeVar("T")


@dataclass(frozen=True)
class Bound:
    most: int
    what: str  # who takes at most ``most`` bytes, and where that is set


class BodyTooLarge(Exception):
    """A body without Content-Length passed its bound while it was read."""


def bound_for(path: str, intake_max_bytes: int) -> Bound:
    """The bound of a request to ``path``.

    >>> bound_for("/api/v1/failures", 4096).what, bound_for("/hooks/github", 4096).most
    ('the intake takes at most 4,096 bytes (THEOW_INTAKE_MAX_BYTES)', 1048576)
    """
    if path in INTAKE:
        return Bound(
            intake_max_bytes,
            f"the intake takes at most {intake_max_bytes:,} bytes (THEOW_INTAKE_MAX_BYTES)",
        )
    if path.startswith("/hooks/"):
        return Bound(HOOK_MAX_BYTES, f"a webhook delivery is at most {HOOK_MAX_BYTES:,} bytes")
    return Bound(FORM_MAX_BYTES, f"a console request is at most {FORM_MAX_BYTES:,} bytes")


class BodyLimit:
    """ASGI middleware: 413 for a body over its bound (``bound_for``), before it is read."""

    def __init__(self, app: ASGIApp, intake_max_bytes: int) -> None:
        self.app = app
        self.intake_max_bytes = intake_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bound = bound_for(scope["path"], self.intake_max_bytes)
        declared = _content_length(scope)
        if declared is not None and declared > bound.most:
            await _refuse(scope, receive, send, f"the body is {declared:,} bytes; {bound.what}")
            return
        seen, started = 0, False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > bound.most:
                    raise BodyTooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except Exception as exc:
            if started or not _too_large(exc):
                raise
            await _refuse(
                scope, receive, send, f"the body passed {bound.most:,} bytes; {bound.what}"
            )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 20 else None
    return None


def _too_large(exc: BaseException) -> bool:
    """The body's bound, raised here or inside a task group that wrapped it."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(BodyTooLarge) is not None
    return isinstance(exc, BodyTooLarge)


async def _refuse(scope: Scope, receive: Receive, send: Send, why: str) -> None:
    request = Request(scope)
    path = " ".join(str(scope["path"])[:100].split())  # decoded: may hold a newline
    log.warning("refused %s %s from %s: %s", request.method, path, client(request), why)
    headers = {"Connection": "close"}  # the rest of the body is never read
    response: Response
    if scope["path"].startswith(f"{API}/"):
        response = JSONResponse({"error": why}, status_code=413, headers=headers)
    else:
        response = PlainTextResponse(f"payload too large: {why}", status_code=413, headers=headers)
    await response(scope, receive, send)


async def parsed(request: Request, read: Callable[[bytes], T], raw: bytes) -> T:
    """``read(raw)``: on the loop when small, else in a thread, one large body at a time."""
    if len(raw) <= INLINE_BYTES:
        return read(raw)
    limiter: anyio.CapacityLimiter = request.app.state.parsers
    return await anyio.to_thread.run_sync(read, raw, limiter=limiter)


def parsers() -> anyio.CapacityLimiter:
    """The app's limiter for ``parsed`` (``app.state.parsers``): one large body at a time."""
    return anyio.CapacityLimiter(1)
