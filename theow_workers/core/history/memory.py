"""A history held in memory: the runs of a history file, indexed for the classifier's two questions.

Runs are kept by ``(repo, job)`` and, failed ones, by cause, each list sorted by
``finished_at``; a window is two bisections, so a question costs the runs it
returns. ``theow history eval`` adds a file's runs in time order and asks as
it goes; the SQL ledger answers the same questions (``tests/contract``).

>>> from theow_workers.core.history.model import Outcome, Run
>>> history = MemoryHistory()
>>> history.add(Run(id="a", repo="o/r", job="test", branch="main", sha="s1",
...                 outcome=Outcome.PASSED, finished_at=10.0))
>>> history.add(Run(id="b", repo="o/r", job="test", branch="main", sha="s2",
...                 outcome=Outcome.FAILED, finished_at=20.0, cause="c"))
>>> [run.id for run in history.job_runs("o/r", "test", since=0, until=15)]
['a']
>>> [run.id for run in history.cause_failures("c", since=0, until=float("inf"))]
['b']
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from theow_workers.core.history.model import Run


class _Timeline:
    """Runs sorted by ``finished_at`` (ties in the order added), with their times beside them."""

    __slots__ = ("runs", "times")

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.times: list[float] = []

    def add(self, run: Run) -> None:
        if not self.times or run.finished_at >= self.times[-1]:
            self.runs.append(run)  # the common case: runs arrive in time order
            self.times.append(run.finished_at)
            return
        at = bisect_right(self.times, run.finished_at)
        self.times.insert(at, run.finished_at)
        self.runs.insert(at, run)

    def window(self, since: float, until: float) -> Sequence[Run]:
        return self.runs[bisect_left(self.times, since) : bisect_right(self.times, until)]


class MemoryHistory:
    """The :class:`~theow_workers.core.history.ports.History` of runs held in memory."""

    def __init__(self, runs: Iterable[Run] = ()) -> None:
        self._jobs: dict[tuple[str, str], _Timeline] = {}
        self._causes: dict[str, _Timeline] = {}
        self._count = 0
        self._end = float("-inf")
        for run in runs:
            self.add(run)

    def add(self, run: Run) -> None:
        """Keep ``run``; a run added out of time order is placed where its time puts it."""
        self._jobs.setdefault((run.repo, run.job), _Timeline()).add(run)
        if run.failed and run.cause is not None:
            self._causes.setdefault(run.cause, _Timeline()).add(run)
        self._count += 1
        self._end = max(self._end, run.finished_at)

    def __len__(self) -> int:
        return self._count

    @property
    def end(self) -> float:
        """When the latest run finished (``-inf`` for an empty history)."""
        return self._end

    def job_runs(self, repo: str, job: str, *, since: float, until: float) -> Sequence[Run]:
        timeline = self._jobs.get((repo, job))
        return timeline.window(since, until) if timeline is not None else ()

    def cause_failures(self, cause: str, *, since: float, until: float) -> Sequence[Run]:
        timeline = self._causes.get(cause)
        return timeline.window(since, until) if timeline is not None else ()
