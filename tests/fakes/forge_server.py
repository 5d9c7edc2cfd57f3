"""Fake GitHub and GitLab REST APIs on loopback (or ``host``), spoken to by the real httpx2 client.

GitHub (``/repos/...``): a job's log answers 302 to ``/blob/<job>`` as GitHub
redirects to its log storage, a commit's pull requests, an issue's comments
(list, create) and ``PATCH /repos/{r}/issues/comments/{id}``. GitLab
(``/api/v4/projects/...``): a job's trace, a commit's merge requests, a merge
request's notes (list, create, ``PUT``). ``/user`` (both) names the token's
account; a comment made through the API is that account's (``author()``). The token is checked (``Bearer`` for
GitHub, ``PRIVATE-TOKEN`` for GitLab); the first ``fail_first`` calls answer
503, then one 429 with ``Retry-After`` if ``throttle_once``; ``delay`` slows
every answer so that concurrent callers overlap.

>>> with FakeForge(token="t") as fake:  # doctest: +SKIP
...     fake.logs["42"] = "ECHO broken"
...     fake.pulls["abc"] = [7]
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


class FakeForge:
    def __init__(self, token: str = "forge-token", host: str = "127.0.0.1") -> None:
        self.token = token
        self.login, self.user_id = "theow-bot", 77  # the token's account (``GET /user``)
        self.logs: dict[str, str] = {}  # job id -> log text
        self.pulls: dict[str, list[int]] = {}  # head sha -> PR (MR) numbers
        self.comments: dict[str, list[dict[str, Any]]] = {}  # PR number -> comments
        self.requests: list[tuple[str, str]] = []
        self.tokens_seen: list[str] = []  # every credential header that arrived, any path
        self.trace_storage = ""  # an origin a GitLab trace redirects to (its /blob/<job>)
        self.refused = 0
        self.fail_first = 0
        self.throttle_once = 0.0  # seconds of the one 429's Retry-After (0: none)
        self.delay = 0.0  # seconds each API answer takes (to overlap concurrent callers)
        self.lock = threading.Lock()
        self._ids = 100
        self.server = ThreadingHTTPServer((host, 0), self._handler())
        self.url = f"http://{host}:{self.server.server_address[1]}"

    def __enter__(self) -> FakeForge:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, Any, dict]:
        with self.lock:
            self.requests.append((method, path))
            self.tokens_seen += [
                headers[name] for name in ("Authorization", "PRIVATE-TOKEN") if headers.get(name)
            ]
            if path.startswith("/blob/"):  # the log storage: no token, as a signed URL
                return 200, self.logs[path.rsplit("/", 1)[1]], {}
            if not self._authorized(headers):
                self.refused += 1
                return 401, {"message": "Bad credentials"}, {}
            if self.fail_first > 0:
                self.fail_first -= 1
                return 503, {"message": "unavailable"}, {}
            if self.throttle_once:
                wait, self.throttle_once = self.throttle_once, 0.0
                return 429, {"message": "rate limited"}, {"Retry-After": f"{wait:g}"}
        if self.delay:
            time.sleep(self.delay)  # outside the lock: callers overlap here
        with self.lock:
            return self._route(method, path, body)

    def _authorized(self, headers: Any) -> bool:
        return (
            headers.get("Authorization") == f"Bearer {self.token}"
            or headers.get("PRIVATE-TOKEN") == self.token
        )

    def _route(self, method: str, path: str, body: bytes) -> tuple[int, Any, dict]:
        if path in ("/user", "/api/v4/user"):
            return 200, {"login": self.login, "id": self.user_id}, {}
        if m := re.fullmatch(r"/repos/[^/]+/[^/]+/actions/jobs/(\d+)/logs", path):
            if m[1] not in self.logs:
                return 404, {"message": "Not Found"}, {}
            return 302, "", {"Location": f"{self.url}/blob/{m[1]}"}
        if m := re.fullmatch(r"/api/v4/projects/[^/]+/jobs/(\d+)/trace", path):
            if self.trace_storage:
                return 302, "", {"Location": f"{self.trace_storage}/blob/{m[1]}"}
            return (200, self.logs[m[1]], {}) if m[1] in self.logs else (404, {}, {})
        if m := re.fullmatch(r"/repos/[^/]+/[^/]+/commits/(\w+)/pulls", path):
            return 200, [{"number": n, "state": "open"} for n in self.pulls.get(m[1], [])], {}
        if m := re.fullmatch(
            r"/api/v4/projects/[^/]+/repository/commits/(\w+)/merge_requests", path
        ):
            return 200, [{"iid": n, "state": "opened"} for n in self.pulls.get(m[1], [])], {}
        if m := re.fullmatch(
            r"/repos/[^/]+/[^/]+/issues/(\d+)/comments|/api/v4/projects/[^/]+/merge_requests/(\d+)/notes",
            path,
        ):
            number = m[1] or m[2]
            listed = self.comments.setdefault(number, [])
            if method == "GET":
                return 200, listed, {}
            self._ids += 1
            listed.append({"id": self._ids, "body": json.loads(body)["body"], **self.author()})
            return 201, listed[-1], {}
        if m := re.fullmatch(
            r"/repos/[^/]+/[^/]+/issues/comments/(\d+)|/api/v4/projects/[^/]+/merge_requests/\d+/notes/(\d+)",
            path,
        ):
            wanted = int(m[1] or m[2])
            for comment in (c for cs in self.comments.values() for c in cs):
                if comment["id"] == wanted:
                    comment["body"] = json.loads(body)["body"]
                    return 200, comment, {}
            return 404, {"message": "Not Found"}, {}
        return 404, {"message": f"no route {method} {path}"}, {}

    def author(self, login: str | None = None, user_id: int | None = None) -> dict[str, Any]:
        """A comment's author fields as both forges list them (the token's account by default)."""
        return {
            "user": {"login": login or self.login},
            "author": {"id": self.user_id if user_id is None else user_id},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = unquote(urlsplit(self.path).path)
                status, payload, headers = fake.answer(self.command, path, self.headers, body)
                data = (
                    payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                )
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = _serve

            def log_message(self, *_: Any) -> None:
                pass

        return Handler
