"""One comment per pull request, kept up to date as its jobs fail and pass (``THEOW_PR_COMMENTS=on``).

A ``workflow_job`` event names no pull request (and a fork's ``pull_requests``
list is empty), so the pull requests are found from the job's head commit. Each
job's outcome is kept in a Redis hash per pull request (``names.key_hook_pr``),
and the whole comment is rewritten from it under a per-pull-request lock, so
two jobs of one pull request finishing at once never make two comments: the
second waits, finds the first's comment id in the hash (or, if Redis lost it,
the ``<!-- theow -->`` marker in the comments) and edits it.

A listed job that passes later (a re-run, a new push) is shown passing in the
same comment, its verdict struck (``mark_passed``); a passing job no comment
lists costs no forge call and never makes a comment.

The comment groups the failed jobs by whose failure they are (``comment``:
this change, broken main, flaky, infrastructure, unknown). A later run can
revise a failure's origin (a retry passes: flaky; main fails the same way:
main); :func:`refresh_comment` then rewrites each comment listing that
failure in place. The pull requests listing a failure are kept in Redis
(``names.key_hook_failure_prs``), so a failure no comment lists costs no call.

What the comment shows, and how it is made safe, is ``comment``'s.

Posted by a worker after the verdict, never by the agent.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from redis import Redis
from redis.exceptions import LockError

from theow_client import names
from theow_client.jsontypes import Json
from theow_workers.adapters.forges import ForgeAPI, ForgeError, ForgeUnavailable
from theow_workers.integrations.comment import (
    MARKER,
    ZWSP,
    attempt_number,
    entry,
    origin_fields,
    render,
)
from theow_workers.integrations.hooks import HookedJob

if TYPE_CHECKING:
    from theow_workers.runtime import Runtime

__all__ = ["MARKER", "ZWSP", "entry", "mark_passed", "post", "refresh_comment", "render"]

log = logging.getLogger("theow.hooks")

LOCK_TIMEOUT = 120
LOCK_WAIT = 60.0


def post(
    redis: Redis, api: ForgeAPI, job: HookedJob, verdict: Mapping[str, Json], console_url: str = ""
) -> list[str]:
    """Write the job's outcome into the comment of each of its pull requests; their numbers."""
    numbers = api.pull_requests(job)
    item = entry(job, verdict)
    for number in numbers:
        _write(redis, api, job, number, lambda _: item, console_url, create=True)
    if numbers and item["failure_id"]:  # where a later revision of its origin is shown
        listing = json.dumps({"job": job.to_wire(), "prs": numbers})
        redis.set(names.key_hook_failure_prs(item["failure_id"]), listing, ex=names.HOOK_PR_TTL)
    return numbers


def refresh_comment(
    rt: Runtime, failure_id: str, origin: Mapping[str, object] | None = None
) -> list[str]:
    """A failure's origin was revised: each comment listing it rewritten in place; their numbers.

    ``origin`` is the revised decision as the verdict carries it
    (``Decision.to_dict()``: origin, culprit, fixed_by, flip_rate, reason);
    None reads it from the ledger (which keeps no flip rate). Nothing happens
    with ``pr_comments`` off, for a failure no comment lists, for a job failed
    again since (its new failure has its own origin), or when the comment
    already says it. Never makes a comment, never raises for the forge's sake:
    a refusal or an unreachable forge is logged.

    >>> feedback.refresh_comment(rt, "f-1", decision.to_dict())   # doctest: +SKIP
    ['12']
    """
    if not rt.settings.pr_comments:
        return []
    listed = _listing(rt.redis.get(names.key_hook_failure_prs(failure_id)))
    if listed is None:
        return []
    job, numbers = listed
    if origin is None:
        known = rt.runs.of_failure(failure_id)
        if known is None or not known.origin:
            return []
        origin = {
            "origin": known.origin,
            "culprit": known.culprit,
            "fixed_by": known.fixed_by,
            "reason": known.origin_reason or "",
        }
    revised = origin_fields(origin)
    if not revised["origin"]:
        return []

    def change(old: dict[str, str] | None) -> dict[str, str] | None:
        if old is None or old.get("failure_id") != failure_id:
            return None
        if all(old.get(name, "") == value for name, value in revised.items()):
            return None  # says so already: no call
        return {**old, **revised}

    api = ForgeAPI.for_settings(rt.settings, job.forge, rt.redis)
    try:
        return [n for n in numbers if _write(rt.redis, api, job, n, change, "", create=False)]
    except (ForgeError, TimeoutError) as exc:
        log.warning("%s: comment not updated with the revised origin: %s", job.key, exc)
        return []
    finally:
        api.close()


def _listing(raw: bytes | str | None) -> tuple[HookedJob, list[str]] | None:
    """The job and pull requests ``post`` kept for a failure; None when none or unreadable."""
    if raw is None:
        return None
    try:
        found = json.loads(raw)
        job = HookedJob.from_wire(found["job"])
        numbers = [str(n) for n in found["prs"] if str(n).isdigit()]
    except (ValueError, KeyError, TypeError):
        return None
    return job, numbers


def mark_passed(redis: Redis, api: ForgeAPI, job: HookedJob, console_url: str = "") -> list[str]:
    """A passing run of a job that comments list as failed: those comments say it passed now.

    The pull requests whose comment lists the job are in Redis
    (``names.key_hook_job_prs``), so a job no comment lists costs no forge
    call. A run of the failed commit is one of its pull requests' (a re-run);
    a run of another commit counts only if the forge names those pull
    requests for it (a push to the pull request, not the main branch's run of
    the same job). Never makes a comment: the numbers of those it updated.
    """
    field = f"job:{job.job}"
    listed: list[tuple[str, dict[str, str]]] = []
    for raw in sorted(redis.smembers(names.key_hook_job_prs(job.job))):
        number = raw.decode() if isinstance(raw, bytes) else str(raw)
        item = _stored(redis.hget(names.key_hook_pr(job.forge, job.repo, number), field))
        if item is not None and _fixed_by(item, job):
            listed.append((number, item))
    if any(item.get("head_sha") != job.head_sha for _, item in listed):
        heads = set(api.pull_requests(job))
        listed = [
            (n, item) for n, item in listed if item.get("head_sha") == job.head_sha or n in heads
        ]
    return [
        number
        for number, _ in listed
        if _write(redis, api, job, number, lambda old: _passed(old, job), console_url, create=False)
    ]


def post_or_log(redis: Redis, api: ForgeAPI, job: HookedJob, verdict: Mapping[str, Json]) -> None:
    """``post``; a refusal (no permission, a pull request gone) is logged, the verdict stands.

    ForgeUnavailable (5xx, 429 or no answer after the retries) propagates: the
    task is retried later, and finds its verdict already decided.
    """
    try:
        post(redis, api, job, verdict)
    except ForgeError as exc:
        if isinstance(exc, ForgeUnavailable):
            raise
        log.warning("%s: no pull-request comment: %s", job.key, exc)


def mark_passed_or_log(redis: Redis, api: ForgeAPI, job: HookedJob) -> list[str]:
    """``mark_passed``; a refusal is logged (as ``post_or_log``), ForgeUnavailable propagates."""
    try:
        return mark_passed(redis, api, job)
    except ForgeError as exc:
        if isinstance(exc, ForgeUnavailable):
            raise
        log.warning("%s: pull-request comment not marked passed: %s", job.key, exc)
        return []


def _fixed_by(item: Mapping[str, str], job: HookedJob) -> bool:
    """Whether ``job`` passing fixes the failure ``item`` records (not a stale delivery)."""
    if item.get("passed"):
        return False
    if item.get("head_sha") != job.head_sha:
        return True
    return str(item.get("attempt", "")).isdigit() and attempt_number(job) > int(item["attempt"])


def _passed(old: dict[str, str] | None, job: HookedJob) -> dict[str, str] | None:
    if old is None or not _fixed_by(old, job):
        return None  # meanwhile failed again, or marked by another delivery
    return {**old, "passed": str(attempt_number(job)), "passed_url": job.url}


def _stored(raw: bytes | str | None) -> dict[str, str] | None:
    if raw is None:
        return None
    try:
        item = json.loads(raw)
    except ValueError:
        return None
    return item if isinstance(item, dict) else None


def _write(
    redis: Redis,
    api: ForgeAPI,
    job: HookedJob,
    number: str,
    change: Callable[[dict[str, str] | None], dict[str, str] | None],
    console: str,
    *,
    create: bool,
) -> bool:
    """Under the pull request's lock: the job's entry changed, the comment rewritten.

    ``change`` gets the entry stored now and answers the new one (None: nothing
    to change). ``create`` False never makes a comment (a passing run updates
    one or nothing). Whether the comment was written.
    """
    key = names.key_hook_pr(job.forge, job.repo, number)
    field = f"job:{job.job}"
    lock = redis.lock(
        names.key_hook_pr_lock(job.forge, job.repo, number),
        timeout=LOCK_TIMEOUT,
        blocking_timeout=LOCK_WAIT,
    )
    if not lock.acquire():
        raise TimeoutError(f"pull request {job.repo}#{number}: its comment lock stayed taken")
    try:
        item = change(_stored(redis.hget(key, field)))
        if item is None:
            return False
        redis.hset(key, field, json.dumps(item))
        redis.expire(key, names.HOOK_PR_TTL)
        if not item.get("passed"):
            redis.sadd(names.key_hook_job_prs(job.job), number)
            redis.expire(names.key_hook_job_prs(job.job), names.HOOK_PR_TTL)
        stored = redis.hgetall(key)
        entries = [
            json.loads(value)
            for field, value in sorted(stored.items())
            if _text(field).startswith("job:")
        ]
        body = render(entries, console)
        known = stored.get(b"comment")
        comment_id = _text(known) if known else None
        if comment_id is None:
            found = api.find_comment(job, number, MARKER)
            comment_id = found.id if found else None
        if comment_id is None:
            if not create:
                return False
            comment_id = api.create_comment(job, number, body).id
            log.info("%s#%s: comment %s made", job.repo, number, comment_id)
        else:
            try:
                api.update_comment(job, number, comment_id, body)
                log.info("%s#%s: comment %s updated", job.repo, number, comment_id)
            except ForgeError as exc:
                if exc.status != 404:
                    raise
                if not create:
                    redis.hdel(key, "comment")  # someone deleted it: not made again to say so
                    return False
                comment_id = api.create_comment(job, number, body).id  # someone deleted it
                log.info("%s#%s: comment %s made again", job.repo, number, comment_id)
        redis.hset(key, "comment", comment_id)
        return True
    finally:
        with contextlib.suppress(LockError):
            lock.release()


def _text(value: bytes | str) -> str:
    """A value read from Redis as text (the client here reads bytes; typed as either)."""
    return value.decode() if isinstance(value, bytes) else value
