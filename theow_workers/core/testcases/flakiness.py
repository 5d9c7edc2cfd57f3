"""Each test's history in its job, and whether it is flaky: decided from the ledger's runs.

A test's history is its job's runs in which its fate is known, oldest first: it
**failed** the run (the run's report named it failed); it was **flaky** in the run
(it failed, then passed on a rerun within it: Surefire's ``flakyFailure``, a retry
plugin); it **passed** (the run passed, or failed with a report that does not name
it). A failed run that came without a report says nothing of it.

A test is flaky when, first that holds:

1. it failed and passed within one run;
2. it failed on a commit that also passed (a retry of the job, a rerun of the
   workflow): the same code, both ways;
3. it failed alone between passes of its branch (the runs before and after it on
   the branch passed it) on two commits or more, and on more commits than it failed
   again (on a retry of the commit, or on the branch's next commit): failures that
   come and go on commits that did not touch it.

These are ``core.history.flaky``'s evidence for a flaky cause, asked of the test
alone (its failures are the runs' "cause"). A test broken by a change fails again on
the change's next push and on its retries, and on the default branch until the fix,
so it is none of these. Measured on a simulated month of reports
(``benchmarks/fleet_tests.py``, ``docs/junit.md``): precision 0.975 to 1.00, recall
0.99 to 1.00, of the tests that failed twice or more. Its **flip rate** is the share of its
recent known outcomes that differ from the one before (a run it was flaky in counts
as a failure); its **cost** the runs it failed and the minutes those runs took.

>>> runs = [Run(str(i), "o/r", "test", "main", f"s{i}", Outcome.PASSED, float(i))
...         for i in range(1, 6)]
>>> runs[2] = Run("3", "o/r", "test", "main", "s3", Outcome.FAILED, 3.0, cause="log")
>>> job = JobTests("o/r", "test", runs, frozenset({"3"}), [
...     TestOutcome("t.test_upload", "3", FAILED, 3.0, "ConnectionResetError"),
...     TestOutcome("t.test_upload", "5", FLAKY, 5.0, "timed out")])
>>> (found,) = histories(job)
>>> found.flaky, found.reason, found.failed, found.flaky_runs, found.passed
(True, 'failed and passed within run 5', 1, 1, 3)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from theow_client.jsontypes import JsonObject
from theow_workers.core.history import flaky
from theow_workers.core.history.model import Outcome, Run

FAILED = "failed"  # it failed the run
FLAKY = "flaky"  # it failed, then passed on a rerun within the run
PASSED_AFTER_RERUN = "passed-after-rerun"  # it failed on this commit before; this run passed it
PASSED = "passed"  # a known pass (shown in a history, never stored)
OUTCOMES = (FAILED, FLAKY, PASSED_AFTER_RERUN)
TEST = "test"  # the category of a test's failure, as ``core.history`` reads it
ALONE = 2  # failures alone between passes of their branch that make a test flaky


@dataclass(frozen=True)
class TestOutcome:
    """One stored outcome of one test in one run of its job."""

    __test__ = False  # pytest: not a test class

    test: str  # ``classname::name``
    run_id: str
    outcome: str  # one of OUTCOMES
    at: float  # the run's finished_at
    message: str = ""


@dataclass(frozen=True)
class JobTests:
    """A job's runs (oldest first), which of them came with a test report, and the stored
    outcomes of its tests."""

    repo: str
    job: str
    runs: Sequence[Run]
    reported: frozenset[str]  # ids of the runs that came with a report
    outcomes: Sequence[TestOutcome]


@dataclass(frozen=True)
class Settings:
    """The thresholds of :func:`histories`, with their defaults."""

    recent: int = 50  # known outcomes a flip rate is taken over
    shown: int = 20  # outcomes a history keeps to show, newest


DEFAULT_SETTINGS = Settings()


@dataclass(frozen=True)
class Moment:
    """One outcome of a test as a history shows it."""

    at: float
    run: str
    sha: str
    branch: str
    pr: str | None
    outcome: str  # failed, flaky, passed, passed-after-rerun
    message: str = ""

    def to_dict(self) -> JsonObject:
        return {
            "at": self.at,
            "run": self.run,
            "sha": self.sha,
            "branch": self.branch,
            "pr": self.pr,
            "outcome": self.outcome,
            "message": self.message,
        }


@dataclass(frozen=True)
class TestHistory:
    """One test in one job: what it did, whether it is flaky and why, what it cost."""

    __test__ = False

    repo: str
    job: str
    test: str
    failed: int  # runs it failed
    flaky_runs: int  # runs it failed and passed within
    passed: int  # runs it is known to have passed
    first_seen: float  # its first failure (or flaky run) in the history
    last_seen: float  # its last
    flaky: bool
    reason: str  # why it is flaky, or what it is
    flip_rate: float | None = None
    minutes_lost: float = 0.0  # the runs it failed, started to finished, where known
    recent: tuple[Moment, ...] = field(default=())  # newest last

    @property
    def cost(self) -> tuple[int, float]:
        """What ranks flaky tests: the runs they failed, then the minutes those took."""
        return self.failed, self.minutes_lost

    def to_dict(self, *, recent: bool = False) -> JsonObject:
        found: JsonObject = {
            "repo": self.repo,
            "job": self.job,
            "test": self.test,
            "flaky": self.flaky,
            "reason": self.reason,
            "failed": self.failed,
            "flaky_runs": self.flaky_runs,
            "passed": self.passed,
            "flip_rate": self.flip_rate,
            "minutes_lost": round(self.minutes_lost, 1),
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
        }
        if recent:
            found["recent"] = [moment.to_dict() for moment in self.recent]
        return found


def histories(
    job: JobTests, settings: Settings = DEFAULT_SETTINGS, *, tests: frozenset[str] | None = None
) -> list[TestHistory]:
    """The history of each test with an outcome in ``job`` (only ``tests``, when given), in
    the order the tests first failed."""
    index = {run.id: at for at, run in enumerate(job.runs)}
    by_test: dict[str, dict[int, TestOutcome]] = defaultdict(dict)
    reruns: dict[str, set[int]] = defaultdict(set)  # runs that passed it after it failed
    for outcome in job.outcomes:
        at = index.get(outcome.run_id)
        if at is None or (tests is not None and outcome.test not in tests):
            continue
        if outcome.outcome == PASSED_AFTER_RERUN:
            reruns[outcome.test].add(at)
        if outcome.outcome not in (FAILED, FLAKY):
            continue
        known = by_test[outcome.test].get(at)
        if known is None or outcome.outcome == FAILED:  # failed wins over flaky in one run
            by_test[outcome.test][at] = outcome
    seen = _Seen(job)
    found = [
        _history(job, test, marks, reruns[test], seen, settings) for test, marks in by_test.items()
    ]
    return sorted(found, key=lambda h: (h.first_seen, h.test))


class _Seen:
    """Each run of the job as a test sees it when it did not fail it: passed, or said nothing.

    Built once per job: every test's timeline shares these runs and differs only in its
    own failures.
    """

    def __init__(self, job: JobTests) -> None:
        self.runs = job.runs
        self.passed: list[bool] = [not run.failed or run.id in job.reported for run in job.runs]
        self.as_pass: list[Run] = [
            run
            if not run.failed
            else replace(run, outcome=Outcome.PASSED, cause=None)
            if ok
            else replace(run, cause=None)
            for run, ok in zip(job.runs, self.passed, strict=True)
        ]
        self.passes = sum(self.passed)

    def last_known(self, marks: Mapping[int, TestOutcome], count: int) -> list[int]:
        """The indices of the last ``count`` runs that say anything of a test, oldest first."""
        found: list[int] = []
        for i in range(len(self.passed) - 1, -1, -1):
            if self.passed[i] or i in marks:
                found.append(i)
                if len(found) == count:
                    break
        return found[::-1]


def _history(
    job: JobTests,
    test: str,
    marks: Mapping[int, TestOutcome],
    reruns: set[int],
    seen: _Seen,
    settings: Settings,
) -> TestHistory:
    """One test's history from its marks (its failed and flaky runs, by index)."""
    timeline = list(seen.as_pass)  # failed by it (below), passed, or saying nothing of it
    failed_at = [i for i, mark in marks.items() if mark.outcome == FAILED]
    flaky_at = sorted(i for i, mark in marks.items() if mark.outcome == FLAKY)
    for i in failed_at:
        timeline[i] = replace(job.runs[i], outcome=Outcome.FAILED, cause=test, category=TEST)
    failed_at.sort()
    reason = _flaky_reason(timeline, test, flaky_at, failed_at)
    last = seen.last_known(marks, max(settings.recent, settings.shown))
    flaky_set = set(flaky_at)
    said = [
        replace(timeline[i], outcome=Outcome.FAILED, cause=test) if i in flaky_set else timeline[i]
        for i in last[-settings.recent :]
    ]
    moments = [_moment(job.runs[i], marks.get(i), i in reruns) for i in last[-settings.shown :]]
    events = sorted(marks)
    return TestHistory(
        repo=job.repo,
        job=job.job,
        test=test,
        failed=len(failed_at),
        flaky_runs=len(flaky_at),
        passed=seen.passes - sum(1 for i in marks if seen.passed[i]),
        first_seen=job.runs[events[0]].finished_at,
        last_seen=job.runs[events[-1]].finished_at,
        flaky=reason is not None,
        reason=reason or _not_flaky(failed_at, timeline),
        flip_rate=flaky.flip_rate(said, test),
        minutes_lost=sum(_minutes(job.runs[i]) for i in failed_at),
        recent=tuple(moments),
    )


def _flaky_reason(
    timeline: Sequence[Run], test: str, flaky_at: Sequence[int], failed_at: Sequence[int]
) -> str | None:
    if flaky_at:
        return f"failed and passed within run {timeline[flaky_at[0]].id}"
    passed_shas = {run.sha for run in timeline if not run.failed}
    both = next((timeline[i].sha for i in failed_at if timeline[i].sha in passed_shas), None)
    if both is not None:
        return f"failed and passed on the same commit {both[:12]}"
    alone, repeated = _commits(timeline, test, failed_at)
    if alone >= ALONE and alone > repeated:
        return f"failed alone between passes on {alone} commits"
    return None


def _commits(timeline: Sequence[Run], test: str, failed_at: Sequence[int]) -> tuple[int, int]:
    """On how many commits the test failed alone between passes of its branch, and on how
    many it failed again: on a retry of the commit, or on the branch's next commit (what a
    break does, and a flaky test rarely)."""
    by_sha: dict[str, list[int]] = defaultdict(list)
    for i in failed_at:
        by_sha[timeline[i].sha].append(i)
    alone = repeated = 0
    for at in by_sha.values():
        if len(at) > 1 or _next_commit_failed(timeline, at[-1], test):
            repeated += 1
        elif flaky.between_passes(timeline, at[0], test):
            alone += 1
    return alone, repeated


def _next_commit_failed(timeline: Sequence[Run], index: int, test: str) -> bool:
    failed = timeline[index]
    for run in timeline[index + 1 :]:
        mine = run.branch == failed.branch and run.sha != failed.sha
        if mine and (not run.failed or run.cause == test):
            return run.failed
    return False


def _not_flaky(failed_at: Sequence[int], timeline: Sequence[Run]) -> str:
    if not failed_at:
        return "never failed"
    last = timeline[failed_at[-1]]
    return f"failed {len(failed_at)} run(s), last on {last.branch} at {last.sha[:12]}"


def _moment(run: Run, mark: TestOutcome | None, rerun: bool) -> Moment:
    outcome = mark.outcome if mark is not None else PASSED_AFTER_RERUN if rerun else PASSED
    message = mark.message if mark is not None else ""
    return Moment(run.finished_at, run.id, run.sha, run.branch, run.pr, outcome, message)


def _minutes(run: Run) -> float:
    if run.started_at is None or run.started_at > run.finished_at:
        return 0.0
    return (run.finished_at - run.started_at) / 60.0


def flaky_tests(
    jobs: Sequence[JobTests], settings: Settings = DEFAULT_SETTINGS
) -> list[TestHistory]:
    """The flaky tests of ``jobs``, the costliest first (runs failed, then minutes lost)."""
    found = [h for job in jobs for h in histories(job, settings) if h.flaky]
    return sorted(found, key=lambda h: (-h.failed, -h.minutes_lost, -h.last_seen, h.test))
