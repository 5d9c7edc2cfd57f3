"""Where a run ran: repository, commit, branch, pull request and attempt, from the CI's own variables.

Theow keeps a ledger of job runs, passed and failed, to say whose a failure is
(this change, a broken default branch, a flaky test, the infrastructure).
``theow-client run`` reads where it runs from the CI system's environment:

============== ============================================================
GitHub Actions ``GITHUB_REPOSITORY``, ``GITHUB_SHA`` (a pull request's head
               sha from ``GITHUB_EVENT_PATH``), ``GITHUB_HEAD_REF`` or
               ``GITHUB_REF_NAME``, the pull request from ``GITHUB_REF``
               (``refs/pull/N/merge``), its base sha and the default branch
               from the event file, ``GITHUB_RUN_ATTEMPT``, ``GITHUB_RUN_ID``
GitLab CI      ``CI_PROJECT_PATH``, ``CI_COMMIT_SHA``,
               ``CI_MERGE_REQUEST_SOURCE_BRANCH_NAME`` or
               ``CI_COMMIT_REF_NAME``, ``CI_MERGE_REQUEST_IID``,
               ``CI_MERGE_REQUEST_DIFF_BASE_SHA``, ``CI_DEFAULT_BRANCH``,
               ``CI_JOB_ID`` (a retried job is a new job; its attempt is 1)
Buildkite      ``BUILDKITE_REPO`` (else ``BUILDKITE_ORGANIZATION_SLUG`` /
               ``BUILDKITE_PIPELINE_SLUG``), ``BUILDKITE_COMMIT``,
               ``BUILDKITE_BRANCH``, ``BUILDKITE_PULL_REQUEST``,
               ``BUILDKITE_PIPELINE_DEFAULT_BRANCH``, ``BUILDKITE_RETRY_COUNT``
               (+1), ``BUILDKITE_JOB_ID``
Jenkins        ``GIT_URL``, ``GIT_COMMIT``, ``CHANGE_BRANCH``, ``BRANCH_NAME`` or
               ``GIT_BRANCH``, ``CHANGE_ID``, ``BRANCH_IS_PRIMARY``,
               ``BUILD_NUMBER``
============== ============================================================

``--repo --branch --sha --pr --base-sha --attempt`` (and ``THEOW_RUN_REPO``,
``THEOW_RUN_BRANCH``, ``THEOW_RUN_SHA``, ``THEOW_RUN_PR``,
``THEOW_RUN_BASE_SHA``, ``THEOW_RUN_ATTEMPT``, ``THEOW_RUN_ID``) override them,
flags first. A run needs a repository, a branch and a sha; without them
(outside CI, with nothing given) there is no ledger row and everything else
works as before. Every value is bounded and checked: a sha is 7 to 64 hex
digits, an attempt 1 to 1000, a name at most 200 printable characters.

>>> env = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "o/r", "GITHUB_SHA": "a" * 40,
...        "GITHUB_REF": "refs/heads/main", "GITHUB_REF_NAME": "main", "GITHUB_RUN_ID": "9",
...        "GITHUB_RUN_ATTEMPT": "2"}
>>> where = ci_run(env, job="github:o/r/CI/test")
>>> where.repo, where.branch, where.attempt, where.pr
('o/r', 'main', 2, None)
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from theow_client.jsontypes import JsonObject

MAX_NAME = 200
MAX_ATTEMPT = 1000
MAX_EVENT_BYTES = 4 * 1024 * 1024  # a push event listing many commits is large; no PR's is
SHA = re.compile(r"[0-9a-fA-F]{7,64}\Z")
PR = re.compile(r"[0-9]{1,12}\Z")
RUN_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}\Z")
PULL_REF = re.compile(r"refs/pull/([0-9]{1,12})/(?:merge|head)\Z")
# owner/name (GitLab: group/subgroup/name): a clone URL's path, ".git" dropped.
REPO_PATH = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+\Z")

# The overrides: flag name -> variable.
OVERRIDES = {
    "repo": "THEOW_RUN_REPO",
    "branch": "THEOW_RUN_BRANCH",
    "sha": "THEOW_RUN_SHA",
    "pr": "THEOW_RUN_PR",
    "base_sha": "THEOW_RUN_BASE_SHA",
    "attempt": "THEOW_RUN_ATTEMPT",
    "id": "THEOW_RUN_ID",
}


class RunValueError(ValueError):
    """A run value that cannot be right; the message names it and where it came from."""


@dataclass(frozen=True)
class CiRun:
    """Where one job run ran. ``id`` is the same for every report of one CI job attempt."""

    id: str
    repo: str
    branch: str
    sha: str
    attempt: int = 1
    pr: str | None = None
    base_sha: str | None = None
    default_branch: str | None = None  # when the CI system says which branch is the default
    provider: str = "manual"

    def fact(self, started_at: float | None, finished_at: float) -> JsonObject:
        """The ``run`` fact a failure carries, and the body of a passed run's record."""
        fact: JsonObject = {
            "id": self.id,
            "repo": self.repo,
            "branch": self.branch,
            "sha": self.sha,
            "attempt": self.attempt,
            "pr": self.pr,
            "base_sha": self.base_sha,
            "default_branch": self.default_branch,
            "provider": self.provider,
            "started_at": started_at,
            "finished_at": finished_at,
        }
        return {name: value for name, value in fact.items() if value is not None}


# Checking each value, with where it came from in the message.


def name(value: object, what: str) -> str:
    """A repository or branch name: one printable line of at most ``MAX_NAME`` characters."""
    text = str(value).strip() if isinstance(value, str | int) else ""
    if not text or len(text) > MAX_NAME or not text.isprintable():
        raise RunValueError(f"{what}: {_shown(value)} is not a name of 1 to {MAX_NAME} characters")
    return text


def sha(value: object, what: str) -> str:
    text = str(value).strip() if isinstance(value, str) else ""
    if not SHA.match(text):
        raise RunValueError(f"{what}: {_shown(value)} is not a commit sha (7 to 64 hex digits)")
    return text.lower()


def attempt(value: object, what: str) -> int:
    try:
        number = int(str(value).strip()) if isinstance(value, str | int) else 0
    except ValueError:
        number = 0
    if isinstance(value, bool) or not 1 <= number <= MAX_ATTEMPT:
        raise RunValueError(f"{what}: {_shown(value)} is not an attempt from 1 to {MAX_ATTEMPT}")
    return number


def pr(value: object, what: str) -> str:
    text = str(value).strip().lstrip("#") if isinstance(value, str | int) else ""
    if not PR.match(text) or int(text) == 0:
        raise RunValueError(f"{what}: {_shown(value)} is not a pull request number")
    return str(int(text))


def run_id(value: object, what: str) -> str:
    text = str(value).strip() if isinstance(value, str) else ""
    if not RUN_ID.match(text):
        raise RunValueError(
            f"{what}: {_shown(value)} is not a run id (1 to 64 of A-Z a-z 0-9 . _ : -)"
        )
    return text


def _shown(value: object) -> str:
    return repr(value)[:80]


CHECKS: dict[str, Callable[[object, str], object]] = {
    "repo": name,
    "branch": name,
    "sha": sha,
    "pr": pr,
    "base_sha": sha,
    "attempt": attempt,
    "id": run_id,
    "default_branch": name,
}


# Reading each CI system.


def _branch(ref: str) -> str:
    for prefix in ("refs/heads/", "origin/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    return ref


def _repo_of_url(url: str) -> str:
    """``acme/api`` of ``git@github.com:acme/api.git`` or ``https://host/acme/api.git``."""
    url = url.strip().removesuffix("/").removesuffix(".git")
    if "://" in url:
        path = urlsplit(url).path
    elif ":" in url:  # scp-like: git@host:owner/name
        path = url.partition(":")[2]
    else:
        return ""
    path = path.strip("/")
    return path if REPO_PATH.match(path) else ""


def read_event(path: str) -> JsonObject:
    """GitHub's event payload at ``path``: at most ``MAX_EVENT_BYTES``, else nothing."""
    try:
        file = Path(path)
        if not path or not file.is_file() or file.stat().st_size > MAX_EVENT_BYTES:
            return {}
        event = json.loads(file.read_bytes()[:MAX_EVENT_BYTES])
    except (OSError, ValueError, RecursionError):
        return {}
    return event if isinstance(event, dict) else {}


def _at(data: object, *path: str) -> str:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return str(data) if isinstance(data, str | int) and not isinstance(data, bool) else ""


def github(env: Mapping[str, str], event: Callable[[str], JsonObject]) -> dict[str, str]:
    payload = event(env.get("GITHUB_EVENT_PATH", ""))
    ref = env.get("GITHUB_REF", "")
    pull = PULL_REF.match(ref)
    return {
        "repo": env.get("GITHUB_REPOSITORY", ""),
        # A pull request's GITHUB_SHA is a merge commit made for the run; its head is the change.
        "sha": _at(payload, "pull_request", "head", "sha") or env.get("GITHUB_SHA", ""),
        "branch": env.get("GITHUB_HEAD_REF", "") or env.get("GITHUB_REF_NAME", "") or _branch(ref),
        "pr": pull.group(1) if pull else _at(payload, "pull_request", "number"),
        "base_sha": _at(payload, "pull_request", "base", "sha"),
        "attempt": env.get("GITHUB_RUN_ATTEMPT", ""),
        "default_branch": _at(payload, "repository", "default_branch"),
        "ci_id": env.get("GITHUB_RUN_ID", ""),
    }


def gitlab(env: Mapping[str, str], _: Callable[[str], JsonObject]) -> dict[str, str]:
    return {
        "repo": env.get("CI_PROJECT_PATH", ""),
        "sha": env.get("CI_COMMIT_SHA", ""),
        "branch": env.get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME", "")
        or env.get("CI_COMMIT_REF_NAME", ""),
        "pr": env.get("CI_MERGE_REQUEST_IID", ""),
        "base_sha": env.get("CI_MERGE_REQUEST_DIFF_BASE_SHA", ""),
        "default_branch": env.get("CI_DEFAULT_BRANCH", ""),
        "ci_id": env.get("CI_JOB_ID", ""),
    }


def buildkite(env: Mapping[str, str], _: Callable[[str], JsonObject]) -> dict[str, str]:
    slugs = [env.get("BUILDKITE_ORGANIZATION_SLUG", ""), env.get("BUILDKITE_PIPELINE_SLUG", "")]
    retries = env.get("BUILDKITE_RETRY_COUNT", "").strip()
    number = env.get("BUILDKITE_PULL_REQUEST", "")
    return {
        "repo": _repo_of_url(env.get("BUILDKITE_REPO", ""))
        or ("/".join(slugs) if all(slugs) else ""),
        "sha": env.get("BUILDKITE_COMMIT", ""),
        "branch": env.get("BUILDKITE_BRANCH", ""),
        "pr": "" if number == "false" else number,
        "attempt": str(int(retries) + 1) if retries.isascii() and retries.isdigit() else "",
        "default_branch": env.get("BUILDKITE_PIPELINE_DEFAULT_BRANCH", ""),
        "ci_id": env.get("BUILDKITE_JOB_ID", ""),
    }


def jenkins(env: Mapping[str, str], _: Callable[[str], JsonObject]) -> dict[str, str]:
    branch = (
        env.get("CHANGE_BRANCH", "")
        or env.get("BRANCH_NAME", "")
        or _branch(env.get("GIT_BRANCH", ""))
    )
    build = env.get("BUILD_NUMBER", "")
    return {
        "repo": _repo_of_url(env.get("GIT_URL", "")),
        "sha": env.get("GIT_COMMIT", ""),
        "branch": branch,
        "pr": env.get("CHANGE_ID", ""),
        "default_branch": branch if env.get("BRANCH_IS_PRIMARY") == "true" else "",
        "ci_id": f"{env.get('JOB_NAME', '')}#{build}" if build else "",
    }


# (provider, the variable that says the run is in it, its reader)
PROVIDERS: tuple[
    tuple[str, str, Callable[[Mapping[str, str], Callable[[str], JsonObject]], dict[str, str]]], ...
] = (
    ("github", "GITHUB_ACTIONS", github),
    ("gitlab", "GITLAB_CI", gitlab),
    ("buildkite", "BUILDKITE", buildkite),
    ("jenkins", "JENKINS_URL", jenkins),
)


def ci_run(
    env: Mapping[str, str],
    *,
    job: str | None,
    flags: Mapping[str, object] | None = None,
    event: Callable[[str], JsonObject] = read_event,
    warn: Callable[[str], None] | None = None,
) -> CiRun | None:
    """Where this run ran, or None when no repository, branch and sha are known.

    ``flags`` (``--repo`` ...) raise RunValueError for a bad value: the caller's
    usage error. A bad value from the CI or a ``THEOW_RUN_*`` variable is left
    out with a warning (``warn``): the fleet's environment never fails a build.
    """
    provider, read = "manual", None
    for system, marker, reader in PROVIDERS:
        if env.get(marker, "").strip():
            provider, read = system, reader
            break
    found: dict[str, str] = read(env, event) if read is not None else {}
    values: dict[str, object] = {}
    for field, raw in found.items():
        if field in CHECKS and raw.strip():
            _take(values, field, raw, f"{provider}'s variables ({field})", warn)
    for field, variable in OVERRIDES.items():
        raw = env.get(variable, "")
        if raw.strip():
            _take(values, field, raw, variable, warn)
    for field, given in (flags or {}).items():
        if given is not None and str(given).strip():
            values[field] = CHECKS[field](given, f"--{field.replace('_', '-')}")  # raises
    if not all(field in values for field in ("repo", "branch", "sha")):
        return None
    where = CiRun(
        id="",
        repo=str(values["repo"]),
        branch=str(values["branch"]),
        sha=str(values["sha"]),
        attempt=int(str(values.get("attempt", 1))),
        pr=str(values["pr"]) if "pr" in values else None,
        base_sha=str(values["base_sha"]) if "base_sha" in values else None,
        default_branch=str(values["default_branch"]) if "default_branch" in values else None,
        provider=provider,
    )
    given_id = values.get("id")
    return replace(where, id=str(given_id) if given_id else _id(where, found.get("ci_id", ""), job))


def _take(
    values: dict[str, object], field: str, raw: str, what: str, warn: Callable[[str], None] | None
) -> None:
    try:
        values[field] = CHECKS[field](raw, what)
    except RunValueError as exc:
        values.pop(field, None)
        if warn is not None:
            warn(f"{exc}; left out of the run's record")


def _id(where: CiRun, ci_id: str, job: str | None) -> str:
    """The same id for every report of one CI job attempt (each step, pass or fail); a
    fresh one when the CI names no run of its own."""
    if not ci_id.strip():
        return uuid.uuid4().hex
    return run_id_of(where.provider, ci_id, job or "", where.attempt, where.repo)


def run_id_of(provider: str, ci_id: str, job: str, attempt: int, repo: str) -> str:
    """A CI job attempt's run id, as the client and a forge's webhook both derive it: the same
    run, reported by both, is one run of the ledger (``ci_id``: GitHub's workflow run id,
    GitLab's job id; ``attempt``: GitHub's run attempt, 1 on GitLab, where a retry is a job
    of its own).

    >>> run_id_of("github", "9", "github:o/r/CI/test", 2, "o/r")
    'd17f437c1fc42aa3432d8a258426fb74'
    """
    basis = json.dumps([provider, ci_id.strip(), job, attempt, repo])
    return hashlib.sha256(basis.encode()).hexdigest()[:32]


def rerun_of(where: CiRun) -> CiRun:
    """The run of the client's own re-run of ``where`` (``run --retries``): a run of its own,
    the next attempt under its own id, so a re-run that passes is a passed run beside the
    failed one (a failure whose commit passed on a retry: flaky), not a report of it.

    >>> again = rerun_of(CiRun(id="d17f437c", repo="o/r", branch="main", sha="ab" * 20))
    >>> again.attempt, again.id
    (2, '94bce05da01107dad9cd0c99f7ab1797')
    """
    basis = json.dumps(["rerun", where.id])
    fresh = hashlib.sha256(basis.encode()).hexdigest()[:32]
    return replace(where, id=fresh, attempt=min(where.attempt + 1, MAX_ATTEMPT))


EARLIEST = 946684800.0  # 2000-01-01: a time before it is no run's
MAX_AHEAD = 86400.0  # a clock a day fast is still believed; further is not a time


def when(value: object, what: str, now: float) -> float:
    """A time in seconds since the epoch, between 2000 and a day from ``now``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunValueError(f"{what}: {_shown(value)} is not a time in seconds since the epoch")
    if not EARLIEST <= float(value) <= now + MAX_AHEAD:
        raise RunValueError(f"{what}: {_shown(value)} is not a time this run could have had")
    return float(value)


@dataclass(frozen=True)
class RunFact:
    """A ``run`` object as a failure's facts, ``theow.run`` or the intake carry it, checked."""

    where: CiRun
    finished_at: float
    started_at: float | None = None

    @classmethod
    def from_wire(cls, fact: object, now: float, what: str = "run") -> RunFact:
        """The run; RunValueError names the first field that is wrong."""
        if not isinstance(fact, dict):
            raise RunValueError(f"{what}: a JSON object, not {type(fact).__name__}")
        values: dict[str, object] = {}
        for field in ("id", "repo", "branch", "sha"):
            if field not in fact:
                raise RunValueError(f"{what}.{field}: missing")
        for field, check in CHECKS.items():
            if fact.get(field) is not None:
                values[field] = check(fact[field], f"{what}.{field}")
        provider = fact.get("provider")
        finished = fact.get("finished_at")
        finished_at = when(finished, f"{what}.finished_at", now) if finished is not None else now
        started = fact.get("started_at")
        started_at = when(started, f"{what}.started_at", now) if started is not None else None
        if started_at is not None and started_at > finished_at:
            raise RunValueError(f"{what}.started_at: after finished_at")
        where = CiRun(
            id=str(values["id"]),
            repo=str(values["repo"]),
            branch=str(values["branch"]),
            sha=str(values["sha"]),
            attempt=int(str(values.get("attempt", 1))),
            pr=str(values["pr"]) if "pr" in values else None,
            base_sha=str(values["base_sha"]) if "base_sha" in values else None,
            default_branch=str(values["default_branch"]) if "default_branch" in values else None,
            provider=provider if isinstance(provider, str) and provider.isalnum() else "manual",
        )
        return cls(where, finished_at, started_at)

    def to_wire(self) -> JsonObject:
        return self.where.fact(self.started_at, self.finished_at)
