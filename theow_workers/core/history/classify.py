"""Whose failure it is: the origin of one failed run, decided from the runs around it.

:func:`decide` answers from what a :class:`~theow_workers.core.history.ports.History`
holds up to ``until``: at verdict time ``until`` is the run's own ``finished_at``
(``origin_then``), later it is the end of the history (the origin as it stands).
The questions, in the order they are asked (first answer wins):

1. ``infra``: the run's category is an infrastructure one (a matched rule's, or
   the lines' own: name resolution, a registry's 5xx, a full disk); or its cause
   failed jobs of ``infra_repos`` repositories within ``infra_window``; or
   ``infra_jobs`` jobs of its repository at once, in two or more unrelated
   changes on two or more bases (one commit failing its jobs one way, a test
   matrix, is its code; so are changes based on one commit failing alike).
2. ``flaky``: the same job passed on the same commit (a retry, or another run of it).
3. ``main``: on the default branch, the cause keeps failing on the next commits
   (or on a retry), unless it is a known flaky test (a named test failing in
   ``flaky_known`` unrelated changes) that failed on at most ``flaky_streak``
   commits; on a pull request, the cause fails on the default branch at its base
   (the main runs at ``base_sha``; without them, the last main commit run before
   it), or before it with no pass in between. The culprit is the first
   default-branch commit of that streak (read back up to ``max_lookback`` when the
   streak began before the window; a commit passing within ``order_slack`` after a
   failing one is taken as the older); ``fixed_by`` the first one passing after it.
4. ``flaky``: the cause fails intermittently: in ``flaky_contexts`` or more pull
   requests, branches or lone main commits (``flaky_known`` for a cause naming no
   test), or again after a pass in one (and a known flaky test even where it failed
   twice running). A run failing several tests is as intermittent as the least
   intermittent of them, each test's history read through the runs failing it
   beside others (``core.history.recurrence``).
5. ``main`` for a cause that has just started failing on the default branch
   (nothing later known yet), except a named test failing there for the first
   time: ``flaky`` until a retry, the next commit or another job of its commit fails
   it too.
6. ``unknown`` when the job has no other run to compare with; ``flaky`` on the
   default branch (it failed once, the next commit passed); ``flaky`` for a named
   test that failed the way flaky tests fail (a timeout, a refused connection, a
   deadlock: ``core.history.cause.FLAKY_LINE``) and not again on its commit or its
   change's next push; else ``change``.

A test failing the same way in another job of its commit (a test matrix's other
version or system) is its code: never taken for flaky by steps 3 to 6.

The :class:`Settings` hold every window and threshold, with their defaults.
How sure each origin is, measured, is in ``docs/history.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from theow_workers.core.history.cause import causes_per_test
from theow_workers.core.history.model import Decision, Origin, Run
from theow_workers.core.history.ports import History
from theow_workers.core.history.recurrence import context, flip_rate, recurrence, repeated
from theow_workers.core.history.streak import MainLine, Streak

HOUR = 3600.0
DAY = 24 * HOUR
INFINITY = float("inf")
# The categories of a cause naming failed tests: a test's, or a test failing the way flaky
# tests fail (``core.history.cause.FLAKY_LINE``).
TEST, FLAKY = "test", "flaky"
NAMED = frozenset({TEST, FLAKY})


@dataclass(frozen=True)
class Settings:
    """The windows and thresholds of :func:`decide` (seconds, counts), with their defaults."""

    # How far from a run its job's runs and its cause's failures are read, both ways.
    lookback: float = 14 * DAY
    # ... and how far back, at most, for the culprit of a default branch broken for longer.
    max_lookback: float = 90 * DAY
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
    # ... a named test failing in this many is a known flaky test: flaky even where it failed
    # twice running, and where it failed on at most ``flaky_streak`` default-branch commits
    # before passing (a compiler's error is never taken for flaky this way).
    flaky_known: int = 3
    flaky_streak: int = 2
    # Default-branch commits whose first runs finished this close may have run out of order.
    order_slack: float = HOUR / 2
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
    branches: Mapping[str, str] | None = None,
) -> Decision:
    """The origin of the failed ``run`` from ``history``'s runs finished by ``until``.

    ``origin_then`` is ``decide(run, history, until=run.finished_at)``; the
    origin as it stands, ``decide(run, history)``. ``history`` holds ``run``.
    ``default_branch`` is ``run``'s repository's; ``branches`` other repositories'
    where theirs differs (``master``), read when one cause fails several of them.
    """
    if not run.failed:
        raise ValueError(f"run {run.id}: passed; only a failed run has an origin")
    start = run.finished_at - settings.lookback
    end = min(until, run.finished_at + settings.lookback)
    runs = history.job_runs(run.repo, run.job, since=start, until=end)
    others = branches or {}
    infra = _infra(run, history, lambda repo: others.get(repo, default_branch), settings, end)
    if infra is not None:
        return infra
    retried = next((r for r in runs if r.sha == run.sha and not r.failed and r.id != run.id), None)
    if retried is not None:
        return Decision(
            Origin.FLAKY,
            f"passed on the same commit {run.sha[:12]} (attempt {retried.attempt})",
            flip_rate=flip_rate(run, runs),
        )
    if run.cause is None:
        return Decision(Origin.UNKNOWN, "no log to tell the cause by")
    on_main = run.on_branch(default_branch)
    # The same test failing in another job of the commit (a test matrix's other version or
    # system) is its code failing: a flaky test rarely fails everywhere at once.
    beside = _beside(run, history, end)
    lookback, read = settings.lookback, runs
    while True:
        line = MainLine(read, default_branch, run.cause, order_slack=settings.order_slack)
        if on_main:
            streak = line.streak_at(run.sha)
        else:
            streak = line.streak_before(run.base_sha, run.started_at or run.finished_at)
        # A default branch broken since before the window: read further back for the culprit.
        if streak is None or streak.culprit != line.shas[0] or lookback >= settings.max_lookback:
            break
        lookback = min(2 * lookback, settings.max_lookback)
        further = history.job_runs(run.repo, run.job, since=run.finished_at - lookback, until=end)
        if len(further) == len(read):
            break  # nothing earlier
        read = further
    if streak is not None and streak.repeated:
        if not on_main or streak.length > settings.flaky_streak or run.category not in NAMED:
            return _main(streak, on_main)
        contexts = recurrence(
            run, runs, default_branch, order_slack=settings.order_slack, line=line
        ).contexts
        if contexts < settings.flaky_known or run.category not in NAMED or beside:
            return _main(streak, on_main)
        since = "then passed" if not streak.open else "no more yet"
        return Decision(
            Origin.FLAKY,
            f"failed on {streak.length} commit(s) of the default branch, {since}; "
            f"it fails now and then in {contexts} unrelated changes",
            flip_rate=flip_rate(run, runs),
        )
    seen = recurrence(run, runs, default_branch, order_slack=settings.order_slack, line=line)
    contexts, named = seen.contexts, run.category in NAMED
    # A test fails now and then; a compiler's or a linter's message recurring in other
    # changes is more often those changes making one mistake.
    enough = settings.flaky_contexts if named else settings.flaky_known
    if not beside and (
        (contexts >= settings.flaky_known and named)
        or ((seen.flapped or contexts >= enough) and not repeated(run, runs, default_branch))
    ):
        return Decision(
            Origin.FLAKY,
            "fails now and then in unrelated changes, with passes in between",
            flip_rate=flip_rate(run, runs),
        )
    lone_test = (
        on_main and streak is not None and not streak.based and run.category in NAMED and not beside
    )
    if streak is not None and not lone_test and (streak.open or streak.based or not on_main):
        # Just started on the default branch (nothing later known yet), or a change
        # failing as its base did: the same code failing twice the same way.
        return _main(streak, on_main)
    if not any(context(r, default_branch) != context(run, default_branch) for r in runs):
        return Decision(Origin.UNKNOWN, "no other run of this job to compare with")
    if on_main:
        return Decision(
            Origin.FLAKY,
            "failed once on the default branch; the next commit passed",
            flip_rate=flip_rate(run, runs),
        )
    if run.category == FLAKY and not beside and not repeated(run, runs, default_branch):
        return Decision(
            Origin.FLAKY,
            "failed the way flaky tests fail (waiting, racing, a service not up), "
            "not again on its commit or the change's next push; the default branch does not",
            flip_rate=flip_rate(run, runs),
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
    of its cause (now failing on main); its job's recent failures of any test it
    failed (again in another change, flaky); the recent failures of its cause
    anywhere (one cause across repositories is infrastructure; in another job of
    its commit, its code).
    """
    since = run.finished_at - settings.revise_window
    found: dict[str, Run] = {}
    on_main = run.on_branch(default_branch)
    tests = set(causes_per_test(run.cause)) if run.cause is not None else set()
    for other in history.job_runs(run.repo, run.job, since=since, until=run.finished_at):
        if not other.failed or other.id == run.id:
            continue
        if (
            other.sha == run.sha
            or (on_main and other.on_branch(default_branch))
            or (other.cause is not None and not tests.isdisjoint(causes_per_test(other.cause)))
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


def _beside(run: Run, history: History, end: float) -> bool:
    """Whether another job of ``run``'s commit failed the same way (by ``end``)."""
    assert run.cause is not None
    near = history.cause_failures(
        run.cause, since=run.finished_at - DAY, until=min(end, run.finished_at + DAY)
    )
    return any(r.sha == run.sha and r.repo == run.repo and r.job != run.job for r in near)


def _infra(
    run: Run, history: History, branch_of: Callable[[str], str], settings: Settings, end: float
) -> Decision | None:
    if run.category is not None and run.category.lower() in settings.infra_categories:
        return Decision(Origin.INFRA, f"the cause is infrastructure ({run.category})")
    if run.cause is None:
        return None
    window = max(settings.infra_window, settings.infra_local_window)
    near = history.cause_failures(
        run.cause, since=run.finished_at - window, until=min(end, run.finished_at + window)
    )
    broken = _BrokenMain(history, run.cause, branch_of, settings, end)
    if not _enough(run, near, settings):
        return None  # too few at once even before the broken default branches are set aside
    repos = {
        r.repo
        for r in near
        if abs(r.finished_at - run.finished_at) <= settings.infra_window and not broken(r)
    }
    if len(repos) >= settings.infra_repos:
        return Decision(Origin.INFRA, f"the same cause failed {len(repos)} repositories at once")
    local = [
        r
        for r in near
        if r.repo == run.repo
        and abs(r.finished_at - run.finished_at) <= settings.infra_local_window
        and not broken(r)
    ]
    jobs = {r.job for r in local}
    # One commit failing its jobs one way is its code failing in each (a test matrix's
    # versions and systems), and so are changes based on one commit failing alike (its
    # code, which they carry): runner trouble fails unrelated changes on other bases.
    changes = {context(r, branch_of(r.repo)) for r in local}
    bases = {r.base_sha or r.sha for r in local}
    if len(jobs) >= settings.infra_jobs and len(changes) >= 2 and len(bases) >= 2:
        return Decision(
            Origin.INFRA,
            f"the same cause failed {len(jobs)} jobs of the repository at once, "
            f"in {len(changes)} unrelated changes",
        )
    return None


def _enough(run: Run, near: Sequence[Run], settings: Settings) -> bool:
    """Whether the failures near ``run`` reach either infrastructure threshold at all."""
    repos = {r.repo for r in near if abs(r.finished_at - run.finished_at) <= settings.infra_window}
    jobs = {
        r.job
        for r in near
        if r.repo == run.repo
        and abs(r.finished_at - run.finished_at) <= settings.infra_local_window
    }
    return len(repos) >= settings.infra_repos or len(jobs) >= settings.infra_jobs


class _BrokenMain:
    """Whether a failure comes from its job's default branch failing this way on several commits.

    Such failures do not count towards infrastructure: two repositories broken
    the same way (a generic compiler message) are not an outage.
    """

    def __init__(
        self,
        history: History,
        cause: str,
        branch_of: Callable[[str], str],
        settings: Settings,
        end: float,
    ) -> None:
        self.history, self.cause, self.settings, self.end = history, cause, settings, end
        self.branch_of = branch_of
        self.lines: dict[tuple[str, str], MainLine] = {}

    def __call__(self, run: Run) -> bool:
        line = self.lines.get((run.repo, run.job))
        default_branch = self.branch_of(run.repo)
        if line is None:
            runs = self.history.job_runs(
                run.repo,
                run.job,
                since=run.finished_at - self.settings.lookback,
                until=min(self.end, run.finished_at + self.settings.lookback),
            )
            line = MainLine(runs, default_branch, self.cause, order_slack=self.settings.order_slack)
            self.lines[(run.repo, run.job)] = line
        if run.on_branch(default_branch):
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
