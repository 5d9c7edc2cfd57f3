"""Whose failure it is, in the worker: a failed run's origin decided as it is recorded, and
revised as later runs arrive (``core.history.classify`` over the SQL ledger).

* :func:`at_verdict` — a failed run with its failure: its origin from the
  runs finished by then, for the verdict (``verdict["origin"]``:
  ``Decision.to_dict()``), and its record with it (``origin_then`` and
  ``origin``), which :func:`write` stores once the verdict is delivered. A run
  recorded before (a redelivery, the same failure sent again) gives back what
  is stored.
* :func:`revise` — any run just recorded (a client's ``theow.run``, a failure,
  a webhook's job, a replayed row): the earlier failed runs ``revisable`` names
  are decided again over the whole ledger; a changed origin, culprit or fix is
  stored (``origin_then`` kept as it was) and handed to :func:`on_origin_revised`.
* :func:`on_origin_revised` — the one place a revision's effects start.

The verdict pays for one decision: a few indexed reads, no write (the run is
decided as if written, ``WithRun``); the write and the revisions come after the
verdict is delivered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from theow_client.jsontypes import JsonObject
from theow_workers.core.history.classify import DEFAULT_SETTINGS, decide, revisable
from theow_workers.core.history.model import Decision, Origin, Run
from theow_workers.core.history.ports import History
from theow_workers.integrations import feedback
from theow_workers.store.runs import MAX_REASON, LedgerRun, configured_branches

if TYPE_CHECKING:
    from theow_workers.runtime import Runtime

log = logging.getLogger("theow.ledger")

# At most this many earlier failures are decided again after one run: a default branch
# broken for days has many, and the newest are the ones people are looking at.
MAX_REVISED = 200


def branches(rt: Runtime) -> Callable[[str], str]:
    """Each repository's default branch (configured, else learned, else main), read once a call.

    A malformed ``THEOW_DEFAULT_BRANCHES`` is said once and left out (learned, else main).
    """
    try:
        configured = configured_branches(rt.settings.default_branches)
    except ValueError as exc:
        log.warning("%s; the default branches are learned from the forges instead", exc)
        configured = {}
    known: dict[str, str] = {}

    def branch_of(repo: str) -> str:
        if repo not in known:
            known[repo] = rt.runs.default_branch(repo, configured)
        return known[repo]

    return branch_of


def stored(entry: LedgerRun) -> JsonObject | None:
    """A recorded run's origin as the verdict carries it (None: not decided yet)."""
    if entry.origin is None:
        return None
    return {
        "origin": entry.origin,
        "culprit": entry.culprit,
        "fixed_by": entry.fixed_by,
        "flip_rate": None,  # not kept: the next revision says it again
        "reason": entry.origin_reason or "",
    }


class WithRun:
    """The ledger's history with one run not yet written added: a verdict decides its run's
    origin before the run's row is written (after the verdict is delivered)."""

    def __init__(self, history: History, run: Run) -> None:
        self.history, self.run = history, run

    def _with(self, found: Sequence[Run], since: float, until: float) -> list[Run]:
        others = [r for r in found if r.id != self.run.id or r.repo != self.run.repo]
        if since <= self.run.finished_at <= until:
            others.append(self.run)
            others.sort(key=lambda r: r.finished_at)
        return others

    def job_runs(self, repo: str, job: str, *, since: float, until: float) -> Sequence[Run]:
        found = self.history.job_runs(repo, job, since=since, until=until)
        if (repo, job) != (self.run.repo, self.run.job):
            return found
        return self._with(found, since, until)

    def cause_failures(self, cause: str, *, since: float, until: float) -> Sequence[Run]:
        found = self.history.cause_failures(cause, since=since, until=until)
        if cause != self.run.cause or not self.run.failed:
            return found
        return self._with(found, since, until)


def at_verdict(rt: Runtime, entry: LedgerRun) -> tuple[JsonObject | None, LedgerRun | None]:
    """The failed run's origin for its verdict, and its record to write once the verdict is
    delivered (None: recorded before, its stored origin given back)."""
    if entry.failure_id:
        found = rt.runs.of_failure(entry.failure_id)
        if found is not None and found.origin is not None:
            return stored(found), None  # a redelivery, or the same failure sent again
    run = entry.run
    decision = decide(
        run,
        WithRun(rt.runs, run),
        default_branch=branches(rt)(run.repo),
        settings=DEFAULT_SETTINGS,
        until=run.finished_at,
    )
    origin = decision.origin.value
    decided = replace(
        entry,
        origin_then=origin,
        origin=origin,
        culprit=decision.culprit,
        fixed_by=decision.fixed_by,
        origin_reason=decision.reason[:MAX_REASON],
    )
    return decision.to_dict(), decided


def write(rt: Runtime, entry: LedgerRun) -> bool:
    """Write a run decided at its verdict (``at_verdict``); whether it is new to the ledger."""
    done = rt.runs.record(entry)
    if done == "updated" and entry.origin is not None:  # reported passed (or bare) before
        decision = Decision(
            Origin(entry.origin), entry.origin_reason or "", entry.culprit, entry.fixed_by
        )
        rt.runs.set_origin(entry.agent, entry.run.id, decision, then=True)
    return done != "duplicate"


def revise(rt: Runtime, entry: LedgerRun) -> int:
    """Decide again the earlier failures the run just recorded may change; how many changed."""
    branch_of = branches(rt)
    run = entry.run
    targets = revisable(run, rt.runs, default_branch=branch_of(run.repo), settings=DEFAULT_SETTINGS)
    if not targets:
        return 0
    changed = 0
    for earlier in rt.runs.entries(targets[-MAX_REVISED:]):
        default = branch_of(earlier.run.repo)
        decision = decide(earlier.run, rt.runs, default_branch=default, settings=DEFAULT_SETTINGS)
        if earlier.origin_then is None:  # never decided (a run reported without its failure)
            then = decide(
                earlier.run,
                rt.runs,
                default_branch=default,
                settings=DEFAULT_SETTINGS,
                until=earlier.run.finished_at,
            )
            rt.runs.set_origin(earlier.agent, earlier.run.id, then, then=True)
        if _same(earlier, decision):
            if earlier.origin_reason != decision.reason[:MAX_REASON]:
                # The same origin on other grounds (a flaky guess now a passing retry): said.
                rt.runs.set_origin(earlier.agent, earlier.run.id, decision, then=False)
            continue
        rt.runs.set_origin(earlier.agent, earlier.run.id, decision, then=False)
        changed += 1
        if earlier.failure_id is not None:
            on_origin_revised(rt, earlier.failure_id, decision, was=earlier.origin)
    return changed


def on_origin_revised(
    rt: Runtime, failure_id: str, decision: Decision, was: str | None = None
) -> None:
    """A failure's origin, culprit or fix changed after its verdict (already stored).

    The one place a revision's effects start: the log line here; the stored
    revision is what ``theow failures show``, the console and the API show
    (``origin`` beside ``origin_then``), and the pull-request comments that list
    the failure are rewritten to say it.
    """
    log.info(
        "failure %s: origin %s -> %s%s (%s)",
        failure_id,
        was or "-",
        decision.origin.value,
        f", culprit {decision.culprit[:12]}" if decision.culprit else "",
        decision.reason[:200],
    )
    feedback.refresh_comment(rt, failure_id, decision.to_dict())


def _same(entry: LedgerRun, decision: Decision) -> bool:
    return (
        entry.origin == decision.origin.value
        and entry.culprit == decision.culprit
        and entry.fixed_by == decision.fixed_by
    )
