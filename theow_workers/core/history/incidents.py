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

import hashlib
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from theow_workers.core.history.model import Decision, Origin, Outcome, Run
from theow_workers.core.history.ports import History

TIMELINE_HEAD = 5  # a timeline keeps its first moments and its last ones, and counts the rest
TIMELINE_TAIL = 15
JOB_LOOKBACK = 30 * 24 * 3600.0  # what ``around`` reads of a run's job
CAUSE_LOOKBACK = 24 * 3600.0  # what ``around`` reads of a failure's cause, fleet-wide


class Kind(StrEnum):
    MAIN = "main"
    INFRA = "infra"
    FLAKY = "flaky"

    def __str__(self) -> str:
        return self.value


class State(StrEnum):
    OPEN = "open"
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Rules:
    """What makes an incident; ``default_branches`` overrides ``default_branch`` per repository."""

    default_branch: str = "main"
    default_branches: Mapping[str, str] = field(default_factory=dict)
    infra_window: float = 3600.0
    infra_repos: int = 3
    flaky_recent: int = 50  # the job's runs a flip rate is taken over
    flaky_quiet_runs: int = 20  # runs of the job without the cause that close a flaky incident

    def branch_of(self, repo: str) -> str:
        return self.default_branches.get(repo, self.default_branch)


@dataclass(frozen=True)
class Moment:
    """One line of an incident's timeline: what happened, when, in which run."""

    at: float
    what: str  # opened, failed, passed, fixed, closed
    run: str
    repo: str
    sha: str
    branch: str

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in ("at", "what", "run", "repo", "sha", "branch")}


@dataclass(frozen=True)
class Incident:
    id: str
    kind: Kind
    state: State
    cause: str
    repo: str  # "" for infra (see ``repos``)
    job: str  # "" for infra
    repos: tuple[str, ...]
    opened_by: str  # the opening run's id
    first_seen: float
    last_seen: float
    runs_affected: int
    failed_runs: int
    minutes_lost: float
    timeline: tuple[Moment, ...]
    omitted: int = 0  # moments left out of the timeline between its head and its tail
    culprit: str | None = None
    fixed_by: str | None = None
    closed_at: float | None = None
    flip_rate: float | None = None
    # main: failed twice on the default branch (another commit or a retry), or decided main;
    # a single failure may yet prove flaky. Alerts say main broke only once it is confirmed.
    confirmed: bool = True

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "state": self.state.value,
            "cause": self.cause,
            "repo": self.repo,
            "job": self.job,
            "repos": list(self.repos),
            "opened_by": self.opened_by,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "closed_at": self.closed_at,
            "runs_affected": self.runs_affected,
            "failed_runs": self.failed_runs,
            "minutes_lost": round(self.minutes_lost, 1),
            "culprit": self.culprit,
            "fixed_by": self.fixed_by,
            "flip_rate": None if self.flip_rate is None else round(self.flip_rate, 3),
            "confirmed": self.confirmed,
            "timeline": [m.to_dict() for m in self.timeline],
            "omitted": self.omitted,
        }


def incident_id(kind: Kind, scope: str, cause: str, opened_by: str) -> str:
    """The stable id: the same incident derived again, from more history, keeps it."""
    raw = "\x00".join((kind.value, scope, cause, opened_by)).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


class _Building:
    """An incident as the walk finds it: counts, a bounded timeline, then frozen."""

    def __init__(self, kind: Kind, first: Run, repo: str = "", job: str = "") -> None:
        self.kind, self.cause, self.repo, self.job = kind, first.cause or "", repo, job
        self.opened_by = first.id
        self.first_seen = self.last_seen = first.finished_at
        self.runs: set[str] = set()
        self.repos: set[str] = set()
        self.failed = 0
        self.minutes = 0.0
        self.head: list[Moment] = []
        self.tail: deque[Moment] = deque(maxlen=TIMELINE_TAIL)
        self.omitted = 0
        self.culprit: str | None = None
        self.fixed_by: str | None = None
        self.closed_at: float | None = None
        self.flip_rate: float | None = None
        self.shas: set[str] = set()
        self.confirmed = kind is not Kind.MAIN
        self.note(first, "opened")

    def note(self, run: Run, what: str) -> None:
        moment = Moment(run.finished_at, what, run.id, run.repo, run.sha, run.branch)
        if len(self.head) < TIMELINE_HEAD:
            self.head.append(moment)
            return
        if len(self.tail) == TIMELINE_TAIL:
            self.omitted += 1
        self.tail.append(moment)

    def add(self, run: Run, what: str = "failed") -> None:
        if run.id in self.runs:
            return
        if self.runs:  # the first run's moment is "opened"
            self.note(run, what)
        self.runs.add(run.id)
        self.repos.add(run.repo)
        self.shas.add(run.sha)
        self.last_seen = max(self.last_seen, run.finished_at)
        self.failed += 1
        if run.started_at is not None and run.finished_at > run.started_at:
            self.minutes += (run.finished_at - run.started_at) / 60

    def close(self, at: float, run: Run | None = None, what: str = "closed") -> None:
        self.closed_at = at
        if run is not None:
            self.note(run, what)
            self.fixed_by = run.sha if what == "fixed" else None

    def frozen(self) -> Incident:
        scope = "\x00".join((self.repo, self.job)) if self.kind is not Kind.INFRA else "*"
        opened_by = "" if self.kind is Kind.FLAKY else self.opened_by
        return Incident(
            id=incident_id(self.kind, scope, self.cause, opened_by),
            kind=self.kind,
            state=State.OPEN if self.closed_at is None else State.CLOSED,
            cause=self.cause,
            repo=self.repo,
            job=self.job,
            repos=tuple(sorted(self.repos)),
            opened_by=self.opened_by,
            first_seen=self.first_seen,
            last_seen=self.last_seen,
            runs_affected=len(self.runs),
            failed_runs=self.failed,
            minutes_lost=self.minutes,
            timeline=(*self.head, *self.tail),
            omitted=self.omitted,
            culprit=self.culprit,
            fixed_by=self.fixed_by,
            closed_at=self.closed_at,
            flip_rate=self.flip_rate,
            confirmed=self.confirmed,
        )


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
        found += [b.frozen() for b in _flaky(job_runs, decided, rules, fleet)]
    return sorted(found, key=lambda i: (i.first_seen, i.id))


def _infra(ordered: Sequence[Run], rules: Rules, now: float) -> list[_Building]:
    """One cause failing many repositories within a window: one incident while it keeps coming."""
    by_cause: dict[str, list[Run]] = defaultdict(list)
    for run in ordered:
        if run.failed and run.cause:
            by_cause[run.cause].append(run)
    made: list[_Building] = []
    for failures in by_cause.values():
        recent: deque[Run] = deque()
        current: _Building | None = None
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
                current = _Building(Kind.INFRA, recent[0])
                for joined in recent:
                    current.add(joined)
                made.append(current)
                recent.clear()
        if current is not None and now - current.last_seen > rules.infra_window:
            current.close(current.last_seen + rules.infra_window)
    return made


def _main(
    job_runs: Sequence[Run], decided: Mapping[str, Decision], rules: Rules, fleet: set[str]
) -> list[_Building]:
    """A cause breaking the job on the default branch, until the job passes there again."""
    branch = rules.branch_of(job_runs[0].repo)
    made: list[_Building] = []
    open_by_cause: dict[str, _Building] = {}
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
                current = _Building(Kind.MAIN, run, run.repo, run.job)
                current.culprit = (decision.culprit if decision else None) or run.sha
                open_by_cause[run.cause] = current
                made.append(current)
            current.add(run)
            current.confirmed |= origin is Origin.MAIN or current.failed >= 2
        elif current is not None and not on_default and origin is Origin.MAIN:
            current.add(run, "inherited")  # a pull request based on the broken commit
    return made


def _flaky(
    job_runs: Sequence[Run], decided: Mapping[str, Decision], rules: Rules, fleet: set[str]
) -> list[_Building]:
    """Causes of the job that fail and pass with no commit to blame: one incident each."""
    passed_shas = {run.sha for run in job_runs if not run.failed}
    by_cause: dict[str, list[int]] = defaultdict(list)
    for index, run in enumerate(job_runs):
        if run.failed and run.cause and run.id not in fleet:
            by_cause[run.cause].append(index)
    made: list[_Building] = []
    for cause, where in by_cause.items():
        eligible = [i for i in where if _may_be_flaky(decided.get(job_runs[i].id))]
        if not eligible or not _flaky_evidence(job_runs, cause, eligible, decided, passed_shas):
            continue
        building = _Building(Kind.FLAKY, job_runs[eligible[0]], job_runs[0].repo, job_runs[0].job)
        for i in eligible:
            building.add(job_runs[i])
            retry = _passed_on_retry(job_runs, i)
            if retry is not None:
                building.note(retry, "passed")
        building.flip_rate = flip_rate(job_runs[-rules.flaky_recent :], cause)
        after = job_runs[where[-1] + 1 :]
        if len(after) >= rules.flaky_quiet_runs:
            building.close(after[rules.flaky_quiet_runs - 1].finished_at)
        made.append(building)
    return made


def _may_be_flaky(decision: Decision | None) -> bool:
    return decision is None or decision.origin in (Origin.FLAKY, Origin.UNKNOWN)


def _flaky_evidence(
    job_runs: Sequence[Run],
    cause: str,
    eligible: Sequence[int],
    decided: Mapping[str, Decision],
    passed_shas: set[str],
) -> bool:
    """A failure decided flaky; or one whose sha passed too; or two standing alone between passes."""
    alone = 0
    for i in eligible:
        decision = decided.get(job_runs[i].id)
        if decision is not None and decision.origin is Origin.FLAKY:
            return True
        if job_runs[i].sha in passed_shas:
            return True
        alone += _between_passes(job_runs, i, cause)
    return alone >= 2


def _between_passes(job_runs: Sequence[Run], index: int, cause: str) -> bool:
    """Whether the job's nearest runs that say anything of ``cause`` on both sides passed."""
    before = _neighbour(job_runs, range(index - 1, -1, -1), cause)
    after = _neighbour(job_runs, range(index + 1, len(job_runs)), cause)
    return before is not None and after is not None and not before.failed and not after.failed


def _neighbour(job_runs: Sequence[Run], indices: Iterable[int], cause: str) -> Run | None:
    for i in indices:
        run = job_runs[i]
        if run.outcome is Outcome.PASSED or run.cause == cause:
            return run
    return None


def _passed_on_retry(job_runs: Sequence[Run], index: int) -> Run | None:
    failed = job_runs[index]
    for run in job_runs[index + 1 :]:
        if run.sha == failed.sha and not run.failed:
            return run
    return None


def flip_rate(job_runs: Sequence[Run], cause: str) -> float | None:
    """Share of consecutive runs (passed, or failed with ``cause``) whose outcome flipped.

    Runs failing another way say nothing of this cause and are skipped.

    >>> def r(i, ok): return Run(id=str(i), repo="o/r", job="j", branch="main", sha=str(i),
    ...     outcome=Outcome.PASSED if ok else Outcome.FAILED, finished_at=i,
    ...     cause=None if ok else "c")
    >>> flip_rate([r(1, True), r(2, False), r(3, True), r(4, True), r(5, False)], "c")
    0.75
    """
    said = [run.failed for run in job_runs if not run.failed or run.cause == cause]
    if len(said) < 2:
        return None
    flips = sum(1 for a, b in zip(said, said[1:], strict=False) if a != b)
    return flips / (len(said) - 1)


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
