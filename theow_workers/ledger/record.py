"""A run's ledger record from what each source says: checked, scoped and with its cause.

The repository a run is kept under is its verified scope: the repository
itself when the sender may speak for it (a token given ``--repo``, a forge's
webhook, the operator's replayed history), else ``<agent>@<repository>``, so
an agent's reports never enter another team's history (they could make its
pull requests' failures look like a broken default branch).

A failed run's **cause** is what says two failures are the same, keyed as
``theow history eval`` keys a history row (:func:`failure_cause`, with
``core.history.cause``): the matched rule and the error lines of its log with
volatile parts masked and error codes kept. Its **category** is the matched
rule's kind of cause, from its tags (:func:`category_of`), else ``infra`` when
the lines say the infrastructure failed.

>>> one, two = "E   assert 3 == 4 (after 12.5s)", "E   assert 3 == 4 (after 9.1s)"
>>> failure_cause({"log": one}, "pytest_failed", ["python"]).key == failure_cause(
...     {"stderr": two}, "pytest_failed", ["python"]).key
True
>>> failure_cause({"log": "fatal: Could not resolve host: github.com"}, None, ()).category
'infra'
>>> category_of(["docker", "infrastructure"]), category_of(["python"])
('infrastructure', None)
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from theow_client.ci_run import CiRun, RunFact, RunValueError, run_id_of
from theow_client.job import MAX_JOB_CHARS
from theow_client.jsontypes import JsonObject
from theow_client.messages import RunReport
from theow_workers.core.history.cause import Cause, cause_of_facts
from theow_workers.core.history.model import Outcome, Run
from theow_workers.identity import repo_of
from theow_workers.integrations.hooks import HookedJob
from theow_workers.store.runs import MAX_CAUSE, REPLAY_AGENT, LedgerRun

# A rule's tags that say what kind of cause it is, strongest first.
CATEGORIES: tuple[tuple[str, frozenset[str]], ...] = (
    ("infrastructure", frozenset({"infrastructure", "infra", "runner", "network", "ci-image"})),
    ("flaky", frozenset({"flaky"})),
    ("dependency", frozenset({"dependency", "dependencies", "system-packages"})),
    ("compile", frozenset({"compile", "syntax", "typecheck"})),
    ("lint", frozenset({"lint", "format"})),
    ("test", frozenset({"test"})),
)


def failure_cause(facts: JsonObject, rule: str | None, tags: Iterable[str]) -> Cause:
    """A failure's cause from its facts' log and the rule that matched it (its ``tags``),
    keyed as ``theow history eval`` keys a row (the key bounded to the ledger's column)."""
    found = cause_of_facts(facts, rule=rule, category=category_of(tags))
    return replace(found, key=found.key[:MAX_CAUSE])


def category_of(tags: Iterable[str]) -> str | None:
    """The kind of cause a rule's tags say (``infrastructure``, ``flaky``, ``test``...), if any."""
    given = {tag.strip().casefold() for tag in tags}
    for category, words in CATEGORIES:
        if given & words:
            return category
    return None


def ledger_repo(agent: str, repo: str, scope: str) -> str:
    """The repository a run of ``agent`` is kept under (see the module's note).

    ``scope``: the verified scope of the agent's reports of ``repo``
    (``identity.Verifier.scope``: ``repo:<name>`` or ``agent:<name>``).

    >>> ledger_repo("ci-1", "Acme/API", "repo:acme/api"), ledger_repo("ci-1", "Acme/API", "agent:ci-1")
    ('acme/api', 'ci-1@acme/api')
    """
    name = repo_of(repo)
    if agent == REPLAY_AGENT or scope.startswith("repo:"):
        return name
    return f"{agent}@{name}"


def _run(where: CiRun, job: str, outcome: Outcome, finished: float, started: float | None) -> Run:
    return Run(
        id=where.id,
        repo=where.repo,
        job=job,
        branch=where.branch,
        sha=where.sha,
        outcome=outcome,
        finished_at=finished,
        pr=where.pr,
        base_sha=where.base_sha,
        attempt=where.attempt,
        started_at=started,
    )


def from_report(report: RunReport, agent: str, source: str, now: float | None = None) -> LedgerRun:
    """A ``theow.run`` report's record (repository not yet scoped); RunValueError when bad."""
    fact = RunFact.from_wire(report.run, time.time() if now is None else now)
    outcome = Outcome(report.outcome)
    run = _run(fact.where, report.job, outcome, fact.finished_at, fact.started_at)
    return LedgerRun(run=run, agent=agent, source=source)


def from_failure(
    facts_run: object,
    job: object,
    agent: str,
    source: str,
    failure_id: str,
    cause: str,
    category: str | None,
    now: float | None = None,
) -> LedgerRun | None:
    """A failure's record from its ``run`` fact; None when it has none or no job.

    RunValueError when the fact is there but wrong.
    """
    if facts_run is None or not isinstance(job, str) or not job.strip():
        return None
    fact = RunFact.from_wire(facts_run, time.time() if now is None else now, what="facts.run")
    run = _run(fact.where, job.strip(), Outcome.FAILED, fact.finished_at, fact.started_at)
    run = Run(**{**run.__dict__, "cause": cause, "category": category})
    return LedgerRun(run=run, agent=agent, source=source, failure_id=failure_id)


def from_hook(job: HookedJob, now: float | None = None) -> LedgerRun | None:
    """A webhook job's record, when its delivery named a commit and a branch.

    Its id is the one ``theow-client`` gives the same job attempt (``ci_run.run_id_of``:
    GitHub's workflow run, its attempt and the job; GitLab's job id), so a job both report
    is one run (``store.run_twins``). A GitLab job's attempt counts its retries from 1.
    """
    if not job.head_sha or not job.branch:
        return None
    try:
        if job.forge == "gitlab":  # its job id is the attempt's; retries_count counts from 0
            attempt, ci_id, as_client = int(job.attempt or 0) + 1, job.job_id, 1
        else:  # the workflow run, its attempt and the job (no run id: the job's own id)
            attempt = max(1, int(job.attempt or 1))
            ci_id, as_client = job.run_id or f"job:{job.job_id}", attempt
        where = CiRun(
            id=run_id_of(job.forge, ci_id, job.job, as_client, job.repo),
            repo=job.repo,
            branch=job.branch,
            sha=job.head_sha.lower(),
            attempt=max(1, min(attempt, 1000)),
            pr=job.pr or None,
            base_sha=job.base_sha or None,
            provider=job.forge,
        )
        checked = RunFact.from_wire(
            where.fact(None, time.time() if now is None else now), time.time()
        )
    except (RunValueError, ValueError):
        return None
    outcome = Outcome.FAILED if job.failed else Outcome.PASSED
    run = _run(checked.where, job.job, outcome, checked.finished_at, None)
    return LedgerRun(run=run, agent=job.agent, source="webhook")


def _epoch(value: object) -> object:
    """A history's time as seconds since the epoch (it may be ISO 8601 text)."""
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return value  # RunFact says what is wrong with it
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    return value


def from_history(row: JsonObject, now: float) -> LedgerRun:
    """A replayed history row that is a run (``"outcome"``: passed or failed, with the fields
    ``theow history eval`` reads), kept under its repository; RunValueError says what is wrong.

    >>> from_history({"id": 7, "repo": "Acme/App", "job": "test", "branch": "main",
    ...     "sha": "9f2c" * 10, "outcome": "passed", "finished_at": "2026-01-05T10:00:00Z"},
    ...     now=1.8e9).run.repo
    'acme/app'
    >>> from_history({"id": "r1", "repo": "o/r", "job": "t", "branch": "main", "sha": "x1",
    ...     "outcome": "failed", "finished_at": 1.7e9}, now=1.8e9)
    Traceback (most recent call last):
    ...
    theow_client.ci_run.RunValueError: row.sha: 'x1' is not a commit sha (7 to 64 hex digits)
    """
    job = row.get("job")
    if isinstance(job, bool) or not isinstance(job, str | int) or not str(job).strip():
        raise RunValueError("row.job: missing (a run row names its job)")
    if row.get("finished_at") is None:
        raise RunValueError("row.finished_at: missing (seconds since the epoch, or ISO 8601)")
    fact = {name: row.get(name) for name in ("repo", "branch", "sha", "pr", "base_sha", "attempt")}
    given = row.get("id")  # ``history eval`` takes a number too
    fact["id"] = str(given) if isinstance(given, int) and not isinstance(given, bool) else given
    fact["finished_at"] = _epoch(row.get("finished_at"))
    fact["started_at"] = _epoch(row.get("started_at"))
    checked = RunFact.from_wire({k: v for k, v in fact.items() if v is not None}, now, what="row")
    outcome = Outcome.PASSED if row.get("outcome") == "passed" else Outcome.FAILED
    run = _run(checked.where, str(job).strip()[:MAX_JOB_CHARS], outcome, checked.finished_at,
               checked.started_at)  # fmt: skip
    run = replace(run, repo=ledger_repo(REPLAY_AGENT, run.repo, ""))
    return LedgerRun(run=run, agent=REPLAY_AGENT, source="replay")
