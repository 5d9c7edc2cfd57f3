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

Every text in the comment came from a build log or a webhook: the line shown is
masked (``theow_client.redact``), cut to one bounded line and fenced with a
fence longer than any backtick run in it; names are Markdown-escaped. A job whose
failure came with a test report lists its failed tests by name (at most
``MAX_TESTS_SHOWN``, each one such line) in one more fenced block.

Posted by a worker after the verdict, never by the agent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Mapping

from redis import Redis
from redis.exceptions import LockError

from theow_client import names
from theow_client.jsontypes import Json
from theow_client.redact import redact_text
from theow_workers.adapters.forges import ForgeAPI, ForgeError, ForgeUnavailable
from theow_workers.integrations.hooks import HookedJob

log = logging.getLogger("theow.hooks")

MARKER = "<!-- theow -->"
LINE_CHARS = 300
MAX_JOBS_SHOWN = 50
MAX_TESTS_SHOWN = 10  # failed tests listed under a job; the job's page has them all
LOCK_TIMEOUT = 120
LOCK_WAIT = 60.0
ZWSP = "\u200b"
# Where GitHub and GitLab start a mention or an autolink: broken by a zero-width space.
_AUTOLINK = re.compile(r"@|:(?=//)|(?i:www)(?=\\\.)")  # after escaping: www\.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~])")


def entry(job: HookedJob, verdict: Mapping[str, Json]) -> dict[str, str]:
    """What the comment says of one failed job (bounded, masked)."""
    return {
        "name": job.name,
        "workflow": job.workflow,
        "url": job.url,
        "status": str(verdict.get("status") or ""),
        "rule": str(verdict.get("rule") or ""),
        "line": _line_to_look_at(verdict),
        "tests": "\n".join(_failed_tests(verdict)),
        "failure_id": str(verdict.get("failure_id") or ""),
        "head_sha": job.head_sha,
        "attempt": str(_attempt(job)),
    }


def render(entries: list[dict[str, str]], console_url: str = "") -> str:
    """The comment's Markdown: the marker, then each failed job (by job key)."""
    lines = [MARKER, "### Theow: failed jobs of this pull request", ""]
    for item in entries[:MAX_JOBS_SHOWN]:
        name = escape(" / ".join(p for p in (item.get("workflow"), item.get("name")) if p))
        title = _linked(name, item.get("url", ""))
        rule = item.get("rule")
        said = f"rule `{rule}` ({escape(item.get('status', ''))})" if rule else "unexplained"
        link = ""
        if console_url and item.get("failure_id"):
            link = f" · [console]({console_url.rstrip('/')}/failures/{item['failure_id']})"
        passed = str(item.get("passed") or "")
        if passed.isdigit():  # fixed since: the verdict struck, the line no longer to look at
            again = _linked(f"passed on attempt {passed}", item.get("passed_url", ""))
            lines.append(f"- **{title}**: ~~{said}~~ {again}{link}")
            continue
        lines.append(f"- **{title}**: {said}{link}")
        if item.get("line"):
            lines += [f"  {block}" for block in fenced(item["line"]).splitlines()]
        if item.get("tests"):
            tests = str(item["tests"]).splitlines()[: MAX_TESTS_SHOWN + 1]
            lines += ["  Failed tests:", *(f"  {block}" for block in fenced(*tests).splitlines())]
    if len(entries) > MAX_JOBS_SHOWN:
        lines.append(f"- … and {len(entries) - MAX_JOBS_SHOWN} more")
    return "\n".join(lines) + "\n"


def _linked(text: str, url: str) -> str:
    return f"[{text}]({url})" if url.startswith("https://") and ")" not in url else text


def escape(text: str) -> str:
    """Text shown as itself in Markdown: every character Markdown reads escaped.

    Job and workflow names come from a workflow file a fork's pull request may
    write: a zero-width space after ``@`` and inside ``://`` and ``www.`` keeps
    a name from mentioning anyone (``@org/team``) or becoming a link.
    """
    escaped = _MARKDOWN.sub(r"\\\1", " ".join(text.split()))
    return _AUTOLINK.sub(lambda m: m[0] + ZWSP, escaped)


def fenced(*lines: str) -> str:
    """Lines in a code block whose fence no backtick run in them can close."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([f"{fence}text", *lines, fence])


def _line_to_look_at(verdict: Mapping[str, Json]) -> str:
    evidence = verdict.get("evidence")
    text = evidence.get("text") if isinstance(evidence, dict) else None
    if not text:
        where = verdict.get("where")
        if isinstance(where, list | tuple) and where and isinstance(where[0], dict):
            text = where[0].get("text")
    return _shown(text) if isinstance(text, str) else ""


def _shown(text: str) -> str:
    """A text from the build as one masked, printable, bounded line of the comment."""
    one = " ".join("".join(ch if ch.isprintable() else " " for ch in redact_text(text)).split())
    # The marker finds Theow's comment: a log line must not carry one in.
    return one.replace("<!--", "<! --")[:LINE_CHARS]


def _failed_tests(verdict: Mapping[str, Json]) -> list[str]:
    """The verdict's failed tests, one line each (``file:line: name failed: message``).

    From its ``tests``; a verdict read back from the store has only its ``where`` lines,
    whose lines of the ``tests`` fact say the same of the first few.
    """
    tests = verdict.get("tests")
    shown: list[str] = []
    if isinstance(tests, list):
        for test in tests[: MAX_TESTS_SHOWN + 1]:
            if isinstance(test, dict) and isinstance(test.get("name"), str):
                file, line, message = test.get("file"), test.get("line"), test.get("message")
                place = f"{file}:{line}: " if file and line else f"{file}: " if file else ""
                said = f": {message}" if message else ""
                shown.append(_shown(f"{place}{test['name']} failed{said}"))
    else:
        where = verdict.get("where")
        for w in where if isinstance(where, list | tuple) else ():
            if isinstance(w, dict) and w.get("fact") == "tests" and isinstance(w.get("text"), str):
                shown.append(_shown(w["text"]))
    if len(shown) > MAX_TESTS_SHOWN:
        total = len(tests) if isinstance(tests, list) else len(shown)
        shown[MAX_TESTS_SHOWN:] = [f"… and {total - MAX_TESTS_SHOWN} more"]
    return [line for line in shown if line]


def post(
    redis: Redis, api: ForgeAPI, job: HookedJob, verdict: Mapping[str, Json], console_url: str = ""
) -> list[str]:
    """Write the job's outcome into the comment of each of its pull requests; their numbers."""
    numbers = api.pull_requests(job)
    item = entry(job, verdict)
    for number in numbers:
        _write(redis, api, job, number, lambda _: item, console_url, create=True)
    return numbers


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


def _attempt(job: HookedJob) -> int:
    """The run's attempt counted from 1 (GitLab counts retries from 0)."""
    return int(job.attempt) + (1 if job.forge == "gitlab" else 0)


def _fixed_by(item: Mapping[str, str], job: HookedJob) -> bool:
    """Whether ``job`` passing fixes the failure ``item`` records (not a stale delivery)."""
    if item.get("passed"):
        return False
    if item.get("head_sha") != job.head_sha:
        return True
    return str(item.get("attempt", "")).isdigit() and _attempt(job) > int(item["attempt"])


def _passed(old: dict[str, str] | None, job: HookedJob) -> dict[str, str] | None:
    if old is None or not _fixed_by(old, job):
        return None  # meanwhile failed again, or marked by another delivery
    return {**old, "passed": str(_attempt(job)), "passed_url": job.url}


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
