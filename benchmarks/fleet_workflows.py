"""The ``workflows`` fleet style: a history simulated event by event, written apart from the others.

Where ``fleet_history.py``'s styles walk each repository's commits, this one
plays a clock: pull requests open in bursts (busy days, quiet weekends), are
pushed to over hours or days on a base taken when they opened (often several
commits behind main, sometimes rebased), and are merged into main, each merge
a main commit that runs the workflow. A workflow runs every job of the
repository; a red one is rerun (its failed jobs, or all of them) some of the
time, a red main more often. Jobs are suites of named tests
(``fleet_suites.py``): a flaky test fails alone, with a message that differs
from run to run; a regression merged into main breaks one or two named tests
(or the build) and stays for days, through fixes that only change what it
prints, until the one that mends it; a change breaks a test or the build in
one pull request. Runner trouble is fleet-wide (the forge, a registry), local
to one repository's self-hosted runners (a full disk, lost runners) or to one
job's service container. Rows arrive as the forge's events would: finished
times in ISO 8601 with the runner's time zone and a skewed clock, not in order.

The truth follows the issue's definitions: a regression's culprit is the first
main commit where the job failed with it; a regression seen failing on one main
commit only, neither retried nor followed by another failing commit, is flaky
there (the pull requests based on it still inherit it: main).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

from fleet_suites import (
    Suite,
    Test,
    broken_message,
    checker_log,
    checker_message,
    flaky_messages,
    infra_log,
    make_test,
    test_log,
    vary,
)

DAY, HOUR, MINUTE = 86400.0, 3600.0, 60.0
START = 1_769_904_000.0  # 2026-02-01T00:00:00Z
LANGS = {"python": ("pytest", "mypy"), "typescript": ("jest", "tsc"), "go": ("go", "govet")}
LANGS["kotlin"] = ("gradle", "javac")
ZONES = [0, 1, 2, -5, -8, 5.5, 9]  # hours from UTC of the runners' clocks
Failing = tuple[str, list[tuple[Test | None, str]]]  # a job, and its tests failing with what


@dataclass
class Regression:
    job: str
    culprit: int  # main commit index
    messages: list[tuple[int, list[tuple[Test | None, str]]]]  # from commit index: what fails
    fixed: int | None = None


@dataclass
class Repo:
    name: str
    lang: str
    zone: float
    jobs: dict[str, Suite]
    main: list[str] = field(default_factory=list)
    regressions: list[Regression] = field(default_factory=list)


@dataclass
class PullRequest:
    number: str
    repo: Repo
    base: int
    pushes: int
    breaks: tuple[str, int, int, list[tuple[Test | None, str]]] | None  # job, from, to, failures


class Workflows:
    """One fleet: :meth:`generate` returns its rows and truth."""

    def __init__(self, seed: int, repos: int = 14, days: int = 30, retry: float = 0.4) -> None:
        self.rand = random.Random(seed * 7919 + 17)
        self.days, self.retry = days, retry
        self.repos = [self._repo(i) for i in range(repos)]
        self.rows: list[dict[str, object]] = []
        self.truth: dict[str, dict[str, object]] = {}
        self.events: list[tuple[float, int, str, object]] = []
        self.outages = self._outages()
        self.seq = 0
        self._base_of: dict[str, int] = {}
        self._pr_failing: dict[str, Failing | None] = {}

    def generate(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        end = START + self.days * DAY
        for repo in self.repos:
            self._at(START + self.rand.uniform(0, 2) * HOUR, "merge", (repo, None))
            t = START
            while t < end:
                t += self.rand.expovariate(9.0) * DAY  # thinned to the day's traffic
                if self.rand.random() < self._traffic(t) / 2.4:
                    self._at(t, "open", repo)
        while self.events:
            when, _, kind, what = heapq.heappop(self.events)
            if when < end:
                getattr(self, f"_on_{kind}")(when, what)
        self._relabel_lone_main_failures()
        rows = [self._stamped(row) for row in self.rows]
        rows.sort(key=lambda row: float(str(row.pop("_arrived"))))
        return rows, [self.truth[str(row["id"])] for row in rows if row["outcome"] == "failed"]

    # -- the fleet ---------------------------------------------------------------------------

    def _repo(self, i: int) -> Repo:
        lang = list(LANGS)[i % len(LANGS)]
        runner, checker = LANGS[lang]
        jobs = {"lint": Suite(runner, checker), "build": Suite(runner, checker)}
        for name in self.rand.sample(["unit", "api", "e2e"], self.rand.randint(1, 3)):
            suite = Suite(runner, checker, [make_test(runner, self.rand) for _ in range(40)])
            for test in self.rand.sample(suite.tests, self.rand.randint(2, 10)):
                test.rate = self.rand.choice([0.003, 0.006, 0.01, 0.02, 0.05, 0.12])
                test.messages = flaky_messages(runner, self.rand)
            jobs[f"ci / {name}"] = suite
        names = ["payments", "web", "mobile-bff", "search", "infra-tools", "billing", "notify"]
        return Repo(f"shop/{names[i % 7]}{i // 7 or ''}", lang, self.rand.choice(ZONES), jobs)

    def _outages(self) -> list[tuple[float, float, str | None, str | None, str]]:
        """(start, end, repo or None, job or None, kind): fleet-wide, one repo's runners, one job."""
        found: list[tuple[float, float, str | None, str | None, str]] = []
        for _ in range(self.rand.randint(4, 7)):
            start = START + self.rand.uniform(1, self.days - 1) * DAY
            kind = self.rand.choice(["hosted", "checkout", "registry"])
            found.append((start, start + self.rand.uniform(30, 240) * MINUTE, None, None, kind))
        for _ in range(self.rand.randint(6, 10)):
            repo = self.rand.choice(self.repos)
            start = START + self.rand.uniform(1, self.days - 1) * DAY
            if self.rand.random() < 0.5:
                kind, job = self.rand.choice(["disk", "hosted"]), None
            else:
                kind, job = (
                    "service",
                    self.rand.choice([j for j in repo.jobs if j.startswith("ci")]),
                )
            found.append((start, start + self.rand.uniform(30, 300) * MINUTE, repo.name, job, kind))
        return found

    def _traffic(self, t: float) -> float:
        """Pull requests a day: few at night and at weekends, bursts on some days."""
        day = int((t - START) // DAY)
        night = 0.1 if not 7 <= (t % DAY) / HOUR < 19 else 1.0
        weekday = (day + 6) % 7  # 2026-02-01 is a Sunday
        burst = 3.0 if random.Random(day * 31).random() < 0.15 else 1.0
        return (0.25 if weekday >= 5 else 1.0) * burst * night

    def _at(self, when: float, kind: str, what: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, what))

    # -- events ------------------------------------------------------------------------------

    def _on_open(self, when: float, repo: Repo) -> None:
        if not repo.main:
            return
        lag = min(len(repo.main) - 1, int(self.rand.expovariate(0.35)))
        breaks = None
        if self.rand.random() < 0.3:
            job = self.rand.choice(list(repo.jobs))
            first = self.rand.randint(0, 2)
            breaks = (job, first, first + self.rand.randint(1, 3), self._broken(repo, job))
        pr = PullRequest(str(1000 + self.seq), repo, len(repo.main) - 1 - lag, 0, breaks)
        self._at(when, "push", pr)

    def _on_push(self, when: float, pr: PullRequest) -> None:
        repo = pr.repo
        if self.rand.random() < 0.2:
            pr.base = len(repo.main) - 1  # rebased on main's head
        failing = None
        if pr.breaks and pr.breaks[1] <= pr.pushes < pr.breaks[2]:
            failing = (pr.breaks[0], pr.breaks[3])
        self._workflow(when, repo, self._sha(), f"feat/{pr.number}", pr, failing)
        pr.pushes += 1
        if self.rand.random() < 0.45 and pr.pushes < 8:
            self._at(when + self.rand.uniform(0.3, 30) * HOUR, "push", pr)
        elif self.rand.random() < 0.8:
            self._at(when + self.rand.uniform(0.5, 6) * HOUR, "merge", (repo, pr))

    def _on_merge(self, when: float, what: tuple[Repo, PullRequest | None]) -> None:
        repo, _ = what
        repo.main.append(sha := self._sha())
        index = len(repo.main) - 1
        for reg in repo.regressions:
            if reg.fixed is None and index > reg.culprit:
                self._mend(reg, index)
        if index > 2 and self.rand.random() < 0.035:
            job = self.rand.choice(list(repo.jobs))
            if not any(r.job == job and r.fixed is None for r in repo.regressions):
                repo.regressions.append(Regression(job, index, [(index, self._broken(repo, job))]))
        self._workflow(when, repo, sha, "main", None, None)

    def _mend(self, reg: Regression, index: int) -> None:
        """A commit after the break: mends it, changes what it prints, or leaves it be."""
        age = index - reg.culprit
        if age >= 2 and self.rand.random() < (0.25 if age < 12 else 0.6):
            reg.fixed = index
        elif self.rand.random() < 0.15:
            tests = [(t, broken_message(self._suite(reg).runner, self.rand) if t else m)
                     for t, m in reg.messages[-1][1]]  # fmt: skip
            reg.messages.append((index, tests))  # a partial fix: the same tests fail otherwise

    def _on_rerun(
        self, when: float, what: tuple[Repo, str, str, PullRequest | None, list[str], int]
    ) -> None:
        repo, sha, branch, pr, jobs, attempt = what
        self._workflow(when, repo, sha, branch, pr, None, jobs=jobs, attempt=attempt)

    # -- one workflow --------------------------------------------------------------------------

    def _workflow(
        self,
        when: float,
        repo: Repo,
        sha: str,
        branch: str,
        pr: PullRequest | None,
        failing: Failing | None,
        *,
        jobs: list[str] | None = None,
        attempt: int = 1,
    ) -> None:
        # A rerun runs the same code: the base the commit had when it was pushed.
        base = self._base_of.setdefault(sha, pr.base if pr else len(repo.main) - 1)
        if pr is not None and failing is None and attempt > 1:
            failing = self._pr_failing.get(sha)
        if pr is not None:
            self._pr_failing[sha] = failing
        red = []
        for job in jobs or list(repo.jobs):
            start = when + self.rand.uniform(0.1, 8 if self._traffic(when) > 1 else 2) * MINUTE
            finished = start + self.rand.uniform(2, 30) * MINUTE
            origin, culprit, log = self._outcome(repo, job, finished, base, pr, failing)
            row = {"id": f"gh-{self.rand.getrandbits(40):010x}", "repo": repo.name, "job": job,
                   "branch": branch, "sha": sha, "attempt": attempt, "outcome": "failed" if origin else "passed",
                   "finished_at": finished}  # fmt: skip
            if pr is not None:
                row |= {"pr": pr.number, "base_sha": repo.main[pr.base]}
            if origin:
                row["log"] = log
                self.truth[str(row["id"])] = {"id": row["id"], "origin": origin, "culprit": culprit}
                red.append(job)
            self.rows.append(row)
        if red and attempt < 3:
            chance = 0.75 if pr is None else self.retry
            if self.rand.random() < chance:
                again = red if self.rand.random() < 0.6 else list(repo.jobs)  # failed jobs, or all
                later = when + self.rand.uniform(10, 120) * MINUTE
                self._at(later, "rerun", (repo, sha, branch, pr, again, attempt + 1))

    def _outcome(
        self,
        repo: Repo,
        job: str,
        when: float,
        base: int,
        pr: PullRequest | None,
        failing: Failing | None,
    ) -> tuple[str | None, Regression | None, str]:
        """(origin, culprit, log): infra first, then a broken main, then the change, then flaky."""
        # The culprit's own run shows the break (so it is the first commit seen failing).
        starts = pr is None and any(r.job == job and r.culprit == base for r in repo.regressions)
        for start, stop, where, only, kind in self.outages:
            if (
                not starts
                and start <= when <= stop
                and where in (None, repo.name)
                and only in (None, job)
            ) and self.rand.random() < (0.6 if where is None else 0.85):
                return "infra", None, infra_log(kind, self.rand)
        suite = repo.jobs[job]
        for reg in repo.regressions:
            if reg.job == job and reg.culprit <= base and (reg.fixed is None or base < reg.fixed):
                tests = next(t for at, t in reversed(reg.messages) if at <= base)
                return "main", reg, self._log(suite, tests)
        if failing is not None and failing[0] == job:
            return "change", None, self._log(suite, failing[1])
        flaky = [t for t in suite.tests if t.rate and self.rand.random() < t.rate]
        if flaky:
            shown = [(t, self._vary(self.rand.choice(t.messages))) for t in flaky]
            return "flaky", None, test_log(suite, shown, self.rand)
        return None, None, ""

    def _broken(self, repo: Repo, job: str) -> list[tuple[Test | None, str]]:
        suite = repo.jobs[job]
        if not suite.tests or self.rand.random() < 0.2:  # the build breaks, or the lint
            return [(None, checker_message(suite.checker, job == "lint", self.rand))]
        tests = self.rand.sample(suite.tests, 1 if self.rand.random() < 0.7 else 2)
        return [(t, broken_message(suite.runner, self.rand)) for t in tests]

    def _log(self, suite: Suite, failures: list[tuple[Test | None, str]]) -> str:
        if failures[0][0] is None:
            return checker_log([m for _, m in failures], self.rand)
        return test_log(suite, [(t, m) for t, m in failures if t is not None], self.rand)

    def _suite(self, reg: Regression) -> Suite:
        return next(r.jobs[reg.job] for r in self.repos if reg in r.regressions)

    def _vary(self, text: str) -> str:
        return vary(text, self.rand)

    # -- the truth as the issue defines it, and the rows as the forge sends them ---------------

    def _relabel_lone_main_failures(self) -> None:
        """Culprit: the first main commit seen failing; seen once on main only: flaky there."""
        seen: dict[int, list[dict[str, object]]] = {}
        for row in self.rows:
            truth = self.truth.get(str(row["id"]))
            if truth and truth["origin"] == "main":
                seen.setdefault(id(truth["culprit"]), []).append(row)
        regs = {id(r): r for repo in self.repos for r in repo.regressions}
        for key, rows in seen.items():
            reg, repo = regs[key], next(r for r in self.repos if regs[key] in r.regressions)
            order = {sha: i for i, sha in enumerate(repo.main)}
            on_main = sorted({order[str(r["sha"])] for r in rows if r["branch"] == "main"})
            runs_on_main = [r for r in rows if r["branch"] == "main"]
            culprit = repo.main[on_main[0]] if on_main else repo.main[reg.culprit]
            lone = len(on_main) == 1 and len(runs_on_main) == 1
            for row in rows:
                truth = self.truth[str(row["id"])]
                truth["culprit"] = culprit
                if lone and row["branch"] == "main":
                    truth["origin"], truth["culprit"] = "flaky", None

    def _stamped(self, row: dict[str, object]) -> dict[str, object]:
        """Finished time in the runner's zone with its clock a little off; when the event arrived."""
        repo = next(r for r in self.repos if r.name == row["repo"])
        true = float(str(row["finished_at"]))
        skewed = true + self.rand.uniform(-20, 20)
        zone = timezone(timedelta(hours=repo.zone))
        row["_arrived"] = true + self.rand.expovariate(1 / 90)
        row["finished_at"] = datetime.fromtimestamp(skewed, UTC).astimezone(zone).isoformat()
        return row

    def _sha(self) -> str:
        return f"{self.rand.getrandbits(160):040x}"
