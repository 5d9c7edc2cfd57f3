"""Who the client is: the connection's address, or a trusted proxy's word for it.

The throttles (``throttle.py``) count failures per client address, so that
address must be one a client cannot choose. By default it is the connection's
peer and no forwarding header is believed, from anywhere (loopback included:
a build agent on the console's machine connects from 127.0.0.1 too).
``THEOW_WEB_TRUSTED_PROXIES`` (addresses or networks, comma-separated) names
the reverse proxies in front of the console: a request from one of them is
taken to come from the address its ``X-Forwarded-For`` names (the rightmost
one that is not itself a trusted proxy, which a client cannot forge), and
``X-Forwarded-Proto`` says whether the browser used https (the cookie's
``Secure``). uvicorn's own ``ProxyHeadersMiddleware`` does the reading; ``theow
web`` turns uvicorn's built-in one off (it trusts 127.0.0.1 by default).

>>> [m.cls.__name__ for m in believed(["10.0.0.0/24"])], believed([])
(['ProxyHeadersMiddleware'], [])
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware import Middleware
from starlette.requests import Request
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

ADDRESS_CHARS = 60  # an IPv6 address with a zone is under 50


def believed(trusted: Sequence[str]) -> list[Middleware]:
    """The app's outermost middleware: forwarding headers from ``trusted`` only, or none."""
    return [Middleware(ProxyHeadersMiddleware, trusted_hosts=list(trusted))] if trusted else []


def client(request: Request) -> str:
    """The client's address as the throttles and the log lines count it (bounded text)."""
    host = request.client.host if request.client else ""
    return " ".join(host.split())[:ADDRESS_CHARS] or "unknown"
