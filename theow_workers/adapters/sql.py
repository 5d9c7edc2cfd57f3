"""The result store: failures, attempts, verdicts and rule stats in SQL.

SQLite by default, PostgreSQL in production; the schema is owned by Alembic
(``theow_workers/migrations``), never by ``create_all``. Idempotency lives in
the schema: a failure id is a primary key, a verdict's primary key is its
failure id, so a redelivered or duplicated task creates nothing twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    create_engine,
    event,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from theow_client.verdict import Status, Verdict
from theow_workers.core.ports import CLIENT_PENDING, AttemptRecord, FailureRecord, RuleStats

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def _now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class FailureRow(Base):
    __tablename__ = "failures"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    facts: Mapped[dict[str, Any]] = mapped_column(JSON)
    problem_type: Mapped[str | None] = mapped_column(String(200), index=True)
    source: Mapped[str] = mapped_column(String(200))
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    explore: Mapped[bool] = mapped_column(Boolean, default=False)
    notes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class AttemptRow(Base):
    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    failure_id: Mapped[str] = mapped_column(ForeignKey("failures.id"), index=True)
    rule: Mapped[str] = mapped_column(String(256), index=True)
    params: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    outcome: Mapped[str] = mapped_column(String(16))
    error: Mapped[str] = mapped_column(Text, default="")
    duration_ms: Mapped[float] = mapped_column(Float, default=0.0)
    delivery: Mapped[int] = mapped_column(Integer, default=1)
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class VerdictRow(Base):
    __tablename__ = "verdicts"

    failure_id: Mapped[str] = mapped_column(ForeignKey("failures.id"), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    rule: Mapped[str | None] = mapped_column(String(256), index=True)
    mode: Mapped[str | None] = mapped_column(String(16))
    actions: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    outputs: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text, default="")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    also: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    seen_in_passing: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, index=True)


class RuleStatsRow(Base):
    __tablename__ = "rule_stats"

    rule: Mapped[str] = mapped_column(String(256), primary_key=True)
    successes: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_success_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_failure_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _: Any) -> None:
            # WAL lets readers and one writer work at once across worker processes.
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def migrate(url: str, revision: str = "head") -> None:
    """Bring the database schema to ``revision`` with Alembic."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(config, revision)


class SqlStore:
    def __init__(self, url: str, engine: Engine | None = None) -> None:
        self.url = url
        self.engine = engine or make_engine(url)
        self.session = sessionmaker(self.engine, expire_on_commit=False)

    def add_failure(self, failure: FailureRecord) -> bool:
        row = FailureRow(
            id=failure.id,
            fingerprint=failure.fingerprint,
            facts=failure.facts,
            problem_type=failure.problem_type,
            source=failure.source,
            received_at=failure.received_at,
            explore=failure.explore,
            notes=failure.notes,
        )
        return self._insert(row)

    def verdict(self, failure_id: str) -> Verdict | None:
        with self.session() as s:
            row = s.get(VerdictRow, failure_id)
            return _verdict(row) if row is not None else None

    def add_attempt(self, attempt: AttemptRecord) -> None:
        with self.session.begin() as s:
            s.add(
                AttemptRow(
                    failure_id=attempt.failure_id,
                    rule=attempt.rule,
                    params=attempt.params,
                    outcome=attempt.outcome,
                    error=attempt.error,
                    duration_ms=attempt.duration_ms,
                    delivery=attempt.delivery,
                    evidence=attempt.evidence,
                )
            )

    def add_verdict(self, verdict: Verdict) -> Verdict:
        data = verdict.to_dict()
        row = VerdictRow(
            failure_id=verdict.failure_id,
            status=data["status"],
            rule=verdict.rule,
            mode=verdict.mode,
            actions=data["actions"],
            outputs=data["outputs"],
            reason=verdict.reason,
            attempts=verdict.attempts,
            evidence=verdict.evidence,
            also=list(verdict.also),
            seen_in_passing=list(verdict.seen_in_passing),
        )
        if self._insert(row):
            return verdict
        stored = self.verdict(verdict.failure_id)
        assert stored is not None
        return stored

    def count_attempt(self, rule: str, success: bool) -> None:
        """``successes = successes + 1`` in SQL: concurrent workers never lose a count."""
        column, stamp = (
            ("successes", "last_success_at") if success else ("failures", "last_failure_at")
        )
        counter = getattr(RuleStatsRow, column)
        statement = (
            update(RuleStatsRow)
            .where(RuleStatsRow.rule == rule)
            .values({column: counter + 1, stamp: _now()})
        )
        for _ in range(3):
            with self.session.begin() as s:
                if s.execute(statement).rowcount:  # type: ignore[attr-defined]
                    return
            # No row yet: create it already counted, so no reader ever sees a
            # row at zero; if another worker created it first, update again.
            first = RuleStatsRow(rule=rule, successes=0, failures=0)
            setattr(first, column, 1)
            setattr(first, stamp, _now())
            if self._insert(first):
                return
        raise RuntimeError(f"could not count an attempt for rule {rule!r}")

    def settle_client_attempt(
        self, failure_id: str, rule: str, success: bool, error: str, outputs: list[dict[str, Any]]
    ) -> bool:
        """Record what the build agent reported for a ``client_pending`` attempt.

        Counts the rule's success or failure only then, and only once: a
        report repeated or for an attempt that was never pending counts nothing.
        """
        pending = (
            select(AttemptRow)
            .where(AttemptRow.failure_id == failure_id, AttemptRow.rule == rule)
            .where(AttemptRow.outcome == CLIENT_PENDING)
            .order_by(AttemptRow.id.desc())
            .limit(1)
        )
        with self.session.begin() as s:
            row = s.execute(pending).scalar_one_or_none()
            if row is None:
                return False
            reported = {o.get("action"): o.get("output") for o in outputs if isinstance(o, dict)}
            params = [
                {**step, "output": reported[step.get("action")]}
                if step.get("action") in reported
                else step
                for step in row.params
            ]
            settled = s.execute(
                update(AttemptRow)
                .where(AttemptRow.id == row.id, AttemptRow.outcome == CLIENT_PENDING)
                .values(outcome="success" if success else "error", error=error, params=params)
            )
            if settled.rowcount != 1:  # type: ignore[attr-defined]
                return False  # another report settled it first
        self.count_attempt(rule, success)
        return True

    def rule_stats(self) -> dict[str, RuleStats]:
        with self.session() as s:
            rows = s.execute(select(RuleStatsRow)).scalars()
            return {r.rule: RuleStats(r.successes, r.failures) for r in rows}

    def _insert(self, row: Base) -> bool:
        try:
            with self.session.begin() as s:
                s.add(row)
        except IntegrityError:
            return False
        return True

    def dispose(self) -> None:
        self.engine.dispose()


class AmbiguousId(LookupError):
    """An id prefix names more than one row."""


def expand_id(session: sessionmaker[Any], column: Any, given: str, what: str) -> str | None:
    """``given`` when it is an id, else the one id it is a prefix of; None if none.

    Tables cut long ids on narrow screens and people copy short forms, so an
    unambiguous prefix names its row; an ambiguous one raises AmbiguousId
    listing a few of the ids it could mean.
    """
    with session() as s:
        if s.execute(select(column).where(column == given)).first() is not None:
            return given
        if not given:
            return None
        query = select(column).where(column.startswith(given, autoescape=True)).limit(6)
        found = list(s.execute(query).scalars())
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise AmbiguousId(f"{what} id {given!r} is ambiguous: it starts {shown}; give more of it")
    return found[0] if found else None


def _verdict(row: VerdictRow) -> Verdict:
    return Verdict.from_dict(
        {
            "failure_id": row.failure_id,
            "status": Status(row.status),
            "rule": row.rule,
            "mode": row.mode,
            "actions": row.actions,
            "outputs": row.outputs,
            "reason": row.reason,
            "attempts": row.attempts,
            "evidence": row.evidence,
            "also": row.also or [],
            "seen_in_passing": row.seen_in_passing or [],
        }
    )
