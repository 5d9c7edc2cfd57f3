"""The ``queue`` fleet style: a third history, designed apart from ``direct``, ``merged`` and
``workflows`` so that a classifier tuned to them is seen on something else.

What it has that they do not: default branches named ``master`` in some
repositories; merge queues (a pull request is tested once more on a
``gh-readonly-queue/...`` branch, on main's head, and the commit that passes
becomes the default branch's head, the same sha); jobs in a matrix (``unit
(3.11)``, ``unit (3.12)``, ``test (macos)``) that fail together when the code
breaks; scheduled nightly runs of the default branch's head; flaky tests whose
rates are long-tailed (most almost never fail, a few fail one run in five),
that fail in several ways (not only timeouts) and now and then several at once
(a shared fixture); breaks that land on the default branch when two changes
meet, some reverted within hours, others fixed forward over days through
partial fixes; pull requests rebased onto newer main; reruns of a whole
workflow or of its failed jobs only; runner trouble fleet-wide, local to one
runner pool across repositories, local to one repository's service
containers, and lone (a runner lost, a job killed); ten runners' log formats.

The truth follows the definitions (``fleet_check.settle``): the culprit is the
first default-branch commit seen failing, a break seen on one default-branch
run only is flaky there.

    python benchmarks/fleet_history.py --style queue --seed 1 --out h.jsonl.gz --truth t.jsonl
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from fleet_check import settle
from fleet_queue_logs import (
    CHECKERS,
    RUNNERS,
    break_message,
    checker_line,
    checker_log,
    fill,
    flaky_modes,
    infra_log,
    test_log,
    test_name,
)

DAY, HOUR, MINUTE = 86400.0, 3600.0, 60.0
START = 1_772_323_200.0  # 2026-03-01T00:00:00Z, a Sunday
LANGS = list(RUNNERS)


@dataclass
class Test:
    name: str
    rate: float  # how often it fails alone, with no change to blame
    modes: list[str]
    fixture: int | None  # tests sharing a fixture fail together now and then


@dataclass
class Job:
    name: str
    kind: str  # test, build, lint
    pool: str  # ubuntu, macos, self-hosted
    family: str  # the matrix's jobs share one: they run the same tests
    runner: str
    tests: list[Test] = field(default_factory=list)
    required: bool = True  # checked by the merge queue


@dataclass
class Break:
    """Something failing a job family from one default-branch commit on, until mended."""

    family: str
    start: int  # index of the default-branch commit that broke it
    legs: set[str]  # which jobs of the family it fails
    says: list[tuple[int, list[tuple[str, str]]]]  # from commit index: (test or "", message)
    end: int | None = None


@dataclass
class Repo:
    name: str
    default: str
    lang: str
    jobs: list[Job]
    queue: bool
    nightly: bool
    commits: list[str] = field(default_factory=list)
    breaks: list[Break] = field(default_factory=list)


@dataclass
class Pull:
    number: str
    repo: Repo
    base: int
    pushes: int
    change: tuple[str, int, int, list[tuple[str, str]]] | None  # family, from, to, failures
    tries: int = 0


class QueueFleet:
    """One fleet: :meth:`generate` returns its rows and truth."""

    def __init__(self, seed: int, repos: int = 11, days: int = 30, retry: float = 0.35) -> None:
        self.rand = random.Random(seed * 104_729 + 3)
        self.days, self.retry = days, retry
        self.repos = [self._repo(i) for i in range(repos)]
        self.rows: list[dict[str, object]] = []
        self.truth: list[dict[str, object]] = []
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.changed: dict[str, tuple[str, int, int, list[tuple[str, str]]] | None] = {}
        self.outages = self._outages()
        self.fixture_rate = {r.name: self.rand.choice([0.0, 0.004, 0.01]) for r in self.repos}

    def generate(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        end = START + self.days * DAY
        for repo in self.repos:
            self._at(START + self.rand.uniform(0, 3) * HOUR, "land", (repo, None, None))
            t, rate = START + HOUR, self.rand.uniform(2.5, 5.5)  # pull requests a busy day
            while t < end:
                t += self.rand.expovariate(rate) * DAY
                if self.rand.random() < self._busy(t):  # thinned to the hour and the day
                    self._at(t, "open", repo)
            if repo.nightly:
                for day in range(self.days):
                    self._at(START + day * DAY + 2 * HOUR, "nightly", repo)
        while self.events:
            when, _, kind, what = heapq.heappop(self.events)
            if when < end:
                getattr(self, f"_on_{kind}")(when, what)
        self.rows.sort(key=lambda r: float(str(r["finished_at"])))
        branches = {r.name: r.default for r in self.repos}
        settle(self.rows, self.truth, branches)
        return self.rows, self.truth

    # -- the fleet -----------------------------------------------------------------------

    def _repo(self, i: int) -> Repo:
        lang = LANGS[i % len(LANGS)]
        runner = self.rand.choice(RUNNERS[lang])
        lint, compiler = CHECKERS[lang]
        jobs = [
            Job("lint", "lint", "ubuntu", "lint", lint),
            Job("build", "build", "ubuntu", "build", compiler),
        ]
        suite = self._suite(runner, self.rand.randint(40, 140))
        matrix = self.rand.choice(
            [
                ["unit"],
                ["unit (3.11)", "unit (3.12)"],
                ["unit (3.11)", "unit (3.12)", "unit (3.13)"],
                ["test (ubuntu)", "test (macos)"],
                ["test (ubuntu, 20)", "test (ubuntu, 22)", "test (macos, 22)"],
            ]
        )
        for name in matrix:
            pool = "macos" if "macos" in name else "ubuntu"
            jobs.append(Job(name, "test", pool, "unit", runner, self._rates(suite)))
        if self.rand.random() < 0.7:
            tests = self._suite(runner, self.rand.randint(15, 60))
            pool = "self-hosted" if self.rand.random() < 0.5 else "ubuntu"
            jobs.append(
                Job("integration", "test", pool, "integration", runner, self._rates(tests), False)
            )
        queue = self.rand.random() < 0.45
        default = "master" if self.rand.random() < 0.35 else "main"
        name = f"shop-{['core', 'web', 'api', 'ops', 'data', 'pay', 'mobile'][i % 7]}-{i}"
        nightly = self.rand.random() < 0.5
        return Repo(f"northwind/{name}", default, lang, jobs, queue, nightly)

    def _suite(self, runner: str, size: int) -> list[Test]:
        """``size`` tests with names of their own (a suite names each test once)."""
        names: dict[str, None] = {}
        for _ in range(size * 3):
            names.setdefault(test_name(runner, self.rand))
            if len(names) == size:
                break
        return [Test(name, 0.0, [], None) for name in names]

    def _rates(self, suite: list[Test]) -> list[Test]:
        """This job's copy of the suite, each test with its own long-tailed flakiness."""
        out = []
        for test in suite:
            rate = 0.0
            if self.rand.random() < 0.25:  # a Pareto tail: most rare, a few one run in five
                rate = min(0.2, 0.001 * self.rand.paretovariate(1.05))
            fixture = self.rand.randint(0, 2) if self.rand.random() < 0.15 else None
            out.append(Test(test.name, rate, flaky_modes(self.rand), fixture))
        return out

    def _outages(self) -> list[tuple[float, float, str, str | None, float]]:
        """(start, end, kind, where, share of runs hit): fleet, a pool, one repository."""
        found = []
        for kind, count, where_of, minutes, hit in (
            ("forge", (2, 4), lambda: None, (15, 90), 0.55),
            ("registry", (1, 3), lambda: None, (20, 150), 0.45),
            ("pool", (3, 5), lambda: self.rand.choice(["macos", "self-hosted"]), (30, 360), 0.8),
            ("service", (2, 4), lambda: self.rand.choice(self.repos).name, (20, 240), 0.9),
        ):
            for _ in range(self.rand.randint(*count)):
                start = START + self.rand.uniform(0.5, self.days - 0.5) * DAY
                found.append(
                    (start, start + self.rand.uniform(*minutes) * MINUTE, kind, where_of(), hit)
                )
        return found

    def _busy(self, t: float) -> float:
        """Pull requests opened a day: working hours, fewer at weekends."""
        hour, weekday = (t % DAY) / HOUR, int((t - START) // DAY) % 7  # 0: Sunday
        if weekday in (0, 6):
            return 0.15
        return 1.0 if 8 <= hour < 18 else 0.08

    def _at(self, when: float, kind: str, what: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, what))

    # -- events ---------------------------------------------------------------------------

    def _on_open(self, when: float, repo: Repo) -> None:
        if not repo.commits:
            return
        base = max(0, len(repo.commits) - 1 - int(self.rand.expovariate(0.5)))
        change = None
        if self.rand.random() < 0.28:
            family = self.rand.choice(sorted({j.family for j in repo.jobs}))
            first = self.rand.choice([0, 0, 1, 2])
            change = (
                family,
                first,
                first + self.rand.choice([1, 1, 2, 3]),
                self._failing(repo, family),
            )
        self._at(when, "push", Pull(str(100 + self.seq), repo, base, 0, change))

    def _on_push(self, when: float, pull: Pull) -> None:
        repo = pull.repo
        if pull.pushes and self.rand.random() < 0.25:
            pull.base = len(repo.commits) - 1  # rebased onto the default branch's head
        pull.pushes += 1
        branch = f"{['feature', 'fix', 'dev'][int(pull.number) % 3]}/{pull.number}"
        self._workflow(when, repo, self._sha(), branch, pull.base, pull, 1, None)
        if self.rand.random() < 0.5 and pull.pushes < 7:
            self._at(when + self.rand.uniform(0.2, 40) * HOUR, "push", pull)
        elif not self._broken(pull) or self.rand.random() < 0.05:
            self._at(when + self.rand.uniform(0.5, 10) * HOUR, "merge", pull)

    def _on_merge(self, when: float, pull: Pull) -> None:
        repo = pull.repo
        if not repo.queue:
            self._at(when, "land", (repo, pull, None))
            return
        sha, head = self._sha(), len(repo.commits) - 1
        branch = f"gh-readonly-queue/{repo.default}/pr-{pull.number}-{repo.commits[head][:40]}"
        required = [j for j in repo.jobs if j.required]
        red = self._workflow(when, repo, sha, branch, head, None, 1, required, queued=pull)
        pull.tries += 1
        if not red:
            self._at(when + 35 * MINUTE, "land", (repo, pull, sha))
        elif pull.tries < 3:
            self._at(when + self.rand.uniform(0.5, 5) * HOUR, "merge", pull)

    def _on_land(self, when: float, what: tuple[Repo, Pull | None, str | None]) -> None:
        repo, pull, sha = what
        repo.commits.append(sha or self._sha())
        index = len(repo.commits) - 1
        for brk in repo.breaks:
            if brk.end is None and index > brk.start:
                self._mend(brk, index)
        if pull is not None and self._broken(pull):  # merged red: its break is everyone's now
            family, _, _, says = pull.change  # type: ignore[misc]
            if not any(b.family == family and b.end is None for b in repo.breaks):
                legs = {j.name for j in repo.jobs if j.family == family}
                repo.breaks.append(Break(family, index, legs, [(index, says)]))
        elif pull is not None and index > 3 and self.rand.random() < 0.04:
            self._new_break(repo, index, when)
        self._workflow(when, repo, repo.commits[index], repo.default, index, None, 1, None)

    def _on_nightly(self, when: float, repo: Repo) -> None:
        if repo.commits:
            head = len(repo.commits) - 1
            self._workflow(when, repo, repo.commits[head], repo.default, head, None, 1, None)

    def _on_revert(self, when: float, repo: Repo) -> None:
        self._at(when, "land", (repo, None, None))

    def _on_rerun(
        self, when: float, what: tuple[Repo, str, str, int, Pull | None, int, list[Job]]
    ) -> None:
        repo, sha, branch, base, pull, attempt, jobs = what
        self._workflow(when, repo, sha, branch, base, pull, attempt, jobs)

    # -- breaks ---------------------------------------------------------------------------

    def _new_break(self, repo: Repo, index: int, when: float) -> None:
        # A merge queue checks the required jobs: what breaks after it is in the others.
        families = sorted({j.family for j in repo.jobs if not (repo.queue and j.required)})
        if not families:
            return
        family = self.rand.choice(families)
        if any(b.family == family and b.end is None for b in repo.breaks):
            return
        legs = {j.name for j in repo.jobs if j.family == family}
        if len(legs) > 1 and self.rand.random() < 0.3:
            legs = {self.rand.choice(sorted(legs))}  # only one version or one system
        brk = Break(family, index, legs, [(index, self._failing(repo, family))])
        repo.breaks.append(brk)
        if self.rand.random() < 0.5:  # reverted within hours; else fixed forward
            self._at(when + self.rand.uniform(0.4, 5) * HOUR, "revert", repo)
            brk.end = -1  # mended by the next commit, whatever it is

    def _mend(self, brk: Break, index: int) -> None:
        """A commit after the break: mends it (a revert, a fix), changes what it prints, or not."""
        if brk.end == -1:
            brk.end = index
            return
        age = index - brk.start
        if age >= 2 and self.rand.random() < 0.3:
            brk.end = index
        elif self.rand.random() < 0.25:  # a partial fix: the same tests fail otherwise
            last = brk.says[-1][1]
            brk.says.append((index, [(t, break_message(self.rand) if t else m) for t, m in last]))

    def _failing(self, repo: Repo, family: str) -> list[tuple[str, str]]:
        job = next(j for j in repo.jobs if j.family == family)
        if job.kind != "test":
            return [
                ("", checker_line(job.runner, self.rand))
                for _ in range(self.rand.choice([1, 1, 2]))
            ]
        picked = self.rand.sample(job.tests, self.rand.choice([1, 1, 1, 2, 3]))
        return [(t.name, break_message(self.rand)) for t in picked]

    def _broken(self, pull: Pull) -> bool:
        return pull.change is not None and pull.change[1] <= pull.pushes - 1 < pull.change[2]

    # -- one workflow ---------------------------------------------------------------------

    def _workflow(self, when: float, repo: Repo, sha: str, branch: str, base: int, pull: Pull | None,
                  attempt: int, jobs: list[Job] | None, *, queued: Pull | None = None) -> bool:  # fmt: skip
        """Run ``jobs`` (all of the repository's) on a commit; whether any failed."""
        if sha not in self.changed:  # a rerun runs the same code as the first attempt did
            owner = pull or queued
            self.changed[sha] = owner.change if owner is not None and self._broken(owner) else None
        red: list[Job] = []
        for job in jobs or repo.jobs:
            finished = when + self.rand.uniform(0.5, 6) * MINUTE + self.rand.uniform(3, 35) * MINUTE
            origin, culprit, log = self._outcome(repo, job, finished, base, self.changed[sha])
            row: dict[str, object] = {
                "id": f"{repo.name.split('/')[1]}-{self.rand.getrandbits(48):012x}",
                "repo": repo.name, "job": job.name, "branch": branch, "sha": sha,
                "attempt": attempt, "outcome": "failed" if origin else "passed",
                "finished_at": round(finished, 1),
            }  # fmt: skip
            if pull is not None:
                row |= {"pr": pull.number, "base_sha": repo.commits[base]}
            elif queued is not None:
                row["base_sha"] = repo.commits[base]
            if origin:
                row["log"] = log
                self.truth.append({"id": row["id"], "origin": origin, "culprit": culprit})
                red.append(job)
            self.rows.append(row)
        on_default = pull is None and queued is None
        if (
            red
            and queued is None
            and attempt < 3
            and self.rand.random() < (0.6 if on_default else self.retry)
        ):
            again = red if self.rand.random() < 0.55 else list(jobs or repo.jobs)
            later = when + self.rand.uniform(5, 90) * MINUTE
            self._at(later, "rerun", (repo, sha, branch, base, pull, attempt + 1, again))
        return bool(red)

    def _outcome(self, repo: Repo, job: Job, when: float, base: int,
                 change: tuple[str, int, int, list[tuple[str, str]]] | None) -> tuple[str | None, str | None, str]:  # fmt: skip
        """(origin, culprit, log): infra first, then a broken default branch, the change, flaky."""
        # The culprit's own run shows its break: the first commit seen failing is the culprit.
        starts = change is None and any(b.start == base and job.name in b.legs for b in repo.breaks)
        for start, stop, kind, where, hit in self.outages if not starts else ():
            inside = start <= when <= stop and where in (None, job.pool, repo.name)
            if kind == "service" and job.kind != "test":
                inside = False
            if inside and self.rand.random() < hit:
                return "infra", None, infra_log(kind, repo.name, self.rand)
        if not starts and self.rand.random() < 0.002:
            return "infra", None, infra_log("blip", repo.name, self.rand)
        for brk in repo.breaks:
            live = brk.start <= base and (brk.end in (None, -1) or base < brk.end)  # type: ignore[operator]
            if live and job.name in brk.legs:
                says = next(s for at, s in reversed(brk.says) if at <= base)
                return "main", repo.commits[brk.start], self._log(job, says)
        if change is not None and change[0] == job.family:
            return "change", None, self._log(job, change[3])
        failing = [t for t in job.tests if t.rate and self.rand.random() < t.rate]
        fixture = self.fixture_rate[repo.name]
        if fixture and self.rand.random() < fixture:
            group = self.rand.randint(0, 2)
            failing += [t for t in job.tests if t.fixture == group and t not in failing]
        if failing:
            shown = [(t.name, fill(self.rand.choice(t.modes), self.rand)) for t in failing[:6]]
            return "flaky", None, test_log(job.runner, shown, self.rand)
        return None, None, ""

    def _log(self, job: Job, says: list[tuple[str, str]]) -> str:
        if job.kind != "test":
            return checker_log(job.runner, [m for _, m in says], self.rand)
        return test_log(job.runner, says, self.rand)

    def _sha(self) -> str:
        return f"{self.rand.getrandbits(160):040x}"
