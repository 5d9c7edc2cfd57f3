"""The counts Theow reports on: one query each, read by ``theow meow`` and the metrics.

``theow meow`` (``views.stats``), the Prometheus collector (``ops.metrics``)
and the web console show the same figures; they read them here, so a verdict
counted in one is counted the same way in the others. Every function takes
an open connection (``Figures.read(engine)``) and returns dataclasses.

    >>> from theow_workers.store import make_engine, migrate
    >>> migrate("sqlite://")  # doctest: +SKIP
    >>> with Figures.read(make_engine("sqlite:///theow.db")) as figures:  # doctest: +SKIP
    ...     figures.verdicts()
    [VerdictCount(status='resolved', rule='tf_echo', count=3), ...]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Connection, column, func, inspect, or_, select, table
from sqlalchemy.engine import Engine
from sqlalchemy.sql.expression import TableClause

from theow_client.jsontypes import JsonObject
from theow_workers.store.schema import (
    AttemptRow,
    ExplorationRow,
    FailureRow,
    ProposalRow,
    VerdictRow,
)
from theow_workers.views.ports import (
    DEMO_SOURCE,
    LLM_OUTCOMES,
    MATCHED,
    REPLAY_PREFIX,
    SAVED_OUTCOMES,
    AttemptCount,
    ExplorationCount,
    VerdictCount,
)

# The statuses and outcomes the figures group by are the read model's (``views.ports``).
__all__ = [
    "LLM_OUTCOMES",
    "MATCHED",
    "NOT_DEMO",
    "REPLAY_SOURCE",
    "SAVED_OUTCOMES",
    "AttemptCount",
    "ExplorationCount",
    "Figures",
    "ReplayJobFigures",
    "VerdictCount",
]
# Replayed history is not traffic: its failures (source replay:<job>) have their own figures.
REPLAY_SOURCE = REPLAY_PREFIX + "%"
# Nor is the demo's: its failures count only where asked for.
NOT_DEMO: ColumnElement[bool] = FailureRow.source != DEMO_SOURCE


@dataclass(frozen=True)
class ReplayJobFigures:
    id: str
    total: int | None
    counters: dict[str, int]


class Figures:
    """Counts read on one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    @classmethod
    @contextmanager
    def read(cls, engine: Engine) -> Iterator[Figures]:
        with engine.connect() as conn:
            yield cls(conn)

    def tables(self) -> set[str]:
        """The tables that exist (the metrics server may start before the migrations)."""
        return set(inspect(self.conn).get_table_names())

    def failures_received(self, live: bool = False) -> int:
        query = select(func.count()).select_from(FailureRow).where(NOT_DEMO)
        if live:
            query = query.where(FailureRow.source.not_like(REPLAY_SOURCE))
        return int(self.conn.execute(query).scalar_one())

    def verdicts(
        self,
        since: datetime | None = None,
        live: bool = False,
        received: tuple[datetime | None, datetime | None] | None = None,
        demo: bool = False,
    ) -> list[VerdictCount]:
        """Verdicts by status and rule: decided ``since``; ``live`` leaves replays out;
        ``received`` keeps failures received in ``[start, end)``; ``demo`` counts the
        demo's failures too."""
        query = select(VerdictRow.status, VerdictRow.rule, func.count()).join(
            FailureRow, FailureRow.id == VerdictRow.failure_id
        )
        if not demo:
            query = query.where(NOT_DEMO)
        if since is not None:
            query = query.where(VerdictRow.decided_at >= since)
        if live:
            query = query.where(FailureRow.source.not_like(REPLAY_SOURCE))
        if received is not None:
            start, end = received
            if start is not None:
                query = query.where(FailureRow.received_at >= start)
            if end is not None:
                query = query.where(FailureRow.received_at < end)
        query = query.group_by(VerdictRow.status, VerdictRow.rule)
        return [VerdictCount(s, r, int(n)) for s, r, n in self.conn.execute(query)]

    def attempts(
        self, since: datetime | None = None, live: bool = False, demo: bool = False
    ) -> list[AttemptCount]:
        """Rule attempts by rule and outcome, made ``since``; ``live`` leaves replays out;
        ``demo`` counts the demo's failures too."""
        query = select(AttemptRow.rule, AttemptRow.outcome, func.count()).join(
            FailureRow, FailureRow.id == AttemptRow.failure_id
        )
        if not demo:
            query = query.where(NOT_DEMO)
        if live:
            query = query.where(FailureRow.source.not_like(REPLAY_SOURCE))
        if since is not None:
            query = query.where(AttemptRow.created_at >= since)
        query = query.group_by(AttemptRow.rule, AttemptRow.outcome)
        return [AttemptCount(r, o, int(n)) for r, o, n in self.conn.execute(query)]

    def dead_letters(self) -> int:
        """Failures given up without reading them: no fingerprint, an error verdict."""
        query = (
            select(func.count())
            .select_from(FailureRow)
            .join(VerdictRow, VerdictRow.failure_id == FailureRow.id)
            .where(FailureRow.fingerprint == "", VerdictRow.status == "error")
        )
        return int(self.conn.execute(query).scalar_one())

    def explorations(self, since: datetime | None = None) -> list[ExplorationCount]:
        """Explorations by outcome, with their LLM cost and tokens, finished ``since``."""
        query = select(
            ExplorationRow.outcome,
            func.count(),
            func.sum(ExplorationRow.cost),
            func.sum(ExplorationRow.tokens_in),
            func.sum(ExplorationRow.tokens_out),
        )
        if since is not None:
            query = query.where(ExplorationRow.finished_at >= since)
        query = query.group_by(ExplorationRow.outcome)
        return [
            ExplorationCount(o, int(n), float(c or 0.0), int(t_in or 0), int(t_out or 0))
            for o, n, c, t_in, t_out in self.conn.execute(query)
        ]

    def proposals(self) -> dict[str, int]:
        """Proposals by status."""
        query = select(ProposalRow.status, func.count()).group_by(ProposalRow.status)
        return {status: int(n) for status, n in self.conn.execute(query)}

    def last_approval(self, since: datetime | None = None) -> datetime | None:
        query = select(func.max(ProposalRow.reviewed_at)).where(ProposalRow.status == "approved")
        if since is not None:
            query = query.where(ProposalRow.reviewed_at >= since)
        found: datetime | None = self.conn.execute(query).scalar_one()
        if found is not None and found.tzinfo is None:  # SQLite gives naive datetimes back
            found = found.replace(tzinfo=UTC)
        return found

    def replay_jobs(self) -> dict[str, int]:
        """Replay jobs by status."""
        jobs = _replay_jobs()
        query = select(jobs.c.status, func.count()).group_by(jobs.c.status)
        return {status: int(n) for status, n in self.conn.execute(query)}

    def replay_job_items(
        self, active: Sequence[str], counters: Sequence[str], limit: int
    ) -> list[ReplayJobFigures]:
        """The active replay jobs and the latest one, newest first, with their item counters."""
        t = _replay_jobs(*counters)
        latest = select(t.c.id).order_by(t.c.created_at.desc()).limit(1)
        columns = [t.c[c] for c in ("id", "total", *counters)]
        query = (
            select(*columns)
            .where(or_(t.c.status.in_(active), t.c.id.in_(latest)))
            .order_by(t.c.created_at.desc())
            .limit(limit)
        )
        jobs: list[ReplayJobFigures] = []
        for job in self.conn.execute(query).mappings():
            values: JsonObject = dict(job)
            jobs.append(
                ReplayJobFigures(
                    values["id"],
                    None if values["total"] is None else int(values["total"]),
                    {c: int(values[c] or 0) for c in counters},
                )
            )
        return jobs


def _replay_jobs(*counters: str) -> TableClause:
    """The replay jobs table by name: the replay modules own it until their SQL moves here."""
    names = ("id", "status", "created_at", "total", *counters)
    return table("replay_jobs", *(column(n) for n in dict.fromkeys(names)))
