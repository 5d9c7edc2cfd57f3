"""GitHub's and GitLab's REST APIs, as far as the webhook intake needs them (httpx2).

A worker reads a failed job's log and keeps one comment per pull request:

=================== ============================================ ==================================================
what                GitHub                                       GitLab (``/api/v4``)
=================== ============================================ ==================================================
a job's log         ``GET /repos/{r}/actions/jobs/{id}/logs``    ``GET /projects/{p}/jobs/{id}/trace``
                    (302 to the log's storage)
a commit's PRs      ``GET /repos/{r}/commits/{sha}/pulls``       ``GET /projects/{p}/repository/commits/{sha}/merge_requests``
comments            ``/repos/{r}/issues/{n}/comments``           ``/projects/{p}/merge_requests/{iid}/notes``
update one          ``PATCH /repos/{r}/issues/comments/{id}``    ``PUT /projects/{p}/merge_requests/{iid}/notes/{id}``
=================== ============================================ ==================================================

Every call waits its turn in a per-repository sliding window shared by all
workers (``ratelimit.lua``, the LLM limiter's script, on
``names.key_hook_rate`` keys), and is retried with exponential back-off on a
transport error, a 5xx or a 429, waiting what ``Retry-After`` asks (a 429 makes
every worker wait on that repository). The log is read as a stream and kept as
the client keeps a command's output (``theow_client.capture.HeadTail``): a log of
gigabytes costs a few megabytes. The token is sent to the forge only: a redirect
to another origin (GitHub's log storage, a GitLab trace in object storage) goes
without it. And only over https: a forge URL on plain http (but a loopback test
server) fails every call with a ForgeError naming its setting, before a byte is sent.

>>> api = ForgeAPI.for_settings(settings, "github", redis)   # doctest: +SKIP
>>> api.job_log(job)                                            # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack
from urllib.parse import quote

import httpx2 as httpx

from theow_client import names
from theow_client.capture import HeadTail
from theow_client.config import safe_url
from theow_client.jsontypes import JsonObject
from theow_workers.config import forge_url_problem

if TYPE_CHECKING:
    from redis import Redis

    from theow_workers.config import Settings


class HookedJob(Protocol):
    """What the calls read of a job (``integrations.hooks.HookedJob``)."""

    @property
    def repo(self) -> str: ...
    @property
    def project_id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def head_sha(self) -> str: ...


log = logging.getLogger("theow.forges")

TIMEOUT = 15.0
RETRIES = 4
FIRST_BACKOFF = 0.5
MAX_WAIT = 60.0  # a Retry-After longer than this fails the call (the task retries later)
CALLS_PER_MINUTE = 60  # per repository, for every worker at once (forge_calls_per_minute)
WINDOW_MS = 60_000
PAGE = 100
MAX_PAGES = 10  # comments read to find Theow's own when Redis lost its id
CHUNK = 64 * 1024
MAX_REDIRECTS = 5  # GitLab's, followed by hand (the token stays on the forge's origin)
URL_SETTING = {"github": "THEOW_GITHUB_API_URL", "gitlab": "THEOW_GITLAB_URL"}


class ForgeError(Exception):
    """The forge refused a call (4xx but 429), or kept failing; ``status`` 0 for no answer."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ForgeUnavailable(ForgeError, ConnectionError):
    """Still a 5xx, a 429 or no answer after the retries: worth a later try of the task."""


@dataclass(frozen=True)
class Comment:
    id: str
    body: str


class RepoLimiter:
    """Calls per minute per repository, shared by every worker (``ratelimit.lua``)."""

    def __init__(self, redis: Redis, per_minute: int = CALLS_PER_MINUTE) -> None:
        from theow_workers.adapters.redis_state import _script

        self.redis = redis
        self.per_minute = per_minute
        self._acquire = _script(redis, "ratelimit.lua")

    def _keys(self, forge: str, repo: str) -> list[str]:
        base = names.key_hook_rate(forge, repo)
        return [f"{base}:{part}" for part in ("requests", "tokens", "backoff", "stopped")]

    def acquire(self, forge: str, repo: str, max_wait: float = MAX_WAIT) -> None:
        deadline = time.monotonic() + max_wait
        while True:
            code, wait_ms = self._acquire(
                keys=self._keys(forge, repo),
                args=[self.per_minute, 1 << 40, 0, uuid.uuid4().hex, WINDOW_MS],
            )
            if int(code) == 0:
                return
            wait = int(wait_ms) / 1000
            if time.monotonic() + wait > deadline:
                raise ForgeUnavailable(f"{forge} {repo}: rate limit, would wait {wait:.0f}s")
            time.sleep(wait + random.uniform(0, 0.05))

    def back_off(self, forge: str, repo: str, seconds: float) -> None:
        key = self._keys(forge, repo)[2]
        self.redis.set(key, "429", px=max(1, int(seconds * 1000)))


class ForgeAPI:
    """One forge's REST API with a token; ``forge``: ``github`` or ``gitlab``."""

    def __init__(
        self,
        forge: str,
        base_url: str,
        token: str,
        limiter: RepoLimiter | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        retries: int = RETRIES,
    ) -> None:
        self.forge = forge
        self.base = base_url.rstrip("/")
        problem = forge_url_problem(base_url)
        # Refused at the first call, inside the task's handling of ForgeError: one line, no crash.
        self.refusal = (
            f"{URL_SETTING.get(forge, forge)} {safe_url(base_url)[:200]!r}: {problem}; "
            "the token was not sent"
            if problem
            else ""
        )
        headers = {"User-Agent": "theow-hooks"}
        if forge == "github":
            headers |= {
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            }
            if token:
                headers["Authorization"] = f"Bearer {token}"
        else:
            self.base += "/api/v4"
        # httpx drops Authorization on a redirect to another origin, not PRIVATE-TOKEN:
        # GitLab's token goes per request, to the forge's own origin only (``_stream``).
        self.token = token if forge == "gitlab" else ""
        self.origin = httpx.URL(self.base).copy_with(path="/", query=None, fragment=None)
        self.http = httpx.Client(headers=headers, timeout=TIMEOUT, follow_redirects=True)
        self.limiter = limiter
        self.sleep = sleep
        self.retries = retries
        self._me: str | None = None  # the token's own account (GET /user), asked once

    @classmethod
    def for_settings(cls, settings: Settings, forge: str, redis: Redis | None) -> ForgeAPI:
        if forge == "github":
            url, token = settings.github_api_url, settings.github_token.get_secret_value()
        else:
            url, token = settings.gitlab_url, settings.gitlab_token.get_secret_value()
        limiter = RepoLimiter(redis, settings.forge_calls_per_minute) if redis is not None else None
        return cls(forge, url, token, limiter)

    def close(self) -> None:
        self.http.close()

    # -- the calls ---------------------------------------------------------------

    def job_log(self, job: HookedJob) -> str:
        """The job's log, head and tail kept as the client keeps a command's output."""
        if self.forge == "github":
            path = f"/repos/{_repo(job.repo)}/actions/jobs/{job.job_id}/logs"
        else:
            path = f"/projects/{quote(job.project_id, safe='')}/jobs/{job.job_id}/trace"
        kept = HeadTail()
        self._call("GET", path, job.repo, sink=kept)
        return kept.text()

    def pull_requests(self, job: HookedJob) -> list[str]:
        """The open pull (merge) requests whose head is the job's commit: their numbers."""
        if not job.head_sha.isalnum():
            return []
        if self.forge == "github":
            path = f"/repos/{_repo(job.repo)}/commits/{job.head_sha}/pulls"
            key = "number"
        else:
            path = f"{self._project(job)}/repository/commits/{job.head_sha}/merge_requests"
            key = "iid"
        found = self._call("GET", path, job.repo).json()
        return [
            str(pr[key])
            for pr in found
            if isinstance(pr, dict)
            and str(pr.get(key, "")).isdigit()
            and pr.get("state") in ("open", "opened", None)
        ]

    def find_comment(self, job: HookedJob, number: str, marker: str) -> Comment | None:
        """Theow's own comment on the pull request: the first by the token's own account
        (``GET /user``) whose body starts with ``marker``; anyone else may quote the marker."""
        me = self.me(job)
        for page in range(1, MAX_PAGES + 1):
            found = self._call(
                "GET",
                self._comments(job, number),
                job.repo,
                params={"per_page": PAGE, "page": page},
            ).json()
            for comment in found if isinstance(found, list) else []:
                if not isinstance(comment, dict) or self._author(comment) != me:
                    continue
                body = comment.get("body")
                if isinstance(body, str) and body.startswith(marker):
                    return Comment(str(comment["id"]), body)
            if not isinstance(found, list) or len(found) < PAGE:
                return None
        return None

    def me(self, job: HookedJob) -> str:
        """The token's own account: its login on GitHub, its user id on GitLab (asked once)."""
        if self._me is None:
            user = self._call("GET", "/user", job.repo).json()
            field = "login" if self.forge == "github" else "id"
            value = user.get(field) if isinstance(user, dict) else None
            if value is None or value == "" or isinstance(value, bool | dict | list):
                raise ForgeError(f"{self.forge} GET /user: no {field}")
            self._me = str(value)
        return self._me

    def _author(self, comment: JsonObject) -> str | None:
        """A comment's author as ``me`` names accounts (None: not said)."""
        who = comment.get("user" if self.forge == "github" else "author")
        value = (
            who.get("login" if self.forge == "github" else "id") if isinstance(who, dict) else None
        )
        return None if value is None or isinstance(value, bool | dict | list) else str(value)

    def create_comment(self, job: HookedJob, number: str, body: str) -> Comment:
        made = self._call("POST", self._comments(job, number), job.repo, json={"body": body})
        return Comment(str(made.json()["id"]), body)

    def update_comment(self, job: HookedJob, number: str, comment_id: str, body: str) -> None:
        if self.forge == "github":
            path = f"/repos/{_repo(job.repo)}/issues/comments/{comment_id}"
            self._call("PATCH", path, job.repo, json={"body": body})
        else:
            path = f"{self._comments(job, number)}/{comment_id}"
            self._call("PUT", path, job.repo, json={"body": body})

    # -- plumbing ----------------------------------------------------------------

    def _project(self, job: HookedJob) -> str:
        return f"/projects/{quote(job.project_id, safe='')}"

    def _comments(self, job: HookedJob, number: str) -> str:
        if self.forge == "github":
            return f"/repos/{_repo(job.repo)}/issues/{number}/comments"
        return f"{self._project(job)}/merge_requests/{number}/notes"

    def _call(
        self,
        method: str,
        path: str,
        repo: str,
        *,
        sink: HeadTail | None = None,
        **kwargs: Unpack[_Request],
    ) -> httpx.Response:
        """One call, retried on a transport error, a 5xx or a 429; ForgeError otherwise."""
        if self.refusal:
            raise ForgeError(f"{self.forge} {method} {path}: {self.refusal}")
        url = self.base + path
        for attempt in range(self.retries + 1):
            if self.limiter is not None:
                self.limiter.acquire(self.forge, repo)
            wait = FIRST_BACKOFF * 2**attempt
            try:
                with self._stream(method, url, **kwargs) as response:
                    if response.status_code < 400:
                        if sink is None:
                            response.read()
                        else:
                            for chunk in response.iter_bytes(CHUNK):
                                sink.write(chunk)
                        return response
                    response.read()
                    status = response.status_code
                    if status != 429 and status < 500:
                        raise ForgeError(f"{self.forge} {method} {path}: {status}", status)
                    wait = max(wait, _retry_after(response.headers.get("retry-after")) or 0)
                    if status == 429 and self.limiter is not None:
                        self.limiter.back_off(self.forge, repo, wait)
                    problem = f"{status}"
            except httpx.TransportError as exc:
                status, problem = 0, f"{type(exc).__name__}: {exc}"
            if attempt == self.retries or wait > MAX_WAIT:
                break
            log.info("%s %s %s: %s, retrying in %.1fs", self.forge, method, path, problem, wait)
            self.sleep(wait * random.uniform(1.0, 1.2))
        raise ForgeUnavailable(f"{self.forge} {method} {path}: {problem}", status)

    @contextlib.contextmanager
    def _stream(
        self, method: str, url: str, **kwargs: Unpack[_Request]
    ) -> Iterator[httpx.Response]:
        """GitHub: httpx follows redirects, without Authorization to another origin.

        GitLab: redirects of a GET are followed here, PRIVATE-TOKEN sent only
        while the URL is the forge's own origin; a redirected write fails.
        """
        if self.forge == "github":
            with self.http.stream(method, url, **kwargs) as response:
                yield response
            return
        target = httpx.URL(url)
        for _ in range(MAX_REDIRECTS + 1):
            own = target.copy_with(path="/", query=None, fragment=None) == self.origin
            headers = {"PRIVATE-TOKEN": self.token} if own and self.token else {}
            with self.http.stream(
                method, target, headers=headers, follow_redirects=False, **kwargs
            ) as response:
                if not response.has_redirect_location:
                    yield response
                    return
                if method != "GET":
                    raise ForgeError(f"gitlab {method} {target.path}: redirected", 0)
                target = target.join(response.headers["location"])
                kwargs.pop("params", None)  # the location carries its own query
        raise ForgeError(f"gitlab {method} {url}: more than {MAX_REDIRECTS} redirects", 0)


class _Request(TypedDict, total=False):
    """What a call sends besides its method and URL."""

    json: JsonObject
    params: dict[str, int]


def _repo(repo: str) -> str:
    owner, _, name = repo.partition("/")
    return f"{quote(owner, safe='')}/{quote(name, safe='')}"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header: a number or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
