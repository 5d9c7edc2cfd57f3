"""One cause on a job's default branch: its commits in order, and the streaks where it failed.

A :class:`MainLine` reads a job's runs once for one cause: each default-branch
commit (in the order its first run finished) passed (some run of it passed),
failed this way (some run failed with the cause, none passed), or neither
(only other causes failed). A :class:`Streak` is a stretch of commits failing
this way with no pass in between: its first commit is the culprit, the first
commit passing after it the fix.

>>> from theow_workers.core.history.model import Outcome, Run
>>> def run(sha, outcome, at, cause=None, **kw):
...     return Run(id=f"{sha}{at}", repo="o/r", job="t", branch=kw.pop("branch", "main"), sha=sha,
...                outcome=Outcome(outcome), finished_at=at, cause=cause, **kw)
>>> line = MainLine([run("a", "passed", 1), run("b", "failed", 2, "c"),
...                  run("c", "failed", 3, "c"), run("d", "passed", 4)], "main", "c")
>>> streak = line.streak_at("c")
>>> streak.culprit, streak.fixed_by, streak.length, streak.open
('b', 'd', 2, False)
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from theow_workers.core.history.model import Outcome, Run

PASS, FAIL, OTHER = "pass", "fail", "other"


@dataclass(frozen=True)
class Streak:
    """Consecutive default-branch commits failing one way (other failures between them allowed)."""

    shas: tuple[str, ...]  # the commits failing this way, oldest first
    fixed_by: str | None  # the first commit passing after them, once one has
    repeated: bool  # failed again: on a second commit or on a retry of one
    based: bool  # a change based on one of its commits failed this way too

    @property
    def confirmed(self) -> bool:
        """The same code failed this way twice: not a one-off."""
        return self.repeated or self.based

    @property
    def culprit(self) -> str:
        return self.shas[0]

    @property
    def length(self) -> int:
        return len(self.shas)

    @property
    def open(self) -> bool:
        """No commit has passed since: the default branch still fails this way, as far as known."""
        return self.fixed_by is None


class MainLine:
    """The default-branch commits of one job, judged for one cause (see the module's note)."""

    def __init__(
        self,
        runs: Sequence[Run],
        default_branch: str,
        cause: str,
        *,
        order_slack: float = 0.0,
        causes: Collection[str] | None = None,
    ) -> None:
        """``causes``: the causes that count as failing this way (``cause`` alone by default;
        a test's line counts the runs failing it beside others too)."""
        self.cause = cause
        same = causes if causes is not None else (cause,)
        self.default_branch = default_branch
        self.shas: list[str] = []
        self.times: list[float] = []
        self.states: list[str] = []
        self.failures: list[int] = []  # failed runs of the cause, per commit
        self._index: dict[str, int] = {}
        self._streaks: dict[int, Streak] = {}  # by a commit of it, once read
        self._explained: dict[str, bool] = {}  # by a change's base commit, once read
        based: list[Run] = []
        index, states, failures = self._index, self.states, self.failures
        passed = Outcome.PASSED
        # One pass over every run of the job in the window: written for speed (no property
        # calls), since each decision reads a job's runs this way a few times.
        for r in runs:
            if r.pr is not None or r.branch != default_branch:
                if r.cause in same and r.outcome is not passed:
                    based.append(r)
                continue
            at = index.get(r.sha)
            if at is None:
                at = index[r.sha] = len(self.shas)
                self.shas.append(r.sha)
                self.times.append(r.finished_at)
                states.append(OTHER)
                failures.append(0)
            if r.outcome is passed:
                states[at] = PASS
            elif r.cause in same:
                failures[at] += 1
                if states[at] != PASS:
                    states[at] = FAIL
        self._reorder(order_slack)
        # Changes failing this way, by the default-branch commit their base is (or was then).
        self._based: dict[int, int] = {}
        for r in based:
            at = self._base_index(r)
            if at is not None:
                self._based[at] = self._based.get(at, 0) + 1

    def _reorder(self, slack: float) -> None:
        """A commit passing within ``slack`` after one failing this way is taken as the older.

        Commits are ordered by when their first run finished; two commits pushed minutes
        apart may finish the other way round. A commit after a failing one fails too unless
        it fixes it, and a fix is not written, pushed and run within minutes of the break's
        own run: the passing one is the older commit.
        """
        states, times = self.states, self.times
        for at in range(len(states) - 1):
            if states[at] == FAIL and states[at + 1] == PASS and times[at + 1] - times[at] <= slack:
                shas, failures = self.shas, self.failures
                shas[at], shas[at + 1] = shas[at + 1], shas[at]
                states[at], states[at + 1] = states[at + 1], states[at]
                failures[at], failures[at + 1] = failures[at + 1], failures[at]
                self._index[self.shas[at]], self._index[self.shas[at + 1]] = at, at + 1

    def streak_at(self, sha: str) -> Streak | None:
        """The streak a default-branch commit failing this way is part of, or None."""
        at = self._index.get(sha)
        if at is None or self.states[at] != FAIL:
            return None
        return self._streak(at)

    def streak_before(self, base_sha: str | None, when: float) -> Streak | None:
        """The streak failing at a change's base, or before it with no pass since, or None.

        The base is ``base_sha`` when the job ran on it, else the last default-branch
        commit whose run finished by ``when``.
        """
        at = self._index.get(base_sha) if base_sha is not None else None
        if at is None:
            at = self._last_by(when)
        while at is not None and at >= 0:
            if self.states[at] == PASS:
                return None
            if self.states[at] == FAIL:
                return self._streak(at)
            at -= 1
        return None

    def explains(self, run: Run) -> bool:
        """Whether a failure of the cause comes from the default branch failing this way."""
        if run.on_branch(self.default_branch):
            streak = self.streak_at(run.sha)
            return streak is not None and streak.confirmed
        if run.base_sha is None or run.base_sha not in self._index:
            return self.streak_before(run.base_sha, run.finished_at) is not None
        found = self._explained.get(run.base_sha)
        if found is None:
            found = self._explained[run.base_sha] = (
                self.streak_before(run.base_sha, run.finished_at) is not None
            )
        return found

    def _streak(self, at: int) -> Streak:
        found = self._streaks.get(at)
        if found is None:
            found = self._streaks[at] = self._read_streak(at)
        return found

    def _read_streak(self, at: int) -> Streak:
        first = last = at
        index = at - 1
        while index >= 0 and self.states[index] != PASS:
            if self.states[index] == FAIL:
                first = index
            index -= 1
        index = at + 1
        fixed_by = None
        while index < len(self.states):
            if self.states[index] == PASS:
                fixed_by = self.shas[index]
                break
            if self.states[index] == FAIL:
                last = index
            index += 1
        span = range(first, last + 1)
        shas = tuple(self.shas[i] for i in span if self.states[i] == FAIL)
        repeated = len(shas) >= 2 or any(self.failures[i] >= 2 for i in span)
        based = any(self._based.get(i, 0) for i in span)
        return Streak(shas, fixed_by, repeated, based)

    def _base_index(self, run: Run) -> int | None:
        at = self._index.get(run.base_sha) if run.base_sha is not None else None
        return at if at is not None else self._last_by(run.finished_at)

    def _last_by(self, when: float) -> int | None:
        """The last commit whose first run finished by ``when`` (commits are in that order)."""
        at = bisect_right(self.times, when) - 1
        return at if at >= 0 else None
