"""How a cause recurs around one failed run: in how many unrelated changes, and again in its own.

A flaky test fails now and then in changes that did not touch it, with passes
in between; code that fails does it every time it runs. These are read from
the runs of the failed run's job (:func:`recurrence`), per failed test: a run
failing tests A and B (the cause ``A+B``, see
:func:`~theow_workers.core.history.cause.causes_per_test`) counts towards A's history
and B's, and is as intermittent as the least intermittent of them (a run where
a flaky test failed beside a test this change broke is the change's).

>>> from theow_workers.core.history.model import Outcome, Run
>>> def run(id, pr, outcome="failed", cause="a"):
...     return Run(id=id, repo="o/r", job="t", branch=f"pr-{pr}", sha=id, outcome=Outcome(outcome),
...                finished_at=float(len(id)), cause=cause if outcome == "failed" else None, pr=pr)
>>> runs = [run("1", "7", cause="a+b"), run("22", "8", "passed"), run("333", "9", cause="a")]
>>> seen = recurrence(runs[2], runs, "main", order_slack=0.0)
>>> seen.contexts, seen.flapped
(2, False)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

from theow_workers.core.history.cause import causes_per_test
from theow_workers.core.history.model import Run
from theow_workers.core.history.streak import MainLine

# A GitHub merge queue's branch: the pull request it tests is in its name.
MERGE_QUEUE = re.compile(r"gh-readonly-queue/.+/pr-(\d+)-[0-9a-f]+$")


@dataclass(frozen=True)
class Recurrence:
    """What a failed run's job says of its cause (of its least intermittent test's)."""

    # The changes (pull requests, branches, lone main commits) it failed in, its own counted.
    contexts: int
    flapped: bool  # it failed again after a pass in the run's own change


def recurrence(
    run: Run,
    runs: Sequence[Run],
    default_branch: str,
    *,
    order_slack: float,
    line: MainLine | None = None,
) -> Recurrence:
    """How ``run``'s cause recurs in ``runs`` (its job's), leaving out failures a broken
    default branch explains. ``line``: the default branch judged for ``run``'s cause, when
    already read."""
    assert run.cause is not None
    parts = causes_per_test(run.cause)
    by_part: dict[str, set[str]] = {part: set() for part in parts}  # part -> causes naming it
    for other in runs:
        if other.cause is None or not other.failed:
            continue
        if other.cause == run.cause:
            for part in parts:
                by_part[part].add(other.cause)
            continue
        for part in causes_per_test(other.cause):
            if part in by_part:
                by_part[part].add(other.cause)
    contexts = None
    for part, causes in by_part.items():
        causes.add(run.cause)
        if line is not None and causes == {run.cause}:
            judged = line
        else:
            judged = MainLine(runs, default_branch, part, order_slack=order_slack, causes=causes)
        count = _contexts(run, runs, judged, causes, default_branch)
        contexts = count if contexts is None else min(contexts, count)
    return Recurrence(contexts or 1, _flapped(run, runs, default_branch))


def context(run: Run, default_branch: str) -> str:
    """Where a run belongs: its pull request, its branch, or its commit on the default branch.

    A merge queue's run belongs to the pull request it tests: GitHub names its branch
    after it (``gh-readonly-queue/main/pr-128-<sha>``) and sends no pull request with it.

    >>> from theow_workers.core.history.model import Outcome
    >>> queued = Run(id="1", repo="o/r", job="t", branch="gh-readonly-queue/main/pr-128-9f2c",
    ...              sha="9f2c", outcome=Outcome.FAILED, finished_at=1.0)
    >>> context(queued, "main")
    'pr:128'
    """
    if run.pr is not None:
        return f"pr:{run.pr}"
    if run.branch != default_branch:
        queued = MERGE_QUEUE.match(run.branch)
        return f"pr:{queued.group(1)}" if queued else f"branch:{run.branch}"
    return f"main:{run.sha}"


def repeated(run: Run, runs: Sequence[Run], default_branch: str) -> bool:
    """Whether the change failed this way again: on a retry of its commit, or on its next push.

    A flaky test failing twice running is rare; code that fails does it every time.
    """
    own = context(run, default_branch)
    outcomes: dict[str, str] = {}  # commit -> "f" failed this way only, "p" passed, "o" other
    order: list[str] = []
    retried = 0
    for other in runs:
        if context(other, default_branch) != own:
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


def flip_rate(run: Run, runs: Sequence[Run]) -> float:
    """The share of the job's runs in the window that failed this way."""
    same = sum(1 for r in runs if r.failed and r.cause == run.cause)
    return round(same / len(runs), 3) if runs else 0.0


def _contexts(
    run: Run, runs: Sequence[Run], line: MainLine, causes: set[str], default_branch: str
) -> int:
    """In how many changes a failure among ``causes`` happened, not from a broken main."""
    found = {context(run, default_branch)}
    for other in runs:
        if other.failed and other.cause in causes:
            where = context(other, default_branch)
            if where not in found and not line.explains(other):
                found.add(where)
    return len(found)


def _flapped(run: Run, runs: Sequence[Run], default_branch: str) -> bool:
    """Whether, in ``run``'s own change, the cause failed, then the job passed, then it failed.

    A change fixed and broken again the same way is rare; a flaky test does it often.
    """
    if run.on_branch(default_branch):
        return False
    seen: list[str] = []  # the own change's outcomes: "f" failed this way, "p" passed
    for other in runs:
        if other.pr == run.pr and other.branch == run.branch:
            if not other.failed:
                seen.append("p")
            elif other.cause == run.cause:
                seen.append("f")
    return "fpf" in "".join(outcome for outcome, _ in groupby(seen))
