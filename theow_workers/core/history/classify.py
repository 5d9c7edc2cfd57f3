"""Whose failure it is: the origin of one failed run, decided from the runs around it.

:func:`decide` answers from what a :class:`~theow_workers.core.history.ports.History`
holds up to ``until``: at verdict time ``until`` is the run's own ``finished_at``
(``origin_then``), later it is the end of the history (the origin as it stands).
The questions, in the order they are asked (first answer wins):

1. ``infra``: the run's category is an infrastructure one (a matched rule's, or
   the lines' own: name resolution, a registry's 5xx, a full disk); or its cause
   failed jobs of ``infra_repos`` repositories within ``infra_window``; or
   ``infra_jobs`` jobs of its repository at once.
2. ``flaky``: the same job passed on the same commit (a retry, or another run of it).
3. ``main``: on the default branch, the cause keeps failing on the next commits
   (or has just started: nothing later is known yet); on a pull request, the
   cause fails on the default branch at its base (the main runs at ``base_sha``;
   without them, the last main commit run before it), or before it with no pass
   in between. The culprit is the first default-branch commit of that streak;
   ``fixed_by`` the first one passing after it.
4. ``flaky``: on the default branch, the cause failed once and the next commit
   passed; anywhere, the cause fails intermittently: in ``flaky_contexts`` or more
   pull requests, branches or lone main commits, or again after a pass in one.
5. ``unknown`` when the job has no other run to compare with, else ``change``.

The :class:`Settings` hold every window and threshold, with their defaults.
How sure each origin is, measured, is in ``docs/history.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby

from theow_workers.core.history.model import Decision, Origin, Run
from theow_workers.core.history.ports import History
from theow_workers.core.history.streak import MainLine, Streak

HOUR = 3600.0
DAY = 24 * HOUR
INFINITY = float("inf")


@dataclass(frozen=True)
class Settings:
    """The windows and thresholds of :func:`decide` (seconds, counts), with their defaults."""

    # How far from a run its job's runs and its cause's failures are read, both ways.
    lookback: float = 14 * DAY
    # One cause failing jobs of this many repositories within the window is infrastructure.
    infra_window: float = HOUR
    infra_repos: int = 3
    # ... or this many jobs of one repository within this window.
    infra_local_window: float = HOUR / 2
    infra_jobs: int = 3
    # A run whose category (a matched rule's, or the lines' own) is one of these is infra.
    infra_categories: frozenset[str] = field(
        default_factory=lambda: frozenset({"infra", "infrastructure", "network", "runner"})
    )
    # A cause failing in this many pull requests, branches or lone main commits is flaky.
    flaky_contexts: int = 2
    # How far back a revision looks for the failures a new run may change.
    revise_window: float = 2 * DAY


DEFAULT_SETTINGS = Settings()


def decide(
    run: Run,
    history: History,
    *,
    default_branch: str = "main",
    settings: Settings = DEFAULT_SETTINGS,
    until: float = INFINITY,
) -> Decision:
    """The origin of the failed ``run`` from ``history``'s runs finished by ``until``.

    ``origin_then`` is ``decide(run, history, until=run.finished_at)``; the
    origin as it stands, ``decide(run, history)``. ``history`` holds ``run``.
    """
    if not run.failed:
        raise ValueError(f"run {run.id}: passed; only a failed run has an origin")
    start = run.finished_at - settings.lookback
    end = min(until, run.finished_at + settings.lookback)
    runs = history.job_runs(run.repo, run.job, since=start, until=end)
    infra = _infra(run, history, default_branch, settings, end)
    if infra is not None:
        return infra
    retried = next((r for r in runs if r.sha == run.sha and not r.failed and r.id != run.id), None)
    if retried is not None:
        return Decision(
            Origin.FLAKY,
            f"passed on the same commit {run.sha[:12]} (attempt {retried.attempt})",
            flip_rate=_flip_rate(run, runs),
        )
    if run.cause is None:
        return Decision(Origin.UNKNOWN, "no log to tell the cause by")
    line = MainLine(runs, default_branch, run.cause)
    on_main = run.on_branch(default_branch)
    if on_main:
        streak = line.streak_at(run.sha)
    else:
        streak = line.streak_before(run.base_sha, run.started_at or run.finished_at)
    if streak is not None and streak.repeated:
        return _main(streak, on_main)
    if not _repeated(run, runs, default_branch) and _intermittent(
        run, runs, line, default_branch, settings
    ):
        return Decision(
            Origin.FLAKY,
            "fails now and then in unrelated changes, with passes in between",
            flip_rate=_flip_rate(run, runs),
        )
    if streak is not None and (streak.open or streak.based or not on_main):
        # Just started on the default branch (nothing later known yet), or a change
        # failing as its base did: the same code failing twice the same way.
        return _main(streak, on_main)
    if not any(_context(r, default_branch) != _context(run, default_branch) for r in runs):
        return Decision(Origin.UNKNOWN, "no other run of this job to compare with")
    if on_main:
        return Decision(
            Origin.FLAKY,
            "failed once on the default branch; the next commit passed",
            flip_rate=_flip_rate(run, runs),
        )
    return Decision(Origin.CHANGE, "the default branch does not fail this way; this change does")


def revisable(
    run: Run,
    history: History,
    *,
    default_branch: str = "main",
    settings: Settings = DEFAULT_SETTINGS,
) -> list[Run]:
    """The earlier failed runs whose origin ``run`` (just added) may change, oldest first.

    Failed runs of its job on the same commit (a retry passing makes them
    flaky); with ``run`` on the default branch, its job's recent failures
    there (a streak grows, or ends: flaky, fixed) and the pull requests' failures
    of its cause (now failing on main); the recent failures of its cause
    anywhere (one cause across repositories is infrastructure; again in another
    change, flaky).
    """
    since = run.finished_at - settings.revise_window
    found: dict[str, Run] = {}
    on_main = run.on_branch(default_branch)
    for other in history.job_runs(run.repo, run.job, since=since, until=run.finished_at):
        if not other.failed or other.id == run.id:
            continue
        if (
            other.sha == run.sha
            or (on_main and other.on_branch(default_branch))
            or (run.cause is not None and other.cause == run.cause)
        ):
            found[other.id] = other
    if run.failed and run.cause is not None:
        window = max(settings.infra_window, settings.revise_window)
        for other in history.cause_failures(
            run.cause, since=run.finished_at - window, until=run.finished_at
        ):
            if other.id != run.id:
                found[other.id] = other
    return sorted(found.values(), key=lambda r: r.finished_at)


def _infra(
    run: Run, history: History, default_branch: str, settings: Settings, end: float
) -> Decision | None:
    if run.category is not None and run.category.lower() in settings.infra_categories:
        return Decision(Origin.INFRA, f"the cause is infrastructure ({run.category})")
    if run.cause is None:
        return None
    window = max(settings.infra_window, settings.infra_local_window)
    near = history.cause_failures(
        run.cause, since=run.finished_at - window, until=min(end, run.finished_at + window)
    )
    broken = _BrokenMain(history, run.cause, default_branch, settings, end)
    wide = [r for r in near if abs(r.finished_at - run.finished_at) <= settings.infra_window]
    # Whether a failure comes from a broken main costs a read of its job's runs: asked only
    # when enough repositories (or jobs) failed this way to matter.
    failing = len({r.repo for r in wide})
    if failing >= settings.infra_repos and _enough(wide, "repo", settings.infra_repos, broken):
        return Decision(Origin.INFRA, f"the same cause failed {failing} repositories at once")
    local = [
        r
        for r in near
        if r.repo == run.repo
        and abs(r.finished_at - run.finished_at) <= settings.infra_local_window
    ]
    jobs = {r.job for r in local}
    if len(jobs) >= settings.infra_jobs and _enough(local, "job", settings.infra_jobs, broken):
        return Decision(
            Origin.INFRA, f"the same cause failed {len(jobs)} jobs of the repository at once"
        )
    return None


def _enough(runs: Sequence[Run], by: str, most: int, broken: _BrokenMain) -> bool:
    """Whether ``most`` distinct repositories (or jobs) of ``runs`` failed, not from a broken main."""
    found: set[str] = set()
    for r in runs:
        key = r.repo if by == "repo" else r.job
        if key not in found and not broken(r):
            found.add(key)
            if len(found) >= most:
                return True
    return False


class _BrokenMain:
    """Whether a failure comes from its job's default branch failing this way on several commits.

    Such failures do not count towards infrastructure: two repositories broken
    the same way (a generic compiler message) are not an outage.
    """

    def __init__(
        self, history: History, cause: str, default_branch: str, settings: Settings, end: float
    ) -> None:
        self.history, self.cause, self.settings, self.end = history, cause, settings, end
        self.default_branch = default_branch
        self.lines: dict[tuple[str, str], MainLine] = {}

    def __call__(self, run: Run) -> bool:
        line = self.lines.get((run.repo, run.job))
        if line is None:
            runs = self.history.job_runs(
                run.repo,
                run.job,
                since=run.finished_at - self.settings.lookback,
                until=min(self.end, run.finished_at + self.settings.lookback),
            )
            line = MainLine(runs, self.default_branch, self.cause)
            self.lines[(run.repo, run.job)] = line
        if run.on_branch(self.default_branch):
            streak = line.streak_at(run.sha)
        else:
            streak = line.streak_before(run.base_sha, run.finished_at)
        return streak is not None and streak.length >= 2


def _main(streak: Streak, on_main: bool) -> Decision:
    where = "fails on the default branch" if on_main else "fails the same way on the default branch"
    return Decision(
        Origin.MAIN,
        f"{where} since {streak.culprit[:12]}",
        culprit=streak.culprit,
        fixed_by=streak.fixed_by,
    )


def _context(run: Run, default_branch: str) -> str:
    """Where a run belongs: its pull request, its branch, or its commit on the default branch."""
    if run.pr is not None:
        return f"pr:{run.pr}"
    if run.branch != default_branch:
        return f"branch:{run.branch}"
    return f"main:{run.sha}"


def _intermittent(
    run: Run, runs: Sequence[Run], line: MainLine, default_branch: str, settings: Settings
) -> bool:
    """Whether the cause failed in other changes (not from a broken main), or again after a pass.

    A change fixed and broken again the same way is rare; a flaky test does it often.
    """
    own = _context(run, default_branch)
    contexts = {own}
    seen: list[str] = []  # the own context's outcomes: "f" failed this way, "p" passed
    for other in runs:
        where = _context(other, default_branch)
        if where == own and not run.on_branch(default_branch):
            if not other.failed:
                seen.append("p")
            elif other.cause == run.cause:
                seen.append("f")
        if other.failed and other.cause == run.cause and not line.explains(other):
            contexts.add(where)
    flapped = "fpf" in "".join(outcome for outcome, _ in groupby(seen))
    return flapped or len(contexts) >= settings.flaky_contexts


def _repeated(run: Run, runs: Sequence[Run], default_branch: str) -> bool:
    """Whether the change failed this way again: on a retry of its commit, or on its next push.

    A flaky test failing twice running is rare; code that fails does it every time.
    """
    own = _context(run, default_branch)
    outcomes: dict[str, str] = {}  # commit -> "f" failed this way only, "p" passed, "o" other
    order: list[str] = []
    retried = 0
    for other in runs:
        if _context(other, default_branch) != own:
            continue
        if other.sha not in outcomes:
            order.append(other.sha)
            outcomes[other.sha] = "o"
        if not other.failed:
            outcomes[other.sha] = "p"
        elif other.cause == run.cause and outcomes[other.sha] != "p":
            outcomes[other.sha] = "f"
            retried += other.sha == run.sha
    if retried >= 2:
        return True
    at = order.index(run.sha) if run.sha in order else -1
    beside = [order[i] for i in (at - 1, at + 1) if at >= 0 and 0 <= i < len(order)]
    return any(outcomes[sha] == "f" for sha in beside)


def _flip_rate(run: Run, runs: Sequence[Run]) -> float:
    """The share of the job's runs in the window that failed this way."""
    same = sum(1 for r in runs if r.failed and r.cause == run.cause)
    return round(same / len(runs), 3) if runs else 0.0
