"""A simulated month of test reports: are the flaky tests found, and only they, once each has
failed twice?

Repositories of two or three jobs, each a suite of 80 to 300 named tests
(``fleet_suites.make_test``) of which a few are flaky: each fails 2 to 20% of its runs,
alone. Pull requests open through the working day on main's head (one or two a day in a
quiet repository, five to ten in a busy one), are pushed to one to five times over hours
and mostly merged (each merge a main commit that runs every job); some commits go to
main directly. Every push runs every job; a job's report says which
tests failed and, where the runner reruns failed tests within the run (a third of the
jobs, as Surefire's ``rerunFailingTestsCount``), which failed and then passed. A change
breaks one to three tests of a job in about one pull request in seven, on one of its
pushes, until a later push fixes it (or the pull request is merged broken: main fails
them on every commit until a fix lands a few commits later, and the pull requests based
on it fail them too); a commit pushed to main breaks some now and then. A failed run is
retried on the same commit a third of the time (half on main); one run in fifty fails
before its tests run (no report). Seeded, deterministic.

Each run becomes what the ledger keeps (``theow_workers.store.testcases``): the run,
whether it came with a report, its failed and flaky tests. ``core.testcases.flakiness``
then decides each test, as ``theow tests flaky`` does:

* at the month's end: of the tests that failed (or were flaky within a run) twice or
  more, those it calls flaky (precision) and the flaky ones it finds (recall);
* at each test's second failure: the same, deciding every such test from the runs
  finished by the time its second failing run did (so nothing later helps).

    python benchmarks/fleet_tests.py --seed 1 --json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet_suites import make_test

from theow_workers.core.history.model import Outcome, Run
from theow_workers.core.testcases.flakiness import (
    FAILED,
    FLAKY,
    JobTests,
    TestOutcome,
    histories,
)

DAY, HOUR, MINUTE = 86400.0, 3600.0, 60.0
START = 1_769_904_000.0  # 2026-02-01T00:00:00Z
RUNNERS = ("pytest", "jest", "go", "gradle")
TARGETS = {"precision": 0.95, "recall": 0.90}


@dataclass
class Job:
    repo: str
    name: str
    tests: list[str]
    flaky: dict[str, float]  # test -> its failure rate per run
    reruns: bool  # the runner reruns a failed test within the run (up to twice)


@dataclass
class Repo:
    name: str
    jobs: list[Job]
    busy: tuple[int, int]  # pull requests opened on a working day, at least and at most
    main: list[str] = field(default_factory=list)  # main's commits, oldest first
    broken: dict[str, set[str]] = field(default_factory=dict)  # main commit -> tests it breaks


@dataclass
class Fleet:
    """What the ledger holds: each job's runs, reported runs and test outcomes."""

    runs: dict[tuple[str, str], list[Run]] = field(default_factory=lambda: defaultdict(list))
    reported: set[str] = field(default_factory=set)
    outcomes: dict[tuple[str, str], list[TestOutcome]] = field(
        default_factory=lambda: defaultdict(list)
    )


class Simulation:
    def __init__(self, seed: int, repos: int, days: int) -> None:
        self.rand = random.Random(seed)
        self.days = days
        self.fleet = Fleet()
        self.counter = 0
        self.repos = [self._repo(f"acme/app-{i}") for i in range(repos)]

    # The fleet

    def _repo(self, name: str) -> Repo:
        rand = self.rand
        jobs = []
        for j in range(rand.choice((2, 3))):
            runner = rand.choice(RUNNERS)
            names: list[str] = []
            while len(names) < rand.randint(80, 300):
                test = make_test(runner, rand).name
                if test not in names:
                    names.append(test)
            flaky = {t: rand.uniform(0.02, 0.20) for t in rand.sample(names, rand.randint(1, 4))}
            jobs.append(Job(name, f"{runner}-{j}", names, flaky, reruns=rand.random() < 1 / 3))
        return Repo(name, jobs, rand.choice(((1, 2), (2, 5), (5, 10))))

    def _sha(self) -> str:
        self.counter += 1
        return f"{self.rand.getrandbits(160):040x}"

    # One run of every job

    def _workflow(
        self, repo: Repo, sha: str, at: float, broken: set[str], **where: str | None
    ) -> None:
        """Every job of the repository on ``sha`` (``where``: branch, pr, base_sha), each
        retried on the same commit some of the time when it fails."""
        for job in repo.jobs:
            attempt, finished = 1, at
            while self._run(job, sha, finished, broken, attempt, where):
                retry = 0.5 if where["pr"] is None else 1 / 3
                if attempt >= 3 or self.rand.random() >= retry:
                    break
                attempt += 1
                finished += self.rand.uniform(5, 40) * MINUTE

    def _run(
        self,
        job: Job,
        sha: str,
        at: float,
        broken: set[str],
        attempt: int,
        where: dict[str, str | None],
    ) -> bool:
        """One run of ``job`` and what its report says; whether it failed."""
        rand = self.rand
        self.counter += 1
        rid = f"run-{self.counter}"
        failed: list[str] = [t for t in job.tests if t in broken]
        flaky: list[str] = []
        for test, rate in job.flaky.items():
            if test in broken or rand.random() >= rate:
                continue
            if job.reruns and (rand.random() >= rate or rand.random() >= rate):
                flaky.append(test)  # passed on one of its two reruns
            else:
                failed.append(test)
        setup = rand.random() < 0.02  # failed before its tests ran: no report
        outcome = Outcome.FAILED if failed or setup else Outcome.PASSED
        cause = "setup" if setup else "tests" if failed else None
        started = at - rand.uniform(3, 25) * MINUTE
        run = Run(rid, job.repo, job.name, str(where["branch"]), sha, outcome, at, cause=cause,
                  pr=where["pr"], base_sha=where["base_sha"], attempt=attempt,
                  started_at=started)  # fmt: skip
        self._keep(job, run)
        if setup:
            return True
        self.fleet.reported.add(rid)
        key = (job.repo, job.name)
        for test in failed[:100]:  # the client lists at most 100
            self.fleet.outcomes[key].append(TestOutcome(test, rid, FAILED, at))
        for test in flaky[:50]:
            self.fleet.outcomes[key].append(TestOutcome(test, rid, FLAKY, at))
        return bool(failed)

    def _keep(self, job: Job, run: Run) -> None:
        self.fleet.runs[(job.repo, job.name)].append(run)

    # A month of one repository

    def _breaks(self, repo: Repo) -> set[str]:
        """One to three tests of one job that a change breaks."""
        job = self.rand.choice(repo.jobs)
        return set(self.rand.sample(job.tests, self.rand.randint(1, 3)))

    def play(self) -> None:
        for repo in self.repos:
            self._play(repo)
        for runs in self.fleet.runs.values():
            runs.sort(key=lambda r: r.finished_at)

    def _play(self, repo: Repo) -> None:
        rand = self.rand
        first = self._sha()
        repo.main.append(first)
        repo.broken[first] = set()
        events: list[tuple[float, str, object]] = []
        for day in range(self.days):
            weekend = day % 7 in (5, 6)
            for _ in range(rand.randint(0, 1) if weekend else rand.randint(*repo.busy)):
                opened = START + day * DAY + rand.uniform(8, 18) * HOUR
                events.append((opened, "pr", None))
            for _ in range(0 if weekend else rand.randint(0, 2)):
                events.append((START + day * DAY + rand.uniform(8, 19) * HOUR, "push", None))
        events.sort(key=lambda e: e[0])
        pending: list[tuple[float, set[str] | None]] = []  # merges to come: when, what breaks
        number = 0
        for at, kind, _ in events:
            pending = self._merge_due(repo, at, pending)
            if kind == "push":
                self._main_commit(repo, at, self._breaks(repo) if rand.random() < 0.04 else None)
                continue
            number += 1
            pending.append(self._pull_request(repo, str(number), at))
        self._merge_due(repo, float("inf"), pending)

    def _main_commit(self, repo: Repo, at: float, breaks: set[str] | None) -> None:
        """A commit on main: it keeps main's break (a fix, a few commits on, mends it)."""
        broken = set(repo.broken[repo.main[-1]])
        if broken and self.rand.random() < 0.35:
            broken = set()  # the fix
        if breaks:
            broken |= breaks
        sha = self._sha()
        repo.main.append(sha)
        repo.broken[sha] = broken
        self._workflow(repo, sha, at, broken, pr=None, branch="main", base_sha=None)

    def _pull_request(
        self, repo: Repo, number: str, opened: float
    ) -> tuple[float, set[str] | None]:
        """Its pushes, each running every job; when it is merged, and whether it merges broken."""
        rand = self.rand
        base = repo.main[-1]
        inherited = repo.broken[base]
        pushes = rand.randint(1, 5)
        breaks = self._breaks(repo) if rand.random() < 1 / 7 else set()
        broken_from = rand.randrange(pushes) if breaks else pushes
        fixed_at = broken_from + rand.randint(1, 3)
        at = opened
        for push in range(pushes):
            own = breaks if broken_from <= push < fixed_at else set()
            where = {"pr": number, "branch": f"change-{number}", "base_sha": base}
            self._workflow(repo, self._sha(), at, own | inherited, **where)
            at += rand.uniform(0.3, 6) * HOUR
        if rand.random() >= 0.8:
            return (float("inf"), None)  # closed unmerged
        merged_broken = breaks if fixed_at >= pushes else set()
        return (at, merged_broken)

    def _merge_due(
        self, repo: Repo, now: float, pending: list[tuple[float, set[str] | None]]
    ) -> list[tuple[float, set[str] | None]]:
        due = sorted(
            (p for p in pending if p[0] <= now and p[0] != float("inf")), key=lambda p: p[0]
        )
        for at, breaks in due:
            self._main_commit(repo, at, breaks or None)
        return [p for p in pending if p[0] > now and p[0] != float("inf")]

    # The truth

    def flaky_truth(self) -> set[tuple[str, str, str]]:
        return {(j.repo, j.name, t) for r in self.repos for j in r.jobs for t in j.flaky}


def _jobs(fleet: Fleet, until: float = float("inf")) -> list[JobTests]:
    found = []
    reported = frozenset(fleet.reported)
    for (repo, job), runs in fleet.runs.items():
        times = [r.finished_at for r in runs]
        end = bisect_right(times, until)
        outcomes = [o for o in fleet.outcomes.get((repo, job), ()) if o.at <= until]
        found.append(JobTests(repo, job, runs[:end], reported, outcomes))
    return found


def _score(
    called: set[tuple[str, str, str]],
    population: set[tuple[str, str, str]],
    truth: set[tuple[str, str, str]],
) -> dict[str, float | int]:
    flagged = called & population
    flaky = truth & population
    true = len(flagged & truth)
    return {
        "tests": len(population),
        "flaky": len(flaky),
        "called_flaky": len(flagged),
        "false_positives": len(flagged - truth),
        "missed": len(flaky - flagged),
        "precision": round(true / len(flagged), 4) if flagged else 1.0,
        "recall": round(true / len(flaky), 4) if flaky else 1.0,
    }


def evaluate(sim: Simulation) -> dict[str, object]:
    fleet, truth = sim.fleet, sim.flaky_truth()
    started = time.process_time()
    jobs = _jobs(fleet)
    month = {(h.repo, h.job, h.test): h for job in jobs for h in histories(job)}
    seconds = time.process_time() - started
    events: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for (repo, job), outcomes in fleet.outcomes.items():
        for o in outcomes:
            if o.outcome in (FAILED, FLAKY):
                events[(repo, job, o.test)].append(o.at)
    twice = {key for key, times in events.items() if len(set(times)) >= 2}
    called = {k for k, h in month.items() if h.flaky}
    at_end = _score(called, twice, truth)
    # The hard part of it: the tests that failed only two or three times in the month.
    few = {key for key in twice if len(set(events[key])) <= 3}
    few_at_end = _score(called, few, truth)
    at_second = _score(_early(fleet, twice, events, 0.0), twice, truth)
    a_day_after = _score(_early(fleet, twice, events, DAY), twice, truth)
    runs = sum(len(r) for r in fleet.runs.values())
    failed = sum(1 for r in fleet.runs.values() for run in r if run.failed)
    kinds = Counter(o.outcome for outs in fleet.outcomes.values() for o in outs)
    return {
        "config": {
            "repos": len(sim.repos),
            "days": sim.days,
            "jobs": sum(len(r.jobs) for r in sim.repos),
            "tests": sum(len(j.tests) for r in sim.repos for j in r.jobs),
            "flaky_tests": len(truth),
        },
        "runs": runs,
        "failed_runs": failed,
        "outcomes": dict(kinds),
        "at_month_end": at_end,
        "failed_2_or_3_times": few_at_end,
        "a_day_after_second_failure": a_day_after,
        "at_second_failure": at_second,
        "decide_cpu_s": round(seconds, 3),
        "targets": TARGETS,
        "pass": at_end["precision"] >= TARGETS["precision"]
        and at_end["recall"] >= TARGETS["recall"],
        "misses": _misses(month, twice, truth),
    }


def _early(
    fleet: Fleet,
    twice: set[tuple[str, str, str]],
    events: dict[tuple[str, str, str], list[float]],
    delay: float,
) -> set[tuple[str, str, str]]:
    """The tests called flaky from the runs finished by ``delay`` after their second failure."""
    called: set[tuple[str, str, str]] = set()
    by_job: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    for repo, job, test in twice:
        by_job[(repo, job)].append((sorted(set(events[(repo, job, test)]))[1] + delay, test))
    for key, tests in by_job.items():
        one = _only(fleet, key)
        for when, test in tests:
            (job,) = _jobs(one, until=when)
            if any(h.flaky for h in histories(job, tests=frozenset({test}))):
                called.add((*key, test))
    return called


def _only(fleet: Fleet, key: tuple[str, str]) -> Fleet:
    one = Fleet()
    one.runs[key] = fleet.runs[key]
    one.reported = {run.id for run in fleet.runs[key] if run.id in fleet.reported}
    one.outcomes[key] = fleet.outcomes[key]
    return one


def _misses(month: dict, twice: set, truth: set) -> list[dict[str, object]]:  # type: ignore[type-arg]
    found = []
    for key in sorted(twice):
        h = month.get(key)
        if h is None or h.flaky == (key in truth):
            continue
        found.append(
            {
                "test": "/".join(key),
                "truth": "flaky" if key in truth else "broken",
                "reason": h.reason,
                "failed": h.failed,
                "flaky_runs": h.flaky_runs,
            }
        )
    return found[:20]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repos", type=int, default=12)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    sim = Simulation(args.seed, args.repos, args.days)
    sim.play()
    result = {"seed": args.seed, **evaluate(sim)}
    if args.json:
        print(json.dumps(result))
    else:
        for name in ("at_month_end", "a_day_after_second_failure", "at_second_failure"):
            s = result[name]
            assert isinstance(s, dict)
            print(
                f"{name}: precision {s['precision']:.3f}, recall {s['recall']:.3f} "
                f"({s['flaky']} flaky of {s['tests']} tests failing twice or more)"
            )
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
