"""One comment per pull request, kept up to date as its jobs fail (``THEOW_PR_COMMENTS=on``).

A ``workflow_job`` event names no pull request (and a fork's ``pull_requests``
list is empty), so the pull requests are found from the job's head commit. Each
job's outcome is kept in a Redis hash per pull request (``names.key_hook_pr``),
and the whole comment is rewritten from it under a per-pull-request lock, so
two jobs of one pull request finishing at once never make two comments: the
second waits, finds the first's comment id in the hash (or, if Redis lost it,
the ``<!-- theow -->`` marker in the comments) and edits it.

Every text in the comment came from a build log or a webhook: the line shown is
masked (``theow_client.redact``), cut to one bounded line and fenced with a
fence longer than any backtick run in it; names are Markdown-escaped.

Posted by a worker after the verdict, never by the agent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from redis.exceptions import LockError

from theow_client import names
from theow_client.redact import redact_text
from theow_workers.adapters.forges import ForgeAPI, ForgeError, ForgeUnavailable
from theow_workers.integrations.hooks import HookedJob

log = logging.getLogger("theow.hooks")

MARKER = "<!-- theow -->"
LINE_CHARS = 300
MAX_JOBS_SHOWN = 50
LOCK_TIMEOUT = 120
LOCK_WAIT = 60.0
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~])")


def entry(job: HookedJob, verdict: Mapping[str, Any]) -> dict[str, str]:
    """What the comment says of one failed job (bounded, masked)."""
    return {
        "name": job.name,
        "workflow": job.workflow,
        "url": job.url,
        "status": str(verdict.get("status") or ""),
        "rule": str(verdict.get("rule") or ""),
        "line": _line_to_look_at(verdict),
        "failure_id": str(verdict.get("failure_id") or ""),
    }


def render(entries: list[dict[str, str]], console_url: str = "") -> str:
    """The comment's Markdown: the marker, then each failed job (by job key)."""
    lines = [MARKER, "### Theow: failed jobs of this pull request", ""]
    for item in entries[:MAX_JOBS_SHOWN]:
        name = escape(" / ".join(p for p in (item.get("workflow"), item.get("name")) if p))
        url = item.get("url", "")
        title = f"[{name}]({url})" if url.startswith("https://") and ")" not in url else name
        rule = item.get("rule")
        said = f"rule `{rule}` ({escape(item.get('status', ''))})" if rule else "unexplained"
        link = ""
        if console_url and item.get("failure_id"):
            link = f" · [console]({console_url.rstrip('/')}/failures/{item['failure_id']})"
        lines.append(f"- **{title}**: {said}{link}")
        if item.get("line"):
            lines += [f"  {block}" for block in fenced(item["line"]).splitlines()]
    if len(entries) > MAX_JOBS_SHOWN:
        lines.append(f"- … and {len(entries) - MAX_JOBS_SHOWN} more")
    return "\n".join(lines) + "\n"


def escape(text: str) -> str:
    """Text shown as itself in Markdown: every character Markdown reads escaped."""
    return _MARKDOWN.sub(r"\\\1", " ".join(text.split()))


def fenced(line: str) -> str:
    """One line in a code block whose fence no backtick run in it can close."""
    longest = max((len(run) for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{line}\n{fence}"


def _line_to_look_at(verdict: Mapping[str, Any]) -> str:
    evidence = verdict.get("evidence")
    text = evidence.get("text") if isinstance(evidence, dict) else None
    if not text:
        where = verdict.get("where")
        if isinstance(where, list | tuple) and where and isinstance(where[0], dict):
            text = where[0].get("text")
    if not isinstance(text, str):
        return ""
    one = "".join(ch if ch.isprintable() else " " for ch in redact_text(text)).strip()
    # The marker finds Theow's comment: a log line must not carry one in.
    return one.replace("<!--", "<! --")[:LINE_CHARS]


def post(
    redis: Any, api: ForgeAPI, job: HookedJob, verdict: Mapping[str, Any], console_url: str = ""
) -> list[str]:
    """Write the job's outcome into the comment of each of its pull requests; their numbers."""
    numbers = api.pull_requests(job)
    for number in numbers:
        _update_one(redis, api, job, number, entry(job, verdict), console_url)
    return numbers


def post_or_log(redis: Any, api: ForgeAPI, job: HookedJob, verdict: Mapping[str, Any]) -> None:
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


def _update_one(
    redis: Any, api: ForgeAPI, job: HookedJob, number: str, item: dict[str, str], console: str
) -> None:
    key = names.key_hook_pr(job.forge, job.repo, number)
    lock = redis.lock(
        names.key_hook_pr_lock(job.forge, job.repo, number),
        timeout=LOCK_TIMEOUT,
        blocking_timeout=LOCK_WAIT,
    )
    if not lock.acquire():
        raise TimeoutError(f"pull request {job.repo}#{number}: its comment lock stayed taken")
    try:
        redis.hset(key, f"job:{job.job}", json.dumps(item))
        redis.expire(key, names.HOOK_PR_TTL)
        stored = redis.hgetall(key)
        entries = [
            json.loads(value) for field, value in sorted(stored.items())
            if field.decode().startswith("job:")
        ]  # fmt: skip
        body = render(entries, console)
        known = stored.get(b"comment")
        comment_id = known.decode() if known else None
        if comment_id is None:
            found = api.find_comment(job, number, MARKER)
            comment_id = found.id if found else None
        if comment_id is None:
            comment_id = api.create_comment(job, number, body).id
            log.info("%s#%s: comment %s made", job.repo, number, comment_id)
        else:
            try:
                api.update_comment(job, number, comment_id, body)
                log.info("%s#%s: comment %s updated", job.repo, number, comment_id)
            except ForgeError as exc:
                if exc.status != 404:
                    raise
                comment_id = api.create_comment(job, number, body).id  # someone deleted it
                log.info("%s#%s: comment %s made again", job.repo, number, comment_id)
        redis.hset(key, "comment", comment_id)
    finally:
        with contextlib.suppress(LockError):
            lock.release()
