"""A simulated fleet's CI history with known truth: what ``theow history eval`` is measured on.

Repositories with a default branch and pull requests; each commit runs every
job of its repository. Failures come from four sources, each labelled:
regressions pushed to main and fixed 1 to 12 commits later (``main``, with the
culprit; pull requests based on a broken commit inherit them), failures a pull
request causes and fixes in a later push (``change``), flaky tests, most of
them rare, each failing in more than one way (``flaky``), and runner or
network trouble, fleet-wide and local to one repository (``infra``). A failed
run is retried a little under half the time. Logs are what the tools print
(pytest, jest, go test, tsc, cargo, maven, npm, docker, git), with the
volatile parts (paths, durations, ids, ports) that differ between runs.

Two styles make histories differently, so a classifier tuned to one is seen
on the other: ``direct`` (commits pushed to main, pull requests based on the
head of main, runs in time order) and ``merged`` (main advances by merging
pull requests, pull requests based on older commits, fewer retries but
culprit runs retried, other rates and timings, rows written out of order).
Two more are written apart, in modules of their own: ``workflows``
(``fleet_workflows.py``) and ``queue`` (``fleet_queue.py``).

    python benchmarks/fleet_history.py --seed 1 --out fleet.jsonl.gz --truth truth.jsonl
    theow history eval fleet.jsonl.gz --truth truth.jsonl --out results.jsonl --json
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_check import default_branches, problems, settle
from fleet_logs import LANGUAGES, Tool, infra_log, tool_for
from fleet_queue import QueueFleet
from fleet_workflows import Workflows

DAY = 86400.0
HOUR = 3600.0
START = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class Style:
    """The rates and timings one kind of fleet has."""

    name: str
    repos: int = 12
    days: int = 30
    main_commits_per_day: float = 2.2  # direct pushes (direct) or merges (merged)
    prs_per_day: float = 2.0
    pushes_per_pr: tuple[int, int] = (1, 5)
    merge_prs: bool = False  # main advances by merging pull requests
    base_lag: int = 0  # pull requests based up to this many commits behind main's head
    regressions_per_repo: tuple[int, int] = (2, 4)
    fix_after: tuple[int, int] = (1, 12)  # commits
    pr_breaks: float = 0.3  # share of pull requests that break a job on some push
    flaky_tests_per_job: tuple[int, int] = (3, 8)
    flaky_rates: tuple[float, ...] = (0.004, 0.008, 0.012, 0.02, 0.03, 0.06)
    retry: float = 0.42  # a failed run is retried with this probability (up to twice)
    retry_culprit: float = 0.42  # ... the culprit commit's own failing run
    fleet_outages: int = 4
    local_outages: int = 4
    outage_minutes: tuple[int, int] = (20, 90)
    outage_hit: float = 0.7  # share of runs an outage fails
    job_minutes: tuple[int, int] = (3, 25)
    shuffle: bool = False  # rows written in no particular order


STYLES = {
    "direct": Style("direct"),
    "merged": Style(
        "merged",
        repos=14,
        main_commits_per_day=1.5,
        prs_per_day=2.0,
        pushes_per_pr=(1, 7),
        merge_prs=True,
        base_lag=8,
        regressions_per_repo=(1, 5),
        pr_breaks=0.25,
        flaky_tests_per_job=(2, 12),
        flaky_rates=(0.002, 0.005, 0.01, 0.015, 0.04, 0.1),
        retry=0.35,
        retry_culprit=0.8,
        fleet_outages=3,
        local_outages=6,
        outage_minutes=(10, 180),
        outage_hit=0.5,
        job_minutes=(2, 45),
        shuffle=True,
    ),
}


@dataclass
class Job:
    name: str
    tool: Tool
    flaky: list[tuple[float, list[str]]] = field(default_factory=list)  # (rate, failure modes)


@dataclass
class Repo:
    name: str
    language: str
    jobs: list[Job]
    main: list[tuple[str, float]] = field(default_factory=list)  # (sha, time)
    # job name -> [(culprit index, fix index, log)]
    regressions: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Outage:
    start: float
    end: float
    repo: str | None  # None: fleet-wide
    kind: str


class Fleet:
    """One simulated fleet: call :meth:`generate` for its rows and truth."""

    def __init__(self, style: Style, seed: int) -> None:
        self.style = style
        self.rand = random.Random(seed)
        self.rows: list[dict[str, object]] = []
        self.truth: list[dict[str, object]] = []
        self._ids = 0

    def generate(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        s = self.style
        repos = [self._repo(i) for i in range(s.repos)]
        outages = self._outages(repos)
        end = START + s.days * DAY
        for repo in repos:
            self._main_line(repo, end)
            self._regressions(repo)
            for index, (sha, when) in enumerate(repo.main):
                self._push(repo, outages, sha, when, "main", None, None, index, None)
            for _ in range(int(s.prs_per_day * s.days * self.rand.uniform(0.7, 1.3))):
                self._pull_request(repo, outages, end)
        if not s.shuffle:
            order = sorted(range(len(self.rows)), key=lambda i: self.rows[i]["finished_at"])  # type: ignore[arg-type,return-value]
            self.rows = [self.rows[i] for i in order]
        else:
            self.rand.shuffle(self.rows)
        settle(self.rows, self.truth)
        return self.rows, self.truth

    def _repo(self, i: int) -> Repo:
        language = LANGUAGES[i % len(LANGUAGES)]
        name = f"acme/{language}-{['api', 'web', 'core', 'cli', 'sdk', 'etl', 'auth'][i % 7]}-{i}"
        names = ["build", "test", "lint", "integration"][: self.rand.randint(2, 4)]
        jobs = []
        for job_name in names:
            tool = tool_for(language, job_name, self.rand, name)
            flaky = []
            if job_name in ("test", "integration"):
                for _ in range(self.rand.randint(*self.style.flaky_tests_per_job)):
                    modes = [tool.flaky_failure(self.rand) for _ in range(self.rand.randint(1, 3))]
                    flaky.append((self.rand.choice(self.style.flaky_rates), modes))
            jobs.append(Job(job_name, tool, flaky))
        return Repo(name, language, jobs)

    def _outages(self, repos: list[Repo]) -> list[Outage]:
        s, found = self.style, []
        for count, local in ((s.fleet_outages, False), (s.local_outages, True)):
            for _ in range(count):
                start = START + self.rand.uniform(0.5, s.days - 0.5) * DAY
                start = _working_hours(start, self.rand)
                minutes = self.rand.randint(*s.outage_minutes)
                repo = self.rand.choice(repos).name if local else None
                kind = self.rand.choice(
                    ["runner", "disk", "oom"] if local else ["dns", "registry", "proxy", "docker"]
                )
                found.append(Outage(start, start + minutes * 60, repo, kind))
        return found

    def _main_line(self, repo: Repo, end: float) -> None:
        when = START + self.rand.uniform(0, 6) * HOUR
        rate = self.style.main_commits_per_day * self.rand.uniform(0.6, 1.4)
        while when < end:
            repo.main.append((self._sha(), when))
            when = _working_hours(when + self.rand.expovariate(rate) * DAY, self.rand)

    def _regressions(self, repo: Repo) -> None:
        count = self.rand.randint(*self.style.regressions_per_repo)
        n = len(repo.main)
        for _ in range(count):
            job = self.rand.choice(repo.jobs)
            culprit = self.rand.randint(2, max(2, n - 14))
            fix = min(culprit + self.rand.randint(*self.style.fix_after), n)
            taken = repo.regressions.setdefault(job.name, [])
            if any(c <= fix and culprit <= f for c, f, _ in taken):
                continue  # one regression at a time per job
            taken.append((culprit, fix, job.tool.regression(self.rand)))

    def _pull_request(self, repo: Repo, outages: list[Outage], end: float) -> None:
        s = self.style
        opened = _working_hours(START + self.rand.uniform(0, s.days) * DAY, self.rand)
        head = _index_at(repo.main, opened)
        if head is None:
            return
        base = max(0, head - self.rand.randint(0, s.base_lag))
        pr = str(self._ids + 1000)
        pushes = self.rand.randint(*s.pushes_per_pr)
        breaks = self.rand.random() < s.pr_breaks
        broken_job = self.rand.choice(repo.jobs) if breaks else None
        broken_from = self.rand.randint(0, pushes - 1)
        broken_to = broken_from + self.rand.randint(1, 2)  # fixed by a later push (or never)
        broken_log = broken_job.tool.change_failure(self.rand) if broken_job else ""
        when = opened
        for push in range(pushes):
            if when > end:
                return
            if s.merge_prs and self.rand.random() < 0.3:
                now = _index_at(repo.main, when)  # updated with main's head
                base = now if now is not None else base
            change = (
                (broken_job.name, broken_log)
                if broken_job and broken_from <= push < broken_to
                else None
            )
            sha = self._sha()
            self._push(
                repo, outages, sha, when, f"feature/{pr}", pr, repo.main[base][0], base, change
            )
            when = _working_hours(when + self.rand.uniform(0.3, 20) * HOUR, self.rand)

    def _push(
        self,
        repo: Repo,
        outages: list[Outage],
        sha: str,
        when: float,
        branch: str,
        pr: str | None,
        base_sha: str | None,
        base: int | None,
        change: tuple[str, str] | None,
    ) -> None:
        for job in repo.jobs:
            start = when + self.rand.uniform(0.2, 3) * 60
            attempt = 1
            culprit_run = False
            while True:
                minutes = self.rand.uniform(*self.style.job_minutes)
                finished = start + minutes * 60
                origin, culprit, log = self._outcome(
                    repo, job, outages, finished, base, change, on_main=pr is None
                )
                row: dict[str, object] = {
                    "id": f"run-{self._next_id()}",
                    "repo": repo.name,
                    "job": job.name,
                    "branch": branch,
                    "sha": sha,
                    "attempt": attempt,
                    "outcome": "failed" if origin else "passed",
                    "finished_at": round(finished, 3),
                }
                if pr is not None:
                    row["pr"], row["base_sha"] = pr, base_sha
                if origin:
                    row["log"] = log
                    self.truth.append({"id": row["id"], "origin": origin, "culprit": culprit})
                    culprit_run = culprit == sha
                self.rows.append(row)
                if not origin or attempt >= 3:
                    break
                chance = self.style.retry_culprit if culprit_run else self.style.retry
                if self.rand.random() >= chance:
                    break
                attempt += 1
                start = finished + self.rand.uniform(1, 40) * 60

    def _outcome(
        self,
        repo: Repo,
        job: Job,
        outages: list[Outage],
        when: float,
        base: int | None,
        change: tuple[str, str] | None,
        *,
        on_main: bool = False,
    ) -> tuple[str | None, str | None, str]:
        """(origin, culprit, log) of one run: infra, then main, then the change, then flaky."""
        # The culprit's own run shows the break: it is the first commit seen failing.
        starts = on_main and any(c == base for c, _, _ in repo.regressions.get(job.name, []))
        for outage in outages:
            inside = (
                not starts
                and outage.start <= when <= outage.end
                and outage.repo in (None, repo.name)
            )
            if inside and self.rand.random() < self.style.outage_hit:
                return "infra", None, infra_log(outage.kind, job.tool, repo.name, self.rand)
        if base is not None:
            for culprit, fix, log in repo.regressions.get(job.name, []):
                if culprit <= base < fix:
                    return "main", repo.main[culprit][0], job.tool.render(log, self.rand)
        if change is not None and change[0] == job.name:
            return "change", None, job.tool.render(change[1], self.rand)
        for rate, modes in job.flaky:
            if self.rand.random() < rate:
                return "flaky", None, job.tool.render(self.rand.choice(modes), self.rand)
        return None, None, ""

    def _sha(self) -> str:
        return f"{self.rand.getrandbits(160):040x}"

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids


def _working_hours(when: float, rand: random.Random) -> float:
    """Most commits land in a working day: a time at night moves to the next morning."""
    hour = (when % DAY) / HOUR
    if 7 <= hour < 20 or rand.random() < 0.15:
        return when
    return when - (when % DAY) + (DAY if hour >= 20 else 0) + rand.uniform(7, 10) * HOUR


def _index_at(main: list[tuple[str, float]], when: float) -> int | None:
    found = None
    for index, (_, at) in enumerate(main):
        if at > when:
            break
        found = index
    return found


def write_jsonl(rows: list[dict[str, object]], path: Path) -> None:
    gz = path.suffix == ".gz"
    with gzip.open(path, "wt", encoding="utf-8") if gz else path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--style", choices=[*sorted(STYLES), "workflows", "queue"], default="direct"
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="history rows (.jsonl or .jsonl.gz)"
    )
    parser.add_argument(
        "--truth", type=Path, required=True, help="truth rows {id, origin, culprit}"
    )
    parser.add_argument("--repos", type=int, help="repositories (style's default otherwise)")
    parser.add_argument("--days", type=int, help="days of history")
    parser.add_argument("--retry", type=float, help="share of failed runs retried")
    parser.add_argument(
        "--prs-per-day", type=float, help="pull requests opened per repository a day"
    )
    args = parser.parse_args(argv)
    apart = {"workflows": (Workflows, 14, 0.4), "queue": (QueueFleet, 11, 0.35)}  # own modules
    if args.style in apart:
        make, repos, retry = apart[args.style]
        fleet = make(
            args.seed, repos=args.repos or repos, days=args.days or 30, retry=args.retry or retry
        )
        return _write(*fleet.generate(), args.out, args.truth)
    style = STYLES[args.style]
    knobs = {
        "repos": args.repos,
        "days": args.days,
        "retry": args.retry,
        "prs_per_day": args.prs_per_day,
    }
    style = replace(style, **{k: v for k, v in knobs.items() if v is not None})
    rows, truth = Fleet(style, args.seed).generate()
    return _write(rows, truth, args.out, args.truth)


def _write(
    rows: list[dict[str, object]], truth: list[dict[str, object]], out: Path, truth_path: Path
) -> int:
    """Write the rows and the truth; say what they hold and whether the truth keeps the rules."""
    write_jsonl(rows, out)
    write_jsonl(truth, truth_path)
    found = problems(rows, truth, default_branches(rows))
    for line in found[:10]:
        print(f"truth: {line}", file=sys.stderr)
    counts: dict[str, int] = {}
    for t in truth:
        counts[str(t["origin"])] = counts.get(str(t["origin"]), 0) + 1
    print(
        f"{len(rows)} runs, {len(truth)} failed "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        file=sys.stderr,
    )
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
