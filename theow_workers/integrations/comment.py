"""What Theow's pull-request comment says: each failed job, grouped by whose failure it is.

One entry per job (:func:`entry`, kept in Redis by ``feedback``); :func:`render`
writes the whole comment from them. When the workers know the jobs' history,
the failed jobs are grouped as a team used to Dr. CI or Trunk reads them, the
question being "is it mine?":

1. **Probably caused by this change**: the ones to fix here;
2. **Broken on main**: the default branch fails the same way, with the commit
   that broke it (linked to the forge) and, once main passes again, the one
   that fixed it;
3. **Flaky**: passed on a retry of the same commit, or fails now and then, with
   the share of runs that flip;
4. **Infrastructure**: the runner, the network, a registry;
5. **Origin unknown**: too little history to say.

Without any origin (a deployment that keeps no history), the jobs are one list.

Every text in the comment came from a build log or a webhook: the line shown is
masked (``theow_client.redact``), cut to one bounded line and fenced with a
fence longer than any backtick run in it; names and reasons are
Markdown-escaped; a commit is linked only when it is a commit id
(``theow_client.origin``) and the job's own https URL names the repository.

>>> item = {"name": "test", "workflow": "CI", "status": "unexplained", "origin": "flaky",
...         "flip_rate": "0.18", "origin_reason": "passed on the same commit"}
>>> print(render([item]))
<!-- theow -->
### Theow: failed jobs of this pull request
<BLANKLINE>
#### Flaky: retry them (1)
<BLANKLINE>
- **CI / test**: unexplained · flips 18% of runs · passed on the same commit
<BLANKLINE>
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from theow_client.jsontypes import Json
from theow_client.origin import MAX_REASON_CHARS, Origin, OriginKind, percent, short_sha
from theow_client.redact import redact_text
from theow_workers.integrations.hooks import HookedJob

MARKER = "<!-- theow -->"
LINE_CHARS = 300
MAX_JOBS_SHOWN = 50
MAX_TESTS_SHOWN = 10  # failed tests listed under a job; the job's page has them all
ZWSP = "\u200b"
# Where GitHub and GitLab start a mention or an autolink: broken by a zero-width space.
_AUTOLINK = re.compile(r"@|:(?=//)|(?i:www)(?=\\\.)")  # after escaping: www\.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~])")
# A job URL's scheme, host and path up to the repository: where its commits are.
_FORGE_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%+-]+)*/")

# The groups in the order a developer reads them, with their headings.
GROUPS: tuple[tuple[str, str], ...] = (
    (OriginKind.CHANGE, "Probably caused by this change"),
    (OriginKind.MAIN, "Broken on main, not by this change"),
    (OriginKind.FLAKY, "Flaky: retry them"),
    (OriginKind.INFRA, "Infrastructure"),
    (OriginKind.UNKNOWN, "Origin unknown"),
)
# The entry's fields that say its origin (``origin_fields``), rewritten when it is revised.
ORIGIN_FIELDS = ("origin", "culprit", "fixed_by", "flip_rate", "origin_reason")


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
        "attempt": str(attempt_number(job)),
        "commits_url": commits_url(job),
        **origin_fields(verdict.get("origin")),
    }


def origin_fields(origin: object) -> dict[str, str]:
    """A verdict's ``origin`` as the entry keeps it (validated, text); all empty without one.

    >>> origin_fields({"origin": "main", "culprit": "not a sha", "reason": "a\\n::b"})
    {'origin': 'main', 'culprit': '', 'fixed_by': '', 'flip_rate': '', 'origin_reason': 'a ::b'}
    """
    found = Origin.from_dict(origin)
    if found is None:
        return dict.fromkeys(ORIGIN_FIELDS, "")
    return {
        "origin": str(found.origin),
        "culprit": found.culprit or "",
        "fixed_by": found.fixed_by or "",
        "flip_rate": "" if found.flip_rate is None else repr(found.flip_rate),
        "origin_reason": found.reason,
    }


def commits_url(job: HookedJob) -> str:
    """Where the job's repository shows a commit (``…/commit/``), from the job's own URL; or ''.

    >>> class J: forge, repo, url = "github", "o/r", "https://github.com/o/r/actions/runs/1/job/2"
    >>> commits_url(J())
    'https://github.com/o/r/commit/'
    """
    marker = f"/{job.repo}/"
    if not job.repo or marker not in job.url:
        return ""
    base = job.url[: job.url.index(marker) + len(marker)]
    if not _FORGE_URL.fullmatch(base):
        return ""
    return base + ("-/commit/" if job.forge == "gitlab" else "commit/")


def render(entries: list[dict[str, str]], console_url: str = "") -> str:
    """The comment's Markdown: the marker, then each failed job, grouped by origin if known."""
    lines = [MARKER, "### Theow: failed jobs of this pull request", ""]
    if not any(item.get("origin") for item in entries):
        lines += [line for item in entries[:MAX_JOBS_SHOWN] for line in _job(item, console_url)]
    else:
        grouped = {kind: [item for item in entries if _group(item) == kind] for kind, _ in GROUPS}
        shown = 0
        for kind, heading in GROUPS:
            items = grouped[kind][: max(0, MAX_JOBS_SHOWN - shown)]
            if not items:
                continue
            shown += len(items)
            lines += [f"#### {heading} ({len(grouped[kind])})", ""]
            lines += [line for item in items for line in _job(item, console_url)]
            lines.append("")
        if lines[-1] == "":
            lines.pop()
    if len(entries) > MAX_JOBS_SHOWN:
        lines.append(f"- … and {len(entries) - MAX_JOBS_SHOWN} more")
    return "\n".join(lines) + "\n"


def _group(item: Mapping[str, str]) -> str:
    """The group an entry is shown in: its origin; an origin this worker does not know, unknown."""
    origin = item.get("origin", "")
    return origin if any(origin == kind for kind, _ in GROUPS) else OriginKind.UNKNOWN


def _job(item: Mapping[str, str], console_url: str) -> list[str]:
    """One job's lines: its name, what was decided, whose failure it is, the line and tests."""
    name = escape(" / ".join(p for p in (item.get("workflow"), item.get("name")) if p))
    title = _linked(name, item.get("url", ""))
    rule = item.get("rule")
    said = f"rule `{rule}` ({escape(item.get('status', ''))})" if rule else "unexplained"
    link = ""
    if console_url and item.get("failure_id"):
        link = f" · [console]({console_url.rstrip('/')}/failures/{item['failure_id']})"
    origin = _origin_said(item)
    passed = str(item.get("passed") or "")
    if passed.isdigit():  # fixed since: the verdict struck, the line no longer to look at
        again = _linked(f"passed on attempt {passed}", item.get("passed_url", ""))
        return [f"- **{title}**: ~~{said}~~ {again}{origin}{link}"]
    lines = [f"- **{title}**: {said}{origin}{link}"]
    if item.get("line"):
        lines += [f"  {block}" for block in fenced(item["line"]).splitlines()]
    if item.get("tests"):
        tests = str(item["tests"]).splitlines()[: MAX_TESTS_SHOWN + 1]
        lines += ["  Failed tests:", *(f"  {block}" for block in fenced(*tests).splitlines())]
    return lines


def _origin_said(item: Mapping[str, str]) -> str:
    """`` · since abc1234`` (linked), `` · flips 18% of runs · <reason>``: the group's detail."""
    origin = item.get("origin", "")
    if not origin:
        return ""
    parts: list[str] = []
    if origin == OriginKind.MAIN:
        culprit, fixed = item.get("culprit", ""), item.get("fixed_by", "")
        base = item.get("commits_url", "")
        if culprit:
            parts.append(f"broken by {_commit(culprit, base)}")
        if fixed:
            parts.append(f"fixed on main by {_commit(fixed, base)}: update this branch")
        if not parts:
            parts.append(_reason(item))
    else:
        rate = _rate(item.get("flip_rate", ""))
        if origin == OriginKind.FLAKY and rate is not None:
            parts.append(f"flips {percent(rate)} of runs")
        parts.append(_reason(item))
        if _group(item) != origin:  # from a newer worker: its word, shown as text
            parts.insert(0, f"origin {escape(origin)}")
    return "".join(f" · {part}" for part in parts if part)


def _commit(sha: str, base: str) -> str:
    """A short sha, linked to the forge's page of the commit when its URL is known."""
    short = escape(short_sha(sha))
    return f"[{short}]({base}{sha})" if _FORGE_URL.fullmatch(base) else f"`{short}`"


def _reason(item: Mapping[str, str]) -> str:
    return escape(_shown(item.get("origin_reason", ""))[:MAX_REASON_CHARS])


def _rate(text: str) -> float | None:
    try:
        rate = float(text)
    except ValueError:
        return None
    return rate if 0.0 <= rate <= 1.0 else None


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


def attempt_number(job: HookedJob) -> int:
    """The run's attempt counted from 1 (GitLab counts retries from 0)."""
    return int(job.attempt) + (1 if job.forge == "gitlab" else 0)


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
