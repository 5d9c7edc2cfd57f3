"""Replay jobs and their items in SQL: what survives Ctrl-C, a killed worker, a resume.

A job is one row with its options and counters. Each replayed input (a line of
a file, or a stored failure) becomes at most one item row, keyed by
``(job_id, item_key)``: the primary key is the uniqueness that makes a
redelivered chunk or a resumed job harmless. Counters move only in the
transaction that inserts item rows, by the rows that insert actually created
(``INSERT … ON CONFLICT DO NOTHING RETURNING``), so no item is ever counted
twice, whoever records it and however often.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    func,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column, sessionmaker

from theow_workers.adapters.sql import Base, FailureRow, expand_id
from theow_workers.replay.grouping import error_summary

# Job statuses. "running" with a stale heartbeat means the driver died.
PENDING, RUNNING, DONE = "pending", "running", "done"
INTERRUPTED, CANCELLED, INCOMPLETE = "interrupted", "cancelled", "incomplete"
# Item statuses beyond a verdict's: input that could not be replayed.
INVALID, DUPLICATE = "invalid", "duplicate"
# A passing run in the history (``"outcome": "success"``): learned into its job's normal.
PASSING = "passing"
MATCHED = ("resolved", "retry", "tracked")
COUNTER_OF = {
    **{s: "matched" for s in MATCHED},
    "unmatched": "unmatched",
    "failed": "failed",
    "rejected": "errors",
    "error": "errors",
    INVALID: "invalid",
    DUPLICATE: "duplicates",
    PASSING: "passing",
}
COUNTERS = (
    "processed", "matched", "unmatched", "failed", "errors", "invalid", "duplicates", "passing"
)  # fmt: skip
REPLAY_NAMESPACE = uuid.UUID("3d0c5b0e-8f5c-4d56-9a43-4c0e1e5f7b21")


def _now() -> datetime:
    return datetime.now(UTC)


def replay_failure_id(job_id: str, key: str) -> str:
    """The failure id of one replayed item: the same on every delivery and every resume."""
    return str(uuid.uuid5(REPLAY_NAMESPACE, f"{job_id}:{key}"))


class ReplayJobRow(Base):
    __tablename__ = "replay_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))  # "file" | "db"
    source: Mapped[str] = mapped_column(Text)  # file path, or the selection in words
    source_key: Mapped[str] = mapped_column(String(64), index=True)  # same source, same key
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    dry_run: Mapped[bool] = mapped_column(Boolean, default=True)
    explore: Mapped[bool] = mapped_column(Boolean, default=False)
    explore_budget: Mapped[int | None] = mapped_column(Integer)
    explore_status: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16), index=True)
    message: Mapped[str] = mapped_column(Text, default="")
    rules: Mapped[list[str]] = mapped_column(JSON)  # rule names when the job (re)started
    rules_version: Mapped[str] = mapped_column(String(64), default="")
    total: Mapped[int | None] = mapped_column(Integer)
    processed: Mapped[int] = mapped_column(Integer, default=0)
    matched: Mapped[int] = mapped_column(Integer, default=0)
    unmatched: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    invalid: Mapped[int] = mapped_column(Integer, default=0)
    duplicates: Mapped[int] = mapped_column(Integer, default=0)
    passing: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ReplayItemRow(Base):
    __tablename__ = "replay_items"
    __table_args__ = (Index("ix_replay_items_job_status", "job_id", "status"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("replay_jobs.id"), primary_key=True)
    item_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    line: Mapped[int | None] = mapped_column(Integer)
    failure_id: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    rule: Mapped[str | None] = mapped_column(String(256))
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    sample: Mapped[str] = mapped_column(Text, default="")  # error line, or the input problem
    basis: Mapped[str] = mapped_column(Text, default="")  # normalized error text, for grouping
    rules_version: Mapped[str] = mapped_column(String(64), default="")
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    source: str
    source_key: str
    options: dict[str, Any]
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

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("created_at", "heartbeat_at", "finished_at"):
            data[key] = data[key].isoformat() if data[key] else None
        data.update(replayed=self.replayed, hit_rate=round(self.hit_rate, 4))
        return data

    @classmethod
    def from_row(cls, row: ReplayJobRow) -> Job:
        data = {f.name: getattr(row, f.name) for f in fields(cls)}
        for key in ("created_at", "heartbeat_at", "finished_at"):
            if data[key] is not None and data[key].tzinfo is None:  # SQLite drops the zone
                data[key] = data[key].replace(tzinfo=UTC)
        return cls(**data)


@dataclass(frozen=True)
class ItemRecord:
    key: str
    status: str
    line: int | None = None
    failure_id: str | None = None
    rule: str | None = None
    fingerprint: str | None = None
    sample: str = ""
    basis: str = ""
    rules_version: str = ""


class JobNotFound(LookupError):
    pass


class ReplayStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.session = sessionmaker(engine, expire_on_commit=False)

    def create(self, **values: Any) -> Job:
        job_id = values.pop("id", None) or uuid.uuid4().hex[:12]
        row = ReplayJobRow(
            **{"status": PENDING, "rules": [], "options": {}, **values, "id": job_id}
        )
        with self.session.begin() as s:
            s.add(row)
        return self.get(job_id)

    def get(self, job_id: str) -> Job:
        """A job by id, or ``last`` for the most recent one."""
        with self.session() as s:
            if job_id in ("last", "latest"):
                query = select(ReplayJobRow).order_by(ReplayJobRow.created_at.desc()).limit(1)
                row = s.execute(query).scalar_one_or_none()
            else:
                # A prefix of an id is accepted; ambiguous raises AmbiguousId.
                full = expand_id(self.session, ReplayJobRow.id, job_id, "replay job")
                row = s.get(ReplayJobRow, full) if full is not None else None
            if row is None:
                raise JobNotFound(f"no replay job {job_id!r} (see `theow replay list`)")
            return Job.from_row(row)

    def recent(self, limit: int = 20) -> list[Job]:
        with self.session() as s:
            query = select(ReplayJobRow).order_by(ReplayJobRow.created_at.desc()).limit(limit)
            return [Job.from_row(r) for r in s.execute(query).scalars()]

    def update(self, job_id: str, **values: Any) -> None:
        with self.session.begin() as s:
            s.execute(update(ReplayJobRow).where(ReplayJobRow.id == job_id).values(**values))

    def record(
        self,
        job_id: str,
        items: Sequence[ItemRecord],
        writes: Callable[[Session], None] | None = None,
    ) -> int:
        """Insert item rows not recorded yet and count exactly those; returns how many.

        ``writes`` (a chunk's failures and verdicts) runs first, in the same transaction.
        """
        if not items and writes is None:
            return 0
        rows = [
            {
                "job_id": job_id, "item_key": i.key, "line": i.line, "failure_id": i.failure_id,
                "status": i.status, "rule": i.rule, "fingerprint": i.fingerprint,
                "sample": i.sample[:2000], "basis": i.basis[:2000],
                "rules_version": i.rules_version, "decided_at": _now(),
            }
            for i in items
        ]  # fmt: skip
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        statement = (
            dialect.insert(ReplayItemRow)
            .on_conflict_do_nothing(index_elements=["job_id", "item_key"])
            .returning(ReplayItemRow.status)
        )
        with self.session.begin() as s:
            if writes is not None:
                writes(s)
            if not rows:
                return 0
            inserted = [status for (status,) in s.execute(statement, rows)]
            if not inserted:
                return 0
            bumps: dict[str, Any] = {"processed": ReplayJobRow.processed + len(inserted)}
            for counter in {COUNTER_OF[status] for status in inserted}:
                n = sum(1 for status in inserted if COUNTER_OF[status] == counter)
                bumps[counter] = getattr(ReplayJobRow, counter) + n
            s.execute(update(ReplayJobRow).where(ReplayJobRow.id == job_id).values(**bumps))
        return len(inserted)

    def decided(self, job_id: str, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` already have an item row."""
        wanted = list(keys)
        found: set[str] = set()
        with self.session() as s:
            for start in range(0, len(wanted), 500):
                query = select(ReplayItemRow.item_key).where(
                    ReplayItemRow.job_id == job_id,
                    ReplayItemRow.item_key.in_(wanted[start : start + 500]),
                )
                found.update(s.execute(query).scalars())
        return found

    def counts(self, job_id: str, column: str = "status") -> dict[str, int]:
        """Item rows per status (or per ``rule``), counted from the rows themselves."""
        col = getattr(ReplayItemRow, column)
        query = (
            select(col, func.count())
            .where(ReplayItemRow.job_id == job_id, col.is_not(None))
            .group_by(col)
        )
        with self.session() as s:
            return {str(k): int(n) for k, n in s.execute(query)}

    def evidence_samples(self, job_id: str) -> dict[str, str]:
        """One evidence line per rule: what the person sees as why that rule matched."""
        query = (
            select(ReplayItemRow.rule, func.min(ReplayItemRow.sample))
            .where(ReplayItemRow.job_id == job_id, ReplayItemRow.rule.is_not(None))
            .group_by(ReplayItemRow.rule)
        )
        with self.session() as s:
            return {str(rule): str(sample or "") for rule, sample in s.execute(query)}

    def items(self, job_id: str, status: str | None = None) -> list[ItemRecord]:
        query = select(ReplayItemRow).where(ReplayItemRow.job_id == job_id)
        if status is not None:
            query = query.where(ReplayItemRow.status == status)
        query = query.order_by(ReplayItemRow.line, ReplayItemRow.item_key)
        with self.session() as s:
            return [_item(r) for r in s.execute(query).scalars()]


def _item(row: ReplayItemRow) -> ItemRecord:
    named = {f.name: getattr(row, f.name) for f in fields(ItemRecord) if f.name != "key"}
    return ItemRecord(key=row.item_key, **named)


def with_basis(store: ReplayStore, items: list[ItemRecord]) -> list[ItemRecord]:
    """A root cause's error text is stored on one of its items; recompute it if none has it."""
    having = {i.fingerprint for i in items if i.basis}
    first: dict[str | None, ItemRecord] = {}
    for item in items:
        if item.fingerprint not in having:
            first.setdefault(item.fingerprint, item)
    if not first:
        return items
    ids = [i.failure_id for i in first.values() if i.failure_id]
    with store.session() as s:
        query = select(FailureRow.id, FailureRow.facts).where(FailureRow.id.in_(ids))
        facts = {fid: data for fid, data in s.execute(query)}
    redone = {}
    for item in first.values():
        sample, basis = error_summary(facts.get(item.failure_id or "", {}))
        redone[id(item)] = dataclasses.replace(item, sample=sample, basis=basis)
    return [redone.get(id(i), i) for i in items]
