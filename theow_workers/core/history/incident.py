"""An incident as the screens and alerts see it, and the builder the derivation fills.

``core.history.incidents`` says how runs become incidents; this module is
what one is: its kind, state, scope and cause, the runs it affected and what
they cost, the commits that matter, and a bounded timeline.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from theow_client.jsontypes import JsonObject
from theow_workers.core.history.model import Run

TIMELINE_HEAD = 5  # a timeline keeps its first moments and its last ones, and counts the rest
TIMELINE_TAIL = 15


class Kind(StrEnum):
    MAIN = "main"
    INFRA = "infra"
    FLAKY = "flaky"

    def __str__(self) -> str:
        return self.value


class State(StrEnum):
    OPEN = "open"
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Rules:
    """What makes an incident; ``default_branches`` overrides ``default_branch`` per repository."""

    default_branch: str = "main"
    default_branches: Mapping[str, str] = field(default_factory=dict)
    infra_window: float = 3600.0
    infra_repos: int = 3
    flaky_recent: int = 50  # the job's runs a flip rate is taken over
    flaky_quiet_runs: int = 20  # runs of the job without the cause that close a flaky incident

    def branch_of(self, repo: str) -> str:
        return self.default_branches.get(repo, self.default_branch)


@dataclass(frozen=True)
class Moment:
    """One line of an incident's timeline: what happened, when, in which run."""

    at: float
    what: str  # opened, failed, passed, fixed, closed
    run: str
    repo: str
    sha: str
    branch: str

    def to_dict(self) -> JsonObject:
        return {
            "at": self.at,
            "what": self.what,
            "run": self.run,
            "repo": self.repo,
            "sha": self.sha,
            "branch": self.branch,
        }


@dataclass(frozen=True)
class Incident:
    id: str
    kind: Kind
    state: State
    cause: str
    repo: str  # "" for infra (see ``repos``)
    job: str  # "" for infra
    repos: tuple[str, ...]
    opened_by: str  # the opening run's id
    first_seen: float
    last_seen: float
    runs_affected: int
    failed_runs: int
    minutes_lost: float
    timeline: tuple[Moment, ...]
    omitted: int = 0  # moments left out of the timeline between its head and its tail
    culprit: str | None = None
    fixed_by: str | None = None
    closed_at: float | None = None
    flip_rate: float | None = None
    # main: failed twice on the default branch (another commit or a retry), or decided main;
    # a single failure may yet prove flaky. Alerts say main broke only once it is confirmed.
    confirmed: bool = True

    def to_dict(self) -> JsonObject:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "state": self.state.value,
            "cause": self.cause,
            "repo": self.repo,
            "job": self.job,
            "repos": list(self.repos),
            "opened_by": self.opened_by,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "closed_at": self.closed_at,
            "runs_affected": self.runs_affected,
            "failed_runs": self.failed_runs,
            "minutes_lost": round(self.minutes_lost, 1),
            "culprit": self.culprit,
            "fixed_by": self.fixed_by,
            "flip_rate": None if self.flip_rate is None else round(self.flip_rate, 3),
            "confirmed": self.confirmed,
            "timeline": [m.to_dict() for m in self.timeline],
            "omitted": self.omitted,
        }


def incident_id(kind: Kind, scope: str, cause: str, opened_by: str) -> str:
    """The stable id: the same incident derived again, from more history, keeps it."""
    raw = "\x00".join((kind.value, scope, cause, opened_by)).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


class Building:
    """An incident as the walk finds it: counts, a bounded timeline, then frozen."""

    def __init__(self, kind: Kind, first: Run, repo: str = "", job: str = "") -> None:
        self.kind, self.cause, self.repo, self.job = kind, first.cause or "", repo, job
        self.opened_by = first.id
        self.first_seen = self.last_seen = first.finished_at
        self.runs: set[str] = set()
        self.repos: set[str] = set()
        self.failed = 0
        self.minutes = 0.0
        self.head: list[Moment] = []
        self.tail: deque[Moment] = deque(maxlen=TIMELINE_TAIL)
        self.omitted = 0
        self.culprit: str | None = None
        self.fixed_by: str | None = None
        self.closed_at: float | None = None
        self.flip_rate: float | None = None
        self.shas: set[str] = set()
        self.confirmed = kind is not Kind.MAIN
        self.note(first, "opened")

    def note(self, run: Run, what: str) -> None:
        moment = Moment(run.finished_at, what, run.id, run.repo, run.sha, run.branch)
        if len(self.head) < TIMELINE_HEAD:
            self.head.append(moment)
            return
        if len(self.tail) == TIMELINE_TAIL:
            self.omitted += 1
        self.tail.append(moment)

    def add(self, run: Run, what: str = "failed") -> None:
        if run.id in self.runs:
            return
        if self.runs:  # the first run's moment is "opened"
            self.note(run, what)
        self.runs.add(run.id)
        self.repos.add(run.repo)
        self.shas.add(run.sha)
        self.last_seen = max(self.last_seen, run.finished_at)
        self.failed += 1
        if run.started_at is not None and run.finished_at > run.started_at:
            self.minutes += (run.finished_at - run.started_at) / 60

    def close(self, at: float, run: Run | None = None, what: str = "closed") -> None:
        self.closed_at = at
        if run is not None:
            self.note(run, what)
            self.fixed_by = run.sha if what == "fixed" else None

    def frozen(self) -> Incident:
        scope = "\x00".join((self.repo, self.job)) if self.kind is not Kind.INFRA else "*"
        opened_by = "" if self.kind is Kind.FLAKY else self.opened_by
        return Incident(
            id=incident_id(self.kind, scope, self.cause, opened_by),
            kind=self.kind,
            state=State.OPEN if self.closed_at is None else State.CLOSED,
            cause=self.cause,
            repo=self.repo,
            job=self.job,
            repos=tuple(sorted(self.repos)),
            opened_by=self.opened_by,
            first_seen=self.first_seen,
            last_seen=self.last_seen,
            runs_affected=len(self.runs),
            failed_runs=self.failed,
            minutes_lost=self.minutes,
            timeline=(*self.head, *self.tail),
            omitted=self.omitted,
            culprit=self.culprit,
            fixed_by=self.fixed_by,
            closed_at=self.closed_at,
            flip_rate=self.flip_rate,
            confirmed=self.confirmed,
        )
