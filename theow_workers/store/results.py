"""The result store: failures, attempts, verdicts and rule stats in SQL.

The resolve path writes twice per failure: ``record_failure`` (the failure,
and the verdict already stored for it when it is a duplicate) and
``record_outcome`` (its attempts, its rules' counts and its verdict, together).
On PostgreSQL each is one statement in autocommit, so a resolved failure costs
two round trips to the database; a single statement is atomic, so no
BEGIN/COMMIT is needed around it. Idempotency lives in the schema: a failure
id is a primary key, a verdict's primary key is its failure id, both inserted
``ON CONFLICT DO NOTHING``, so a redelivered or duplicated task creates
nothing twice; a rule's counts move by ``successes = successes + n`` in SQL,
so concurrent workers never lose one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    JSON,
    Connection,
    DateTime,
    Float,
    Insert,
    Integer,
    String,
    Text,
    bindparam,
    case,
    column,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker
from sqlalchemy.sql.expression import ColumnClause, TableValuedAlias

from theow_client.jsontypes import JsonObject
from theow_client.verdict import Status, Verdict
from theow_workers.core.ports import (
    CLIENT_PENDING,
    AttemptRecord,
    FailureRecord,
    RuleStats,
    counted,
    settled_status,
    with_outputs,
)
from theow_workers.store.schema import (
    AttemptRow,
    Base,
    FailureRow,
    RuleStatsRow,
    VerdictRow,
    make_engine,
)


def _now() -> datetime:
    return datetime.now(UTC)


class SqlStore:
    def __init__(self, url: str, engine: Engine | None = None) -> None:
        self.url = url
        self.engine = engine or make_engine(url)
        self.session = sessionmaker(self.engine, expire_on_commit=False)
        self._writes = writes_for(self.engine.dialect.name)
        # One statement needs no transaction around it: autocommit spares a BEGIN and a COMMIT.
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")

    # The Store port (theow_workers.core.ports.Store)

    def record_failure(self, failure: FailureRecord) -> Verdict | None:
        """Record the failure unless it exists; the verdict already stored for it, if any.

        A new failure has no verdict (a verdict needs its failure row), so the
        usual case is one INSERT (in autocommit: one round trip on
        PostgreSQL); only a duplicate reads its verdict too.
        """
        with self._autocommit.connect() as conn:
            if self._insert_failure(conn, failure):
                return None
            return _stored_verdict(conn, failure.id)

    def record_outcome(self, verdict: Verdict, attempts: Sequence[AttemptRecord] = ()) -> Verdict:
        """The attempts, their rules' counts and the verdict, all or none.

        The verdict is stored unless one exists; whichever is stored is
        returned. Attempts are rows whatever the verdict: their actions ran.

        On PostgreSQL it is one statement (data-modifying CTEs for the
        attempts and the counts, the verdict's INSERT at the top), in
        autocommit: one round trip. SQLite has no data-modifying CTEs, so
        there the three statements share one transaction (in process, no
        network to cross). Only a verdict already stored costs one more
        statement, to read it.
        """
        writes, now = self._writes, _now()
        tally = Counter(counted(attempts))
        if writes.add_outcome is not None:
            rows = [{f.name: getattr(a, f.name) for f in ATTEMPT_FIELDS} for a in attempts]
            outcome = {
                **verdict_values(verdict),
                "attempt_rows": rows,
                "rule_counts": _count_rows(tally),
                "written_at": now,
            }
            with self._autocommit.connect() as conn:
                if conn.execute(writes.add_outcome, outcome).first() is not None:
                    return verdict
                stored = _stored_verdict(conn, verdict.failure_id)
        else:
            with self.engine.begin() as conn:
                if attempts:
                    conn.execute(insert(AttemptRow), [attempt_values(a) for a in attempts])
                if tally:
                    counts = [{**row, "written_at": now} for row in _count_rows(tally)]
                    conn.execute(writes.add_counts, counts)
                if conn.execute(writes.add_verdict, verdict_values(verdict)).first() is not None:
                    return verdict
                stored = _stored_verdict(conn, verdict.failure_id)
        assert stored is not None
        return stored

    def verdict(self, failure_id: str) -> Verdict | None:
        with self.engine.connect() as conn:
            return _stored_verdict(conn, failure_id)

    def failure_agent(self, failure_id: str) -> tuple[bool, str | None]:
        """Whether the failure exists, and the agent that sent it (None: replayed history)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(FailureRow.agent).where(FailureRow.id == failure_id)).first()
        return (row is not None, row.agent if row is not None else None)

    def same_key(self, idempotency_key: str, but: str, limit: int = 5) -> list[JsonObject]:
        """Other failures sent with ``idempotency_key`` (id and agent), oldest first."""
        query = (
            select(FailureRow.id, FailureRow.agent)
            .where(FailureRow.idempotency_key == idempotency_key, FailureRow.id != but)
            .order_by(FailureRow.received_at)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [{"id": r.id, "agent": r.agent} for r in conn.execute(query)]

    def rule_stats(self) -> dict[str, RuleStats]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(RuleStatsRow.rule, RuleStatsRow.successes, RuleStatsRow.failures)
            )
            return {rule: RuleStats(s, f) for rule, s, f in rows}

    # One step at a time (seeding, tests, the replay chunk store's reads)

    def add_failure(self, failure: FailureRecord) -> bool:
        """Record a failure; False if one with this id exists already."""
        with self.engine.begin() as conn:
            return self._insert_failure(conn, failure)

    def add_attempt(self, attempt: AttemptRecord) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(AttemptRow).values(attempt_values(attempt)))

    def add_verdict(self, verdict: Verdict) -> Verdict:
        """Store the verdict unless one exists; return whichever is stored."""
        return self.record_outcome(verdict)

    def count_attempt(self, rule: str, success: bool) -> None:
        """``successes = successes + 1`` in SQL: concurrent workers never lose a count."""
        with self.engine.begin() as conn:
            self._bump(conn, rule, success, 1)

    def settle_client_attempt(
        self, failure_id: str, rule: str, worked: bool, error: str, outputs: list[JsonObject]
    ) -> bool:
        """Record what the build agent reported for a ``client_pending`` attempt.

        ``worked``: its client-side actions ran and the step's re-run passed.
        The attempt becomes ``success`` or ``error``, the ``suggested`` verdict
        ``resolved`` or ``failed``, and the rule's success or failure is
        counted: only then, and only once. A report repeated, or for an
        attempt that was never pending, changes and counts nothing.
        """
        pending = (
            select(AttemptRow.id, AttemptRow.params)
            .where(AttemptRow.failure_id == failure_id, AttemptRow.rule == rule)
            .where(AttemptRow.outcome == CLIENT_PENDING)
            .order_by(AttemptRow.id.desc())
            .limit(1)
        )
        with self.engine.begin() as conn:
            row = conn.execute(pending).first()
            if row is None:
                return False
            settled = conn.execute(
                update(AttemptRow)
                .where(AttemptRow.id == row.id, AttemptRow.outcome == CLIENT_PENDING)
                .values(
                    outcome="success" if worked else "error",
                    error=error,
                    params=with_outputs(row.params, outputs),
                )
            )
            if settled.rowcount != 1:
                return False  # another report settled it first
            status, reason = settled_status(worked, error)
            conn.execute(
                update(VerdictRow)
                .where(VerdictRow.failure_id == failure_id, VerdictRow.rule == rule)
                .where(VerdictRow.status == Status.SUGGESTED.value)
                .values({"status": status.value, **({"reason": reason} if reason else {})})
            )
            self._bump(conn, rule, worked, 1)
        return True

    def dispose(self) -> None:
        self.engine.dispose()

    def _insert_failure(self, conn: Connection, failure: FailureRecord) -> bool:
        inserted = conn.execute(self._writes.add_failure, failure_values(failure))
        return inserted.first() is not None

    def _bump(self, conn: Connection, rule: str, success: bool, n: int) -> None:
        """Add ``n`` to a rule's successes or failures; a new rule's row starts counted."""
        counts = _count_rows(Counter({(rule, success): n}))[0]
        conn.execute(self._writes.add_counts, {**counts, "written_at": _now()})


@dataclass(frozen=True)
class Writes:
    """The resolve path's statements for one dialect, built once: a call binds values only.

    Building a Core statement costs more Python than a round trip to a
    database on loopback. A statement object built once computes its cache
    key once, so SQLAlchemy finds it compiled and psycopg finds it prepared.
    """

    add_failure: Insert  # RETURNING the id: a new failure
    add_verdict: Insert  # RETURNING the failure id: the verdict stands
    add_counts: Insert  # one rule's counts (``rule``, ``successes``, ``failures``, ``written_at``)
    add_outcome: Insert | None  # PostgreSQL: attempts, counts and verdict in one statement


@cache
def writes_for(dialect_name: str) -> Writes:
    """The statements for ``dialect_name`` (``postgresql`` or ``sqlite``)."""
    dialect: Any = postgresql if dialect_name == "postgresql" else sqlite
    add_verdict = (
        dialect.insert(VerdictRow)
        .values(_bound(VerdictRow))
        .on_conflict_do_nothing(index_elements=["failure_id"])
        .returning(VerdictRow.failure_id)
    )
    successes, failures = (
        bindparam("successes", type_=Integer),
        bindparam("failures", type_=Integer),
    )
    return Writes(
        add_failure=dialect.insert(FailureRow)
        .values(_bound(FailureRow))
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(FailureRow.id),
        add_verdict=add_verdict,
        add_counts=_counted(
            dialect.insert(RuleStatsRow).values(
                rule=bindparam("rule", type_=String),
                successes=successes,
                failures=failures,
                last_success_at=case((successes > 0, WRITTEN_AT)),
                last_failure_at=case((failures > 0, WRITTEN_AT)),
            )
        ),
        add_outcome=_with_writes_in_front(add_verdict) if dialect_name == "postgresql" else None,
    )


# When the outcome is written: the attempts' created_at, the rules' last success or failure.
WRITTEN_AT = bindparam("written_at", type_=DateTime(timezone=True))
ATTEMPT_FIELDS: list[ColumnClause[object]] = [
    column("failure_id", String),
    column("rule", String),
    column("params", JSON),
    column("outcome", String),
    column("error", Text),
    column("duration_ms", Float),
    column("delivery", Integer),
    column("evidence", JSON),
]
COUNT_FIELDS: list[ColumnClause[object]] = [
    column("rule", String),
    column("successes", Integer),
    column("failures", Integer),
]


def _bound(row: type[Base]) -> JsonObject:
    """Every column of a row's table as a bound parameter of the column's name."""
    return {c.name: bindparam(c.name, type_=c.type) for c in row.__table__.c}


def _counted(upsert: postgresql.Insert | sqlite.Insert) -> Insert:
    """A rule's counts added to its row (``successes = successes + n``), or its row created."""
    old, new = RuleStatsRow, upsert.excluded
    return cast(
        Insert,
        upsert.on_conflict_do_update(
            index_elements=["rule"],
            set_={
                "successes": old.successes + new.successes,
                "failures": old.failures + new.failures,
                "last_success_at": func.coalesce(new.last_success_at, old.last_success_at),
                "last_failure_at": func.coalesce(new.last_failure_at, old.last_failure_at),
            },
        ),
    )


def _with_writes_in_front(add_verdict: Insert) -> Insert:
    """The verdict's INSERT with the attempts' rows and their rules' counts written in front.

    PostgreSQL runs data-modifying CTEs to completion in the same statement,
    whether or not it reads them: one statement, atomic. Rows travel as JSON
    arrays (``json_to_recordset``: ``attempt_rows`` and ``rule_counts``), so
    the text is one whatever the number of attempts. A rule's row is changed
    once (a statement may not change a row twice), in name order, so
    concurrent workers lock rows in the same order.
    """
    new_rows = _recordset("attempt_rows", ATTEMPT_FIELDS)
    add_attempts = insert(AttemptRow).from_select(
        [*new_rows.c.keys(), "created_at"], select(*new_rows.c, WRITTEN_AT)
    )
    n = _recordset("rule_counts", COUNT_FIELDS).c
    add_counts = _counted(
        postgresql.insert(RuleStatsRow).from_select(
            ["rule", "successes", "failures", "last_success_at", "last_failure_at"],
            select(
                n.rule,
                n.successes,
                n.failures,
                case((n.successes > 0, WRITTEN_AT)),
                case((n.failures > 0, WRITTEN_AT)),
            ),
        )
    )
    return add_verdict.add_cte(add_attempts.cte("attempts_added"), add_counts.cte("counts_added"))


def _recordset(name: str, fields: list[ColumnClause[object]]) -> TableValuedAlias:
    """``json_to_recordset(:name) AS (fields)``: rows bound as one JSON parameter."""
    bound = bindparam(name, type_=JSON)
    return func.json_to_recordset(bound).table_valued(*fields).render_derived(with_types=True)


def _count_rows(tally: Counter[tuple[str, bool]]) -> list[JsonObject]:
    """Each rule's successes and failures, one row a rule, in name order."""
    return [
        {"rule": rule, "successes": tally[rule, True], "failures": tally[rule, False]}
        for rule in sorted({rule for rule, _ in tally})
    ]


def _stored_verdict(conn: Connection, failure_id: str) -> Verdict | None:
    row = conn.execute(select(VerdictRow).where(VerdictRow.failure_id == failure_id)).first()
    if row is None:
        return None
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
            "where": row.where_lines or [],
            "wrapper": row.wrapper,
            "explanation": row.explanation,
        }
    )


def failure_values(f: FailureRecord) -> JsonObject:
    """A failure as the values of its row (the replay's chunk store writes the same)."""
    return {
        "id": f.id,
        "fingerprint": f.fingerprint,
        "facts": f.facts,
        "problem_type": f.problem_type,
        "source": f.source,
        "received_at": f.received_at,
        "explore": f.explore,
        "notes": f.notes,
        "agent": f.agent,
        "idempotency_key": f.idempotency_key,
    }


def verdict_values(v: Verdict) -> JsonObject:
    """A verdict as the values of its row."""
    data = v.to_dict()
    return {
        "failure_id": v.failure_id,
        "status": data["status"],
        "rule": v.rule,
        "mode": v.mode,
        "actions": data["actions"],
        "outputs": data["outputs"],
        "reason": v.reason,
        "attempts": v.attempts,
        "evidence": v.evidence,
        "also": list(v.also),
        "seen_in_passing": list(v.seen_in_passing),
        "where_lines": data["where"] or None,
        "wrapper": v.wrapper,
        "explanation": v.explanation,
        "decided_at": _now(),
    }


def attempt_values(a: AttemptRecord) -> JsonObject:
    """An attempt as the values of its row."""
    return {
        "failure_id": a.failure_id,
        "rule": a.rule,
        "params": a.params,
        "outcome": a.outcome,
        "error": a.error,
        "duration_ms": a.duration_ms,
        "delivery": a.delivery,
        "evidence": a.evidence,
        "created_at": _now(),
    }
