"""Flaky causes: failures of a job that pass again with no commit to blame, with a flip rate.

One incident per job and cause (``core.history.incidents`` explains the three
kinds). Evidence, in order: a failure the classification decided ``flaky``; an
undecided failure whose commit passed on another attempt; two undecided
failures standing alone between passes of the job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

from theow_workers.core.history.incident import Building, Kind, Rules
from theow_workers.core.history.model import Decision, Origin, Outcome, Run


def flaky(
    job_runs: Sequence[Run], decided: Mapping[str, Decision], rules: Rules, fleet: set[str]
) -> list[Building]:
    """Causes of the job that fail and pass with no commit to blame: one incident each."""
    passed_shas = {run.sha for run in job_runs if not run.failed}
    by_cause: dict[str, list[int]] = defaultdict(list)
    for index, run in enumerate(job_runs):
        if run.failed and run.cause and run.id not in fleet:
            by_cause[run.cause].append(index)
    made: list[Building] = []
    for cause, where in by_cause.items():
        eligible = [i for i in where if _may_be_flaky(decided.get(job_runs[i].id))]
        if not eligible or not _flaky_evidence(job_runs, cause, eligible, decided, passed_shas):
            continue
        building = Building(Kind.FLAKY, job_runs[eligible[0]], job_runs[0].repo, job_runs[0].job)
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
        alone += between_passes(job_runs, i, cause)
    return alone >= 2


def between_passes(job_runs: Sequence[Run], index: int, cause: str) -> bool:
    """Whether the nearest runs of the same branch that say anything of ``cause`` passed,
    on both sides. Only the same branch: a pull request that broke a test keeps failing
    on its own pushes while others pass, and is no flaky test."""
    branch = job_runs[index].branch
    before = _neighbour(job_runs, range(index - 1, -1, -1), cause, branch)
    after = _neighbour(job_runs, range(index + 1, len(job_runs)), cause, branch)
    return before is not None and after is not None and not before.failed and not after.failed


def _neighbour(
    job_runs: Sequence[Run], indices: Iterable[int], cause: str, branch: str
) -> Run | None:
    for i in indices:
        run = job_runs[i]
        if run.branch == branch and (run.outcome is Outcome.PASSED or run.cause == cause):
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
    flips = sum(1 for a, b in pairwise(said) if a != b)
    return flips / (len(said) - 1)
