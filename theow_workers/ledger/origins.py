"""Whose failure it is, in the worker: a failed run's origin decided as it is recorded, and
revised as later runs arrive (``core.history.classify`` over the SQL ledger).

* :func:`at_verdict` — a failed run just recorded with its failure: its origin
  from the runs finished by then, stored as ``origin_then`` and ``origin``, and
  given back for the verdict (``verdict["origin"]``: ``Decision.to_dict()``). A
  run recorded before (a redelivery, the same failure sent again) gives back
  what is stored.
* :func:`revise` — any run just recorded (a client's ``theow.run``, a failure,
  a webhook's job, a replayed row): the earlier failed runs ``revisable`` names
  are decided again over the whole ledger; a changed origin, culprit or fix is
  stored (``origin_then`` kept as it was) and handed to :func:`on_origin_revised`.
* :func:`on_origin_revised` — the one place a revision's effects start.

The verdict pays for one decision (a few indexed reads and one write, about a
millisecond on SQLite); revisions run after the verdict is delivered. Nothing
here raises into a task: the ledger never costs a verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from theow_client.jsontypes import JsonObject
from theow_workers.core.history.classify import DEFAULT_SETTINGS, decide, revisable
from theow_workers.core.history.model import Decision
from theow_workers.store.runs import LedgerRun, configured_branches

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


def at_verdict(rt: Runtime, entry: LedgerRun, fresh: bool) -> JsonObject | None:
    """The failed run's origin for its verdict (see the module's note); None when the
    ledger cannot say (the run is not there)."""
    if not fresh:
        found = rt.runs.of_failure(entry.failure_id) if entry.failure_id else None
        return stored(found) if found is not None else None
    run = entry.run
    decision = decide(
        run,
        rt.runs,
        default_branch=branches(rt)(run.repo),
        settings=DEFAULT_SETTINGS,
        until=run.finished_at,
    )
    rt.runs.set_origin(entry.agent, run.id, decision, then=True)
    return decision.to_dict()


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
    (``origin`` beside ``origin_then``). The pull-request comment and the
    alerts hang off this function.
    """
    log.info(
        "failure %s: origin %s -> %s%s (%s)",
        failure_id,
        was or "-",
        decision.origin.value,
        f", culprit {decision.culprit[:12]}" if decision.culprit else "",
        decision.reason[:200],
    )


def _same(entry: LedgerRun, decision: Decision) -> bool:
    return (
        entry.origin == decision.origin.value
        and entry.culprit == decision.culprit
        and entry.fixed_by == decision.fixed_by
    )
