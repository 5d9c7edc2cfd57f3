"""Incidents: what a time-ordered history of runs says is broken, in one job or fleet-wide.

Three kinds, derived from the runs (and, where given, each failed run's decided
:class:`~theow_workers.core.history.model.Decision`):

* ``main``: a cause breaking a repository's default branch in a job. Opened by
  the first failing default-branch run of that cause (its sha is the
  ``culprit``, unless the decision names an earlier one), joined by later
  failures of it (pull requests whose failure was decided ``main`` included),
  closed by the job's first passing default-branch run (``fixed_by``).
* ``infra``: one cause failing ``infra_repos`` repositories or more within
  ``infra_window`` seconds. Later failures of it join while they keep coming;
  a quiet window closes it. Its failures open no ``main`` incident.
* ``flaky``: a cause that fails and passes in one job without a commit to
  blame: a failure decided ``flaky``, or (undecided) a failure whose sha
  passed on another attempt, or failures standing alone between passes. It
  carries a flip rate over the job's recent runs and a cost (failed runs,
  minutes lost from started/finished); ``flaky_quiet_runs`` runs of the job
  without it close it.

A failure whose decision is ``change`` or ``infra`` opens no ``main`` or
``flaky`` incident: the classification has said whose it is.

An incident's id is a hash of its kind, scope (repository and job; the fleet
for ``infra``), cause and opening run: deriving again over a longer history
gives the same id, which is what alerts deduplicate on. A flaky cause is one
incident per job however long it lasts (its id leaves the opening run out): a
history read over a sliding window would otherwise give it a new id, and a new
alert, each time its first failure slid out.

>>> from theow_workers.core.history.model import Outcome, Run
>>> def run(i, sha, outcome, at, branch="main"):
...     return Run(id=f"r{i}", repo="o/r", job="test", branch=branch, sha=sha,
...                outcome=Outcome(outcome), finished_at=at,
...                cause="pytest|E1" if outcome == "failed" else None)
>>> found = incidents([run(1, "a", "passed", 1), run(2, "b", "failed", 2),
...                    run(3, "c", "failed", 3), run(4, "d", "passed", 4)])
>>> [(i.kind.value, i.state.value, i.culprit, i.fixed_by, i.runs_affected) for i in found]
[('main', 'closed', 'b', 'd', 2)]
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence

from theow_workers.core.history.flaky import flaky
from theow_workers.core.history.incident import Building, Incident, Kind, Rules
from theow_workers.core.history.model import Decision, Origin, Run
from theow_workers.core.history.ports import History

JOB_LOOKBACK = 30 * 24 * 3600.0  # what ``around`` reads of a run's job
CAUSE_LOOKBACK = 24 * 3600.0  # what ``around`` reads of a failure's cause, fleet-wide


def incidents(
    runs: Iterable[Run],
    decisions: Mapping[str, Decision] | None = None,
    rules: Rules | None = None,
    now: float | None = None,
) -> list[Incident]:
    """Every incident the runs show, oldest first (``now``: the last run's time unless given)."""
    rules = rules or Rules()
    decided = decisions or {}
    ordered = sorted(runs, key=lambda r: r.finished_at)  # stable: equal times keep their order
    if not ordered:
        return []
    now = ordered[-1].finished_at if now is None else now
    infra = _infra(ordered, rules, now)
    fleet = {run_id for incident in infra for run_id in incident.runs}
    jobs: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in ordered:
        jobs[(run.repo, run.job)].append(run)
    found = [b.frozen() for b in infra]
    for job_runs in jobs.values():
        found += [b.frozen() for b in _main(job_runs, decided, rules, fleet)]
        found += [b.frozen() for b in flaky(job_runs, decided, rules, fleet)]
    return sorted(found, key=lambda i: (i.first_seen, i.id))


def _infra(ordered: Sequence[Run], rules: Rules, now: float) -> list[Building]:
    """One cause failing many repositories within a window: one incident while it keeps coming."""
    by_cause: dict[str, list[Run]] = defaultdict(list)
    for run in ordered:
        if run.failed and run.cause:
            by_cause[run.cause].append(run)
    made: list[Building] = []
    for failures in by_cause.values():
        recent: deque[Run] = deque()
        current: Building | None = None
        for run in failures:
            if current is not None and run.finished_at - current.last_seen <= rules.infra_window:
                current.add(run)
                continue
            if current is not None:
                current.close(current.last_seen + rules.infra_window)
                current = None
            recent.append(run)
            while run.finished_at - recent[0].finished_at > rules.infra_window:
                recent.popleft()
            if len({r.repo for r in recent}) >= rules.infra_repos:
                current = Building(Kind.INFRA, recent[0])
                for joined in recent:
                    current.add(joined)
                made.append(current)
                recent.clear()
        if current is not None and now - current.last_seen > rules.infra_window:
            current.close(current.last_seen + rules.infra_window)
    return made


def _main(
    job_runs: Sequence[Run], decided: Mapping[str, Decision], rules: Rules, fleet: set[str]
) -> list[Building]:
    """A cause breaking the job on the default branch, until the job passes there again."""
    branch = rules.branch_of(job_runs[0].repo)
    made: list[Building] = []
    open_by_cause: dict[str, Building] = {}
    for run in job_runs:
        on_default = run.on_branch(branch)
        if not run.failed:
            if on_default:
                for building in open_by_cause.values():
                    if not building.confirmed and building.shas == {run.sha}:
                        made.remove(building)  # its one commit passed on a retry: flaky
                        continue
                    building.close(run.finished_at, run, "fixed")
                open_by_cause.clear()
            continue
        if not run.cause or run.id in fleet:
            continue
        decision = decided.get(run.id)
        origin = decision.origin if decision is not None else Origin.UNKNOWN
        current = open_by_cause.get(run.cause)
        if on_default and origin in (Origin.MAIN, Origin.UNKNOWN):
            if current is None:
                current = Building(Kind.MAIN, run, run.repo, run.job)
                current.culprit = (decision.culprit if decision else None) or run.sha
                open_by_cause[run.cause] = current
                made.append(current)
            current.add(run)
            current.confirmed |= origin is Origin.MAIN or current.failed >= 2
        elif current is not None and not on_default and origin is Origin.MAIN:
            current.add(run, "inherited")  # a pull request based on the broken commit
    return made


def around(history: History, run: Run, rules: Rules | None = None) -> list[Incident]:
    """The incidents a newly recorded ``run`` may have opened, joined or closed.

    Reads the run's job over ``JOB_LOOKBACK`` seconds and, for a failure, its
    cause fleet-wide over ``CAUSE_LOOKBACK``: a main incident older than the
    first (an infra one older than the second) is seen from a later opening
    run, under a new id.
    """
    rules = rules or Rules()
    until = run.finished_at
    seen = {r.id: r for r in history.job_runs(run.repo, run.job, since=until - JOB_LOOKBACK,
                                               until=until)}  # fmt: skip
    seen.setdefault(run.id, run)
    if run.failed and run.cause:
        since = until - CAUSE_LOOKBACK
        seen |= {r.id: r for r in history.cause_failures(run.cause, since=since, until=until)}
    return [
        incident
        for incident in incidents(seen.values(), rules=rules, now=until)
        if (incident.repo, incident.job) == (run.repo, run.job)
        or (incident.kind is Kind.INFRA and incident.cause == run.cause)
    ]
