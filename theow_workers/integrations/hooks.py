"""What a forge's webhook says about a finished CI job, read once at the web process's edge.

GitHub sends ``workflow_job`` events (``X-GitHub-Event: workflow_job``,
``action: completed``) signed with ``X-Hub-Signature-256: sha256=<hex>``, the
HMAC-SHA256 of the raw body under the webhook secret; GitLab sends ``Job Hook``
events (``object_kind: build``) with the secret token in ``X-Gitlab-Token``.
Both are checked in constant time. Everything else in a delivery is
attacker-controlled text until the forge's API confirms it: every field kept is
bounded (``_text``) and nothing but the job's identity travels to the worker,
which reads the log itself, with its token, from the forge.

A job counts once however often it is delivered: ``HookedJob.key`` is the forge,
the repository, the job id and the run attempt (a redelivery has a new delivery
id; a re-run has a new attempt, and is a failure of its own).

>>> job = github_job({"action": "completed", "repository": {"full_name": "o/r"},
...     "workflow_job": {"id": 7, "run_id": 3, "run_attempt": 1, "name": "test",
...     "workflow_name": "CI", "conclusion": "failure", "head_sha": "abc"}})
>>> job.job, job.key, job.failed
('github:o/r/CI/test', 'github:o/r:7:1', True)
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import asdict, dataclass
from typing import Literal

from theow_client import names
from theow_client.job import MAX_JOB_CHARS
from theow_client.jsontypes import JsonObject

Forge = Literal["github", "gitlab"]
FORGES: tuple[Forge, ...] = ("github", "gitlab")
# Agents the hooked failures are recorded under: names no token may have (TokenStore.add).
AGENT_NAMES: dict[Forge, str] = {forge: names.HOOK_AGENTS[forge] for forge in FORGES}
FIELD_CHARS = 200
URL_CHARS = 500
# What a completed job's conclusion means here; anything else (cancelled, skipped) is ignored.
FAILED = frozenset({"failure", "failed", "timed_out"})
PASSED = frozenset({"success"})
# Ids and attempts: ASCII digits only (str.isdigit() takes "²", which int() refuses).
NUMBER = re.compile(r"[0-9]{1,20}")


class NotAJob(ValueError):
    """A delivery that names no finished job Theow reads (the reason, for the log)."""


@dataclass(frozen=True)
class HookedJob:
    """One finished CI job as a webhook named it: the task's whole argument."""

    forge: Forge
    repo: str  # o/r on GitHub, group/project on GitLab
    project_id: str  # GitLab's numeric project id; the repository again on GitHub
    job_id: str
    attempt: str
    workflow: str
    name: str
    conclusion: str  # failure | success (GitHub's words; GitLab's failed/success mapped)
    head_sha: str
    run_id: str
    url: str
    # "yes" when the job ran on the repository's default branch: only such a passing run
    # teaches the job's normal (a fork's pull request runs whatever its workflow says).
    default_branch: str = ""
    # Where it ran, for the ledger of runs: its branch, the repository's default branch,
    # and (GitLab merge request pipelines) the merge request and its base commit.
    branch: str = ""
    repo_default_branch: str = ""
    pr: str = ""
    base_sha: str = ""

    @property
    def job(self) -> str:
        """The job key the client derives for the same job (``theow_client.job``)."""
        parts = [self.repo, self.workflow, self.name] if self.workflow else [self.repo, self.name]
        return f"{self.forge}:{'/'.join(parts)}"[:MAX_JOB_CHARS]

    @property
    def key(self) -> str:
        """The same job's deliveries, duplicated or replayed, all have this key."""
        return f"{self.forge}:{self.repo}:{self.job_id}:{self.attempt}"

    @property
    def failed(self) -> bool:
        return self.conclusion in FAILED

    @property
    def agent(self) -> str:
        return AGENT_NAMES[self.forge]

    def facts(self, log: str) -> JsonObject:
        """The submission's facts: the log and where it came from, as the client names them."""
        return {
            "log": log,
            "job": self.job,
            "repo": self.repo,
            "job_name": self.name,
            "workflow": self.workflow,
            "head_sha": self.head_sha,
            "run_id": self.run_id,
            "run_attempt": self.attempt,
            "job_id": self.job_id,
            "url": self.url,
            "forge": self.forge,
        }

    def to_wire(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_wire(cls, payload: object) -> HookedJob:
        if not isinstance(payload, dict) or payload.get("forge") not in FORGES:
            raise NotAJob(f"not a hooked job: {str(payload)[:200]!r}")
        fields = {name: _text(payload.get(name), URL_CHARS) for name in cls.__dataclass_fields__}
        return cls(**fields)  # type: ignore[arg-type]  # forge checked above


def github_signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    """Whether ``X-Hub-Signature-256`` is ``sha256=`` and the body's HMAC under ``secret``."""
    if not secret or not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode("utf-8", "replace"))


def gitlab_token_ok(secret: str, header: str | None) -> bool:
    """Whether ``X-Gitlab-Token`` is the webhook's secret token."""
    if not secret or header is None:
        return False
    return hmac.compare_digest(secret.encode(), header.encode("utf-8", "replace"))


def github_job(event: object) -> HookedJob:
    """The job of a ``workflow_job`` delivery; NotAJob for any other action or shape."""
    if not isinstance(event, dict) or event.get("action") != "completed":
        raise NotAJob("not a completed workflow_job")
    job, repo = event.get("workflow_job"), event.get("repository")
    if not isinstance(job, dict) or not isinstance(repo, dict):
        raise NotAJob("workflow_job or repository missing")
    return _checked(
        HookedJob(
            forge="github",
            repo=_text(repo.get("full_name")),
            project_id=_text(repo.get("full_name")),
            job_id=_text(job.get("id")),
            attempt=_text(job.get("run_attempt") or 1),
            workflow=_text(job.get("workflow_name")),
            name=_text(job.get("name")),
            conclusion=_text(job.get("conclusion")),
            head_sha=_text(job.get("head_sha")),
            run_id=_text(job.get("run_id")),
            url=_text(job.get("html_url"), URL_CHARS),
            default_branch=_same_branch(job.get("head_branch"), repo.get("default_branch")),
            branch=_text(job.get("head_branch")),
            repo_default_branch=_text(repo.get("default_branch")),
        )
    )


GITLAB_CONCLUSIONS = {"failed": "failure", "success": "success"}


def gitlab_job(event: object) -> HookedJob:
    """The job of a Job Hook delivery (``object_kind: build``) that finished."""
    if not isinstance(event, dict) or event.get("object_kind") != "build":
        raise NotAJob("not a job event")
    status = GITLAB_CONCLUSIONS.get(str(event.get("build_status")))
    if status is None:
        raise NotAJob(f"job not finished: {_text(event.get('build_status'))}")
    if status == "failure" and event.get("build_allow_failure") is True:
        raise NotAJob("the job may fail")
    project = event.get("project") if isinstance(event.get("project"), dict) else {}
    assert isinstance(project, dict)
    project_id = _text(event.get("project_id"))
    if not NUMBER.fullmatch(project_id) or _text(project.get("id")) != project_id:
        raise NotAJob("project_id must be a number, the project's id")
    path = project.get("path_with_namespace") or event.get("project_name")
    web = _text(project.get("web_url"), URL_CHARS)
    job_id = _text(event.get("build_id"))
    merge = event.get("merge_request") if isinstance(event.get("merge_request"), dict) else {}
    assert isinstance(merge, dict)
    return _checked(
        HookedJob(
            forge="gitlab",
            repo=_text(path),
            project_id=project_id,
            job_id=job_id,
            attempt=_text(event.get("retries_count") or 0),
            workflow="",
            name=_text(event.get("build_name")),
            conclusion=status,
            head_sha=_text(event.get("sha")),
            run_id=_text(event.get("pipeline_id")),
            url=f"{web}/-/jobs/{job_id}" if web.startswith("https://") else "",
            default_branch=""
            if event.get("tag") is True
            else _same_branch(event.get("ref"), project.get("default_branch")),
            branch="" if event.get("tag") is True else _text(event.get("ref")),
            repo_default_branch=_text(project.get("default_branch")),
            pr=_number(merge.get("iid")),
        )
    )


@dataclass(frozen=True)
class HookedRun:
    """A ``workflow_run`` delivery: which pull requests a workflow run's jobs belong to."""

    repo: str
    run_id: str
    head_sha: str
    head_branch: str
    pr: str  # the first pull request of the head branch ("" for none)
    base_sha: str
    repo_default_branch: str

    def to_wire(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_wire(cls, payload: object) -> HookedRun:
        if not isinstance(payload, dict):
            raise NotAJob(f"not a hooked workflow run: {str(payload)[:200]!r}")
        return cls(**{name: _text(payload.get(name)) for name in cls.__dataclass_fields__})


def github_run(event: object) -> HookedRun:
    """The pull request of a ``workflow_run`` delivery; NotAJob when it names none."""
    if not isinstance(event, dict):
        raise NotAJob("not a workflow_run")
    run, repo = event.get("workflow_run"), event.get("repository")
    if not isinstance(run, dict) or not isinstance(repo, dict):
        raise NotAJob("workflow_run or repository missing")
    pulls = run.get("pull_requests")
    first = pulls[0] if isinstance(pulls, list) and pulls and isinstance(pulls[0], dict) else {}
    base = first.get("base") if isinstance(first.get("base"), dict) else {}
    found = HookedRun(
        repo=_text(repo.get("full_name")),
        run_id=_text(run.get("id")),
        head_sha=_text(run.get("head_sha")),
        head_branch=_text(run.get("head_branch")),
        pr=_number(first.get("number")),
        base_sha=_text(base.get("sha")) if isinstance(base, dict) else "",
        repo_default_branch=_text(repo.get("default_branch")),
    )
    if not found.repo or not NUMBER.fullmatch(found.run_id) or not found.pr:
        raise NotAJob("a workflow run of no pull request")
    return found


def _number(value: object) -> str:
    text = _text(value)
    return text if NUMBER.fullmatch(text) else ""


def repo_allowed(allowed: list[str], repo: str) -> bool:
    """Whether ``THEOW_HOOK_REPOS`` lets the repository's deliveries in (empty: any)."""
    return not allowed or repo.casefold() in {name.strip().casefold() for name in allowed}


def _same_branch(ref: object, default: object) -> str:
    """ "yes" when both are given and the ref is the default branch (not said: not it)."""
    return "yes" if isinstance(ref, str) and ref and ref == default else ""


def _checked(job: HookedJob) -> HookedJob:
    for name in ("repo", "project_id", "job_id", "name"):
        if not getattr(job, name):
            raise NotAJob(f"no {name}")
    if not NUMBER.fullmatch(job.job_id) or not NUMBER.fullmatch(job.attempt):
        raise NotAJob("job id and attempt must be numbers")
    if job.conclusion not in FAILED | PASSED:
        raise NotAJob(f"conclusion {job.conclusion!r} is neither a failure nor a success")
    return job


def _text(value: object, limit: int = FIELD_CHARS) -> str:
    """A delivery's field as one bounded line (no control characters)."""
    if value is None or isinstance(value, dict | list):
        return ""
    return "".join(ch for ch in str(value) if ch.isprintable()).strip()[:limit]
