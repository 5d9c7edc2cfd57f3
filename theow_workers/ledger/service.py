"""Writing the ledger from the tasks: one call each, and never at a verdict's expense.

* :func:`record_report` — ``theow.run``: a client's passed run (or failed run
  without its log), its repository in the agent's verified scope.
* :func:`record_failure` — at a verdict: the failed run its ``run`` fact
  names, with its failure, cause and category, and its origin
  (``ledger.origins``) for the verdict to carry.
* :func:`record_hooked` — a forge's webhook job, passed or failed, and the
  repository's default branch when the delivery says it; a failed one's origin.
* :func:`revise` — after a run is recorded (and its verdict delivered): its
  tests' outcomes (``ledger.testcases``), and the earlier failures whose origin
  it changes.
* :func:`note_pull_request` — a ``workflow_run`` delivery: its pull request and
  base, kept for its jobs still to come and written onto those already recorded.

A ledger problem (a bad ``run`` fact, the database briefly away) is logged and
dropped: the verdict is what the build waits for.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from theow_client import names
from theow_client.ci_run import RunValueError
from theow_client.jsontypes import JsonObject
from theow_client.messages import RunReport
from theow_workers.core.history.incident import Rules
from theow_workers.integrations import alerts
from theow_workers.integrations.hooks import HookedJob, HookedRun
from theow_workers.ledger import origins, testcases
from theow_workers.ledger.record import (
    failure_cause,
    from_failure,
    from_hook,
    from_report,
    ledger_repo,
)
from theow_workers.store.runs import LedgerRun, configured_branches

if TYPE_CHECKING:
    from theow_workers.runtime import Runtime

log = logging.getLogger("theow.ledger")


def _scoped(rt: Runtime, entry: LedgerRun) -> LedgerRun:
    scope = rt.verifier.scope(entry.agent, entry.run.repo)
    repo = ledger_repo(entry.agent, entry.run.repo, scope)
    return replace(entry, run=replace(entry.run, repo=repo))


@dataclass(frozen=True)
class Recorded:
    """What recording a failure's run gave: its origin for the verdict, and the run to revise by."""

    origin: JsonObject | None = None  # ``Decision.to_dict()``; None: no run metadata
    fresh: LedgerRun | None = None  # new to the ledger: ``revise`` writes it (if pending), then
    # decides again the earlier failures it changes
    pending: bool = True  # decided, not written yet (a passed run is written at once)
    tests: JsonObject | None = None  # a passed run's report: its counts and flaky tests

    def onto(self, verdict: JsonObject) -> JsonObject:
        """The verdict with its origin (``"origin"``), when there is one."""
        return {**verdict, "origin": self.origin} if self.origin is not None else verdict


NOTHING = Recorded()


def record_report(rt: Runtime, agent: str, payload: object, source: str) -> JsonObject:
    """Record a ``theow.run`` report of ``agent``; what happened (a refusal says why)."""
    try:
        report = RunReport.from_wire(payload)
        entry = _scoped(rt, from_report(report, agent, source))
    except (ValueError, RunValueError) as exc:
        log.warning("run report of %s dropped: %s", agent, str(exc)[:300])
        return {"recorded": False, "reason": str(exc)[:500]}
    done = rt.runs.record(entry)
    _learn_branch(rt, entry, report.run.get("default_branch"), "client")
    if done != "duplicate":
        revise(rt, Recorded(fresh=entry, pending=False, tests=report.tests))
    return {"recorded": done != "duplicate", "run": entry.run.id, "outcome": report.outcome}


def cause_and_category(rt: Runtime, verdict: JsonObject, failure_id: str) -> tuple[str, str | None]:
    """The failure's cause key and category (``record.failure_cause``), from its stored facts
    and the rule its verdict names."""
    rule = verdict.get("rule") if isinstance(verdict.get("rule"), str) else None
    found = rt.knowledge().book.get(rule) if rule else None
    tags = found.tags if found is not None else ()
    cause = failure_cause(rt.runs.failure_facts(failure_id), rule, tags)
    return cause.key, cause.category


def record_failure(
    rt: Runtime, agent: str, failure_id: str, verdict: JsonObject, source: str = "client"
) -> Recorded:
    """Record the failed run a decided failure names in its ``run`` fact (if it has one),
    and decide its origin."""
    if verdict.get("status") in ("rejected", None):
        return NOTHING
    try:
        fact, job, _ = rt.runs.failure_run(failure_id)
        if fact is None:
            return NOTHING
        cause, category = cause_and_category(rt, verdict, failure_id)
        entry = from_failure(fact, job, agent, source, failure_id, cause, category)
        if entry is None:
            return NOTHING
        entry = _scoped(rt, entry)
        if isinstance(fact, dict):
            _learn_branch(rt, entry, fact.get("default_branch"), "client")
        return Recorded(*origins.at_verdict(rt, entry))
    except RunValueError as exc:
        log.warning("failure %s: its run is not recorded: %s", failure_id, str(exc)[:300])
    except Exception as exc:  # the verdict is stored and delivered; the ledger waits for none
        log.warning("failure %s: could not record its run: %s", failure_id, str(exc)[:300])
    return NOTHING


def record_hooked(
    rt: Runtime, job: HookedJob, failure_id: str | None = None, verdict: JsonObject | None = None
) -> Recorded:
    """Record a webhook job's run (and the repository's default branch it names); a failed
    one with its verdict gets its origin."""
    try:
        entry = from_hook(job)
        if entry is None:
            return NOTHING
        known = _pull_request_of(rt, job)
        if known and not entry.run.pr:
            run = replace(
                entry.run, pr=known.get("pr") or None, base_sha=known.get("base_sha") or None
            )
            entry = replace(entry, run=run)
        if failure_id is not None and verdict is not None:
            cause, category = cause_and_category(rt, verdict, failure_id)
            entry = replace(
                entry, failure_id=failure_id, run=replace(entry.run, cause=cause, category=category)
            )
        entry = _scoped(rt, entry)
        _learn_branch(rt, entry, job.repo_default_branch, "webhook")
        if entry.failure_id:
            return Recorded(*origins.at_verdict(rt, entry))  # written with ``revise``
        done = rt.runs.record(entry)
        return Recorded(fresh=entry if done != "duplicate" else None, pending=False)
    except Exception as exc:  # the job's verdict and comment matter more than its ledger row
        log.warning("%s job %s: could not record its run: %s", job.forge, job.key, str(exc)[:300])
    return NOTHING


def revise(rt: Runtime, recorded: Recorded) -> None:
    """The earlier failures whose origin the run just recorded changes (``origins.revise``)."""
    if recorded.fresh is None:
        return
    try:
        if recorded.pending and not origins.write(rt, recorded.fresh):
            return  # recorded before: nothing it changes is new
        testcases.record_tests(rt, recorded.fresh, recorded.tests)
        _alert(rt, recorded.fresh)
        origins.revise(rt, recorded.fresh)
    except Exception as exc:  # a revision can wait for the next run; the run is recorded
        log.warning("run %s: origins not revised: %s", recorded.fresh.run.id, str(exc)[:300])


def note_pull_request(rt: Runtime, hooked: HookedRun) -> JsonObject:
    """Keep a workflow run's pull request for its jobs, and write it onto those recorded."""
    key = names.key_hook_run_pr("github", hooked.repo, hooked.run_id)
    value = json.dumps({"pr": hooked.pr, "base_sha": hooked.base_sha})
    rt.redis.set(key, value, ex=names.HOOK_SEEN_TTL)
    agent = names.HOOK_AGENTS["github"]
    scope = rt.verifier.scope(agent, hooked.repo)
    changed = rt.runs.set_pull_request(
        agent,
        ledger_repo(agent, hooked.repo, scope),
        hooked.head_sha.lower(),
        hooked.head_branch,
        hooked.pr,
        hooked.base_sha.lower() or None,
    )
    if hooked.repo_default_branch:
        rt.runs.learn_default_branch(hooked.repo, hooked.repo_default_branch, "webhook")
    return {"recorded": True, "pull_request": hooked.pr, "runs": changed}


def _pull_request_of(rt: Runtime, job: HookedJob) -> dict[str, str]:
    if job.forge != "github" or not job.run_id:
        return {}
    raw = rt.redis.get(names.key_hook_run_pr("github", job.repo, job.run_id))
    try:
        found = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return (
        {k: str(v) for k, v in found.items() if isinstance(v, str)}
        if isinstance(found, dict)
        else {}
    )


def _alert(rt: Runtime, entry: LedgerRun) -> None:
    """Alerts for the incidents the run opened, joined or closed (``integrations.alerts``);
    none for replayed history. Never raises."""
    if entry.source == "replay" or not rt.settings.alert_url:
        return
    try:
        rules = Rules(default_branches={entry.run.repo: default_branch(rt, entry.run.repo)})
    except ValueError as exc:  # THEOW_DEFAULT_BRANCHES malformed: said once per run, no alert
        log.warning("run %s: no alerts: %s", entry.run.id, str(exc)[:300])
        return
    alerts.after_run(rt.settings, rt.redis, rt.runs, entry.run, rules)


def _learn_branch(rt: Runtime, entry: LedgerRun, branch: object, learned_from: str) -> None:
    """Keep the default branch a trusted source names (a webhook, a token given ``--repo``)."""
    if not isinstance(branch, str) or not branch.strip() or "@" in entry.run.repo:
        return
    rt.runs.learn_default_branch(entry.run.repo, branch.strip()[:200], learned_from)


def default_branch(rt: Runtime, repo: str) -> str:
    """The repository's default branch: ``THEOW_DEFAULT_BRANCHES``, else learned, else main."""
    return rt.runs.default_branch(repo, configured_branches(rt.settings.default_branches))


def purge(rt: Runtime, now: float | None = None) -> int:
    """Delete runs past ``THEOW_RUN_RETENTION_DAYS``; how many."""
    return rt.runs.purge(rt.settings.run_retention_days, time.time() if now is None else now)
