"""The read model: what the screens read, as a Protocol with typed sub-repositories.

``Reads.failures`` (the one failure list, one failure), ``Reads.proposals``
(the review queue, the list, one proposal) and ``Reads.figures`` (the counts
``theow meow`` and the insight page show) and ``Reads.replays`` (the replay jobs). Each returns frozen dataclasses.
The SQL implementation is ``theow_workers.store.reads.SqlReads``; the
in-memory twin is ``theow_workers.views.memory.MemoryReads``; the views
(``theow_workers.views``) take either and return what a screen shows.

Nothing here imports SQLAlchemy, the store, the web console or the CLI.

>>> Cursor.decode(Cursor(datetime(2026, 1, 2, tzinfo=UTC), "f-1").encode())
Cursor(at=datetime.datetime(2026, 1, 2, 0, 0, tzinfo=datetime.timezone.utc), id='f-1')
>>> Cursor.decode("not a cursor") is None
True
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Protocol

from theow_client.jsontypes import JsonObject

CURSOR_CHARS = 400  # a cursor is a time and an id: anything longer is not one of ours

# Where failures came from: ``live`` (build agents, webhooks, anything but a replay or the
# demo), ``replay`` (a replay's, source ``replay:<job>``), ``demo`` (``theow demo``'s, source
# ``demo``) or ``all``. Lists and figures are of live failures unless asked for another.
LIVE, REPLAY, DEMO, ALL = "live", "replay", "demo", "all"
SOURCES = (LIVE, REPLAY, DEMO, ALL)
REPLAY_PREFIX = "replay:"
DEMO_SOURCE = "demo"  # the source ``theow demo``'s failures are stored with

MATCHED = ("resolved", "suggested", "retry", "tracked")
# Outcomes in which a model was actually called (the rest cost nothing).
LLM_OUTCOMES = ("proposal", "gave_up", "budget", "done", "rate_limited", "error")
SAVED_OUTCOMES = ("cache_hit", "deduplicated")


class UnknownSource(ValueError):
    def __init__(self, given: str) -> None:
        super().__init__(f"source {given!r}: use {', '.join(SOURCES)}")


def aware(value: datetime | None) -> datetime | None:
    """SQLite gives naive datetimes back; they are UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


@dataclass(frozen=True)
class FailureFilter:
    repo: str = ""
    job: str = ""
    rule: str = ""
    mode: str = ""
    outcome: str = ""  # the verdict's status
    q: str = ""  # a failure id or its prefix
    source: str = LIVE  # live, replay, demo or all (SOURCES)
    origin: str = ""  # whose failure it is, as it stands: change, main, flaky, infra, unknown

    def active(self) -> dict[str, str]:
        """The filters that differ from a bare /failures (live failures, any of the rest)."""
        return {k: v for k, v in self.__dict__.items() if v and not (k == "source" and v == LIVE)}


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the last row's receipt time and id (id None: time only)."""

    at: datetime
    id: str | None = None

    def encode(self) -> str:
        raw = json.dumps([self.at.isoformat(), self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor | None:
        """The cursor ``text`` encodes, or None when it is not one ``encode`` wrote."""
        if not text or len(text) > CURSOR_CHARS:
            return None
        try:
            at, fid = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            when = datetime.fromisoformat(at)
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
            return None
        if fid is not None and not isinstance(fid, str):
            return None
        return cls(when if when.tzinfo else when.replace(tzinfo=UTC), fid)


@dataclass(frozen=True)
class Window:
    """Received at or after ``since`` and before ``until`` (either may be open)."""

    since: datetime | None = None
    until: datetime | None = None


ANY_TIME = Window()  # no bound either side

# Failures


@dataclass(frozen=True)
class FailureSummary:
    """One row of the failure list: the failure and its verdict (None fields: no verdict yet)."""

    id: str
    received_at: datetime  # aware (UTC)
    source: str
    problem_type: str | None
    repo: str
    job: str
    outcome: str | None  # the verdict's status
    rule: str | None
    mode: str | None
    reason: str | None
    wrapper: str | None
    origin: str | None = None  # whose failure it is, as it stands (None: its run is not known)


@dataclass(frozen=True)
class FailurePage:
    """A page of the list, newest first, and where the next one starts (None: the last)."""

    rows: tuple[FailureSummary, ...]
    next: Cursor | None


@dataclass(frozen=True)
class VerdictDetail:
    status: str
    rule: str | None
    mode: str | None
    actions: list[JsonObject]
    outputs: list[JsonObject]
    reason: str
    evidence: JsonObject | None
    also: list[str]
    seen_in_passing: list[str]
    where: list[JsonObject]
    wrapper: str | None
    explanation: JsonObject | None
    decided_at: datetime | None = None


@dataclass(frozen=True)
class AttemptDetail:
    rule: str
    params: list[JsonObject]
    outcome: str
    error: str
    duration_ms: float
    delivery: int
    evidence: JsonObject | None
    created_at: datetime | None = None


@dataclass(frozen=True)
class ExplorationSummary:
    id: str
    outcome: str
    reason: str
    proposal_id: str | None
    models: list[str]
    turns: int
    tokens_in: int
    tokens_out: int
    cost: float
    finished_at: datetime | None = None


@dataclass(frozen=True)
class OriginDetail:
    """Whose failure it is: as it stands (revised as runs arrived) and as decided at its verdict."""

    origin: str | None
    origin_then: str | None
    culprit: str | None  # origin main: the first default-branch commit failing this way
    fixed_by: str | None  # origin main: the first default-branch commit passing again
    reason: str | None
    repo: str
    branch: str
    sha: str
    pr: str | None = None
    attempt: int = 1


@dataclass(frozen=True)
class FailureDetail:
    """One failure as stored: its facts, its verdict, every attempt and exploration.

    ``received_at`` is as the database gives it back (naive on SQLite).
    """

    id: str
    received_at: datetime
    source: str
    fingerprint: str
    problem_type: str | None
    facts: JsonObject
    notes: JsonObject
    verdict: VerdictDetail | None
    attempts: tuple[AttemptDetail, ...] = ()
    explorations: tuple[ExplorationSummary, ...] = ()
    origin: OriginDetail | None = None  # None: the failure came without its run's metadata


class FailureReads(Protocol):
    def page(
        self,
        where: FailureFilter,
        after: Cursor | None = None,
        limit: int = 50,
        window: Window = ANY_TIME,
    ) -> FailurePage:
        """One page of failures, newest first on ``(received_at, id)``.

        Raises UnknownSource for a ``where.source`` other than live, replay, demo or all.
        """
        ...

    def detail(self, failure_id: str) -> FailureDetail | None: ...


# Proposals


@dataclass(frozen=True)
class ExplorationCost:
    """What the session that proposed a rule cost, and who taught it (``taught:<name>``)."""

    outcome: str
    session_id: str
    tokens_in: int
    tokens_out: int
    cost: float
    models: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ProposalEntry:
    id: str
    exploration_id: str
    failure_id: str
    rule_name: str
    rule_yaml: str
    diffs: list[dict[str, str]]
    status: str
    created_at: datetime | None
    reviewed_by: str | None = None
    reviewed_at: datetime | None = None
    review_reason: str | None = None
    exploration: ExplorationCost | None = None  # None: its exploration is not stored

    @property
    def files(self) -> list[str]:
        return [d["path"] for d in self.diffs]


class ProposalReads(Protocol):
    def by_status(self, status: str | None = None) -> list[ProposalEntry]:
        """Proposals of ``status`` (None: all), oldest first."""
        ...

    def one(self, proposal_id: str) -> ProposalEntry | None: ...

    def queue(self) -> list[ProposalEntry]:
        """Pending proposals whose exploration is stored, newest first."""
        ...

    def reviewed(self, limit: int = 20) -> list[ProposalEntry]:
        """Reviewed proposals (any status but pending), last reviewed first."""
        ...


# Figures


@dataclass(frozen=True)
class VerdictCount:
    status: str
    rule: str | None
    count: int


@dataclass(frozen=True)
class AttemptCount:
    rule: str
    outcome: str
    count: int


@dataclass(frozen=True)
class ExplorationCount:
    outcome: str
    count: int
    cost: float
    tokens_in: int
    tokens_out: int


class FigureReads(Protocol):
    def verdicts(
        self,
        since: datetime | None = None,
        live: bool = False,
        received: tuple[datetime | None, datetime | None] | None = None,
        demo: bool = False,
    ) -> list[VerdictCount]:
        """Verdicts by status and rule: decided ``since``; ``live`` leaves replays out;
        ``received`` keeps failures received in ``[start, end)``; ``demo`` counts the
        demo's failures too (left out otherwise)."""
        ...

    def attempts(
        self, since: datetime | None = None, live: bool = False, demo: bool = False
    ) -> list[AttemptCount]:
        """Rule attempts by rule and outcome, made ``since``; ``live`` leaves replays out;
        ``demo`` counts the demo's failures too (left out otherwise)."""
        ...

    def explorations(self, since: datetime | None = None) -> list[ExplorationCount]:
        """Explorations by outcome, with their LLM cost and tokens, finished ``since``."""
        ...

    def proposals(self) -> dict[str, int]:
        """Proposals by status."""
        ...

    def last_approval(self, since: datetime | None = None) -> datetime | None:
        """When the last approval was made (aware), ``since`` a time if given."""
        ...


# Replays


@dataclass(frozen=True)
class ReplayJob:
    """A replay job as stored: its source, options, status and item counters."""

    id: str
    kind: str
    source: str
    source_key: str
    options: JsonObject
    dry_run: bool
    explore: bool
    explore_budget: int | None
    explore_status: str
    status: str
    message: str
    rules: list[str]
    rules_version: str
    total: int | None
    processed: int
    matched: int
    unmatched: int
    failed: int
    errors: int
    invalid: int
    duplicates: int
    created_at: datetime
    heartbeat_at: datetime | None
    finished_at: datetime | None
    passing: int = 0  # passing runs learned, not replayed

    @property
    def replayed(self) -> int:
        """Items that went through the resolver (not invalid input, duplicates, passing runs)."""
        return self.processed - self.invalid - self.duplicates - self.passing

    @property
    def hit_rate(self) -> float:
        return self.matched / self.replayed if self.replayed else 0.0

    @property
    def remaining(self) -> int | None:
        return None if self.total is None else max(0, self.total - self.processed)

    def to_dict(self) -> JsonObject:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("created_at", "heartbeat_at", "finished_at"):
            data[key] = data[key].isoformat() if data[key] else None
        data.update(replayed=self.replayed, hit_rate=round(self.hit_rate, 4))
        return data


class ReplayReads(Protocol):
    def recent(self, limit: int = 20) -> list[ReplayJob]:
        """The newest replay jobs, newest first."""
        ...


class Reads(Protocol):
    """Everything the screens read."""

    @property
    def failures(self) -> FailureReads: ...

    @property
    def proposals(self) -> ProposalReads: ...

    @property
    def figures(self) -> FigureReads: ...

    @property
    def replays(self) -> ReplayReads: ...
