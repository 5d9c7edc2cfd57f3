"""Replay jobs and their items in SQL: what survives Ctrl-C, a killed worker, a resume.

A job is one row with its options and counters. Each replayed input (a line of
a file, or a stored failure) becomes at most one item row, keyed by
``(job_id, item_key)``: the primary key is the uniqueness that makes a
redelivered chunk or a resumed job harmless. Counters move only in the
transaction that inserts item rows, by the rows that insert actually created
(``INSERT … ON CONFLICT DO NOTHING RETURNING``), so no item is ever counted
twice, whoever records it and however often.

Besides its own rows, a replay reads the failures it selects and replays
(``selected_count``, ``selected_ids``, ``failure_facts``) and compares two
jobs item by item (``newly_matched``, ``changed_rule``, ``lost_matches``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Select, exists, func, inspect, not_, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from theow_client.jsontypes import JsonObject
from theow_workers.store.schema import (
    AttemptRow,
    FailureRow,
    ProposalRow,
    ReplayItemRow,
    ReplayJobRow,
    RunRow,
    VerdictRow,
    expand_id,
)
from theow_workers.views.ports import ReplayJob

# Job statuses. "running" with a stale heartbeat means the driver died.
PENDING, RUNNING, DONE = "pending", "running", "done"
INTERRUPTED, CANCELLED, INCOMPLETE = "interrupted", "cancelled", "incomplete"
# Item statuses beyond a verdict's: input that could not be replayed.
INVALID, DUPLICATE = "invalid", "duplicate"
# A passing run in the history (``"outcome": "success"``): learned into its job's normal.
PASSING = "passing"
# A passed run of a history of runs (``"outcome": "passed"``): recorded in the ledger.
PASSED = "passed"
MATCHED = ("resolved", "suggested", "retry", "tracked")
# No rule knows the cause: nothing matched, or only a wrapper did (``make: *** Error 1``).
UNKNOWN = ("unmatched", "unexplained")
COUNTER_OF = {
    **{s: "matched" for s in MATCHED},
    **{s: "unmatched" for s in UNKNOWN},  # explored alike; `counts` tells the two apart
    "failed": "failed",
    "rejected": "errors",
    "error": "errors",
    INVALID: "invalid",
    DUPLICATE: "duplicates",
    PASSING: "passing",
    PASSED: "passing",  # neither is a replayed failure; ``counts`` tells the two apart
}
COUNTERS = (
    "processed",
    "matched",
    "unmatched",
    "failed",
    "errors",
    "invalid",
    "duplicates",
    "passing",
)


def _now() -> datetime:
    return datetime.now(UTC)


# A job is the read model's dataclass (``views.ports.ReplayJob``), by the name the replay uses.
Job = ReplayJob


def _job(row: ReplayJobRow) -> Job:
    data = {f.name: getattr(row, f.name) for f in fields(Job)}
    for key in ("created_at", "heartbeat_at", "finished_at"):
        if data[key] is not None and data[key].tzinfo is None:  # SQLite drops the zone
            data[key] = data[key].replace(tzinfo=UTC)
    return Job(**data)


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

    def has_tables(self) -> bool:
        """False until ``theow db upgrade`` created the replay tables."""
        return inspect(self.engine).has_table(ReplayJobRow.__tablename__)

    # Jobs

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
            return _job(row)

    def recent(self, limit: int = 20) -> list[Job]:
        with self.session() as s:
            query = select(ReplayJobRow).order_by(ReplayJobRow.created_at.desc()).limit(limit)
            return [_job(r) for r in s.execute(query).scalars()]

    def previous(self, job: Job) -> Job | None:
        """The latest finished job of the same source created before ``job``."""
        query = (
            select(ReplayJobRow)
            .where(
                ReplayJobRow.source_key == job.source_key,
                ReplayJobRow.id != job.id,
                ReplayJobRow.status == DONE,
                ReplayJobRow.created_at < job.created_at,
            )
            .order_by(ReplayJobRow.created_at.desc())
            .limit(1)
        )
        with self.session() as s:
            row = s.execute(query).scalar_one_or_none()
            return _job(row) if row is not None else None

    def update(self, job_id: str, **values: Any) -> None:
        with self.session.begin() as s:
            s.execute(update(ReplayJobRow).where(ReplayJobRow.id == job_id).values(**values))

    # Items

    def record(
        self,
        job_id: str,
        items: Sequence[ItemRecord],
        writes: Callable[[Session], None] | None = None,
    ) -> int:
        """Insert item rows not recorded yet and count exactly those; returns how many.

        ``writes`` (a chunk's failures and verdicts, ``ChunkStore.flush``) runs
        first, in the same transaction.
        """
        if not items and writes is None:
            return 0
        rows = [
            {
                "job_id": job_id,
                "item_key": i.key,
                "line": i.line,
                "failure_id": i.failure_id,
                "status": i.status,
                "rule": i.rule,
                "fingerprint": i.fingerprint,
                "sample": i.sample[:2000],
                "basis": i.basis[:2000],
                "rules_version": i.rules_version,
                "decided_at": _now(),
            }
            for i in items
        ]
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
            bumps: JsonObject = {"processed": ReplayJobRow.processed + len(inserted)}
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

    def where_lines(self, failure_ids: Iterable[str]) -> dict[str, list[JsonObject]]:
        """The lines to look at of each failure's verdict (none for a verdict without them)."""
        ids, found = list(dict.fromkeys(failure_ids)), {}
        for start in range(0, len(ids), 500):  # under SQLite's limit on bound parameters
            query = select(VerdictRow.failure_id, VerdictRow.where_lines).where(
                VerdictRow.failure_id.in_(ids[start : start + 500])
            )
            with self.session() as s:
                found.update({fid: list(lines or []) for fid, lines in s.execute(query)})
        return found

    def items(self, job_id: str, status: str | tuple[str, ...] | None = None) -> list[ItemRecord]:
        """The job's item rows, in input order; of one status, or of any of several."""
        query = select(ReplayItemRow).where(ReplayItemRow.job_id == job_id)
        if isinstance(status, tuple):
            query = query.where(ReplayItemRow.status.in_(status))
        elif status is not None:
            query = query.where(ReplayItemRow.status == status)
        query = query.order_by(ReplayItemRow.line, ReplayItemRow.item_key)
        with self.session() as s:
            return [_item(r) for r in s.execute(query).scalars()]

    def origins(self, job_id: str) -> tuple[dict[str, int], dict[str, int]]:
        """How many of the job's failures have each origin in the ledger, at their verdict
        (``origin_then``) and as it stands (``origin``)."""
        linked = (
            select(RunRow.origin_then, RunRow.origin)
            .join(ReplayItemRow, ReplayItemRow.failure_id == RunRow.failure_id)
            .where(ReplayItemRow.job_id == job_id, RunRow.origin.is_not(None))
        )
        then: Counter[str] = Counter()
        now: Counter[str] = Counter()
        with self.session() as s:
            for before, origin in s.execute(linked):
                now[str(origin)] += 1
                then[str(before or origin)] += 1
        return dict(then), dict(now)

    # Two jobs of one source, item by item

    def newly_matched(self, before: str, now: str) -> tuple[dict[str, int], dict[str, str]]:
        """Items no rule matched in ``before`` that one matches in ``now``, counted per rule now;
        and for those rules that came from an approved proposal, the proposal's id."""
        a, b = ReplayItemRow.__table__.alias("a"), ReplayItemRow.__table__.alias("b")
        query = (
            select(b.c.rule, func.count())
            .join(b, (b.c.item_key == a.c.item_key) & (b.c.job_id == now))
            .where(a.c.job_id == before, a.c.status.not_in(MATCHED), b.c.status.in_(MATCHED))
            .group_by(b.c.rule)
        )
        with self.session() as s:
            counts = {str(rule): int(n) for rule, n in s.execute(query)}
            approved = {
                name: pid
                for name, pid in s.execute(
                    select(ProposalRow.rule_name, ProposalRow.id).where(
                        ProposalRow.status == "approved", ProposalRow.rule_name.in_(list(counts))
                    )
                )
            }
        return counts, approved

    def changed_rule(self, before: str, now: str) -> list[tuple[str, int | None, str, str]]:
        """Items matched in both jobs, by a different rule now: (key, line, rule before, rule now)."""
        a, b = ReplayItemRow.__table__.alias("a"), ReplayItemRow.__table__.alias("b")
        query = (
            select(a.c.item_key, a.c.line, a.c.rule, b.c.rule)
            .join(b, (b.c.item_key == a.c.item_key) & (b.c.job_id == now))
            .where(a.c.job_id == before, a.c.status.in_(MATCHED), b.c.status.in_(MATCHED))
            .where(a.c.rule != b.c.rule)
            .order_by(a.c.line, a.c.item_key)
        )
        with self.session() as s:
            return [(k, ln, r, nr) for k, ln, r, nr in s.execute(query)]

    def lost_matches(self, before: str, now: str) -> list[tuple[str, int | None, str, str, str]]:
        """Items a rule matched in ``before`` that it does not match in ``now``.

        Rows: (key, line, rule before, status now, rule now or "").
        """
        a, b = ReplayItemRow.__table__.alias("a"), ReplayItemRow.__table__.alias("b")
        query = (
            select(a.c.item_key, a.c.line, a.c.rule, b.c.status, b.c.rule)
            .join(b, (b.c.item_key == a.c.item_key) & (b.c.job_id == now))
            .where(a.c.job_id == before, a.c.status.in_(MATCHED))
            .where((b.c.rule.is_(None)) | (b.c.rule != a.c.rule))
            .order_by(a.c.line, a.c.item_key)
        )
        with self.session() as s:
            return [(k, ln, r, st, nr or "") for k, ln, r, st, nr in s.execute(query)]

    # The failures a replay reads

    def failure_facts(self, failure_ids: Sequence[str]) -> dict[str, JsonObject]:
        """The stored facts of those of ``failure_ids`` that exist."""
        if not failure_ids:
            return {}
        query = select(FailureRow.id, FailureRow.facts).where(FailureRow.id.in_(failure_ids))
        with self.session() as s:
            return {fid: facts for fid, facts in s.execute(query)}

    def failure(self, failure_id: str) -> tuple[str, JsonObject]:
        """A stored failure's (fingerprint, facts); ("", {}) if there is none."""
        query = select(FailureRow.fingerprint, FailureRow.facts).where(FailureRow.id == failure_id)
        with self.session() as s:
            row = s.execute(query).one_or_none()
        return (row[0], row[1]) if row is not None else ("", {})

    def selected_count(self, selection: JsonObject) -> int:
        """How many stored failures ``selection`` takes (see ``_selected``)."""
        with self.session() as s:
            return int(
                s.execute(_selected(select(func.count(FailureRow.id)), selection)).scalar_one()
            )

    def selected_ids(self, selection: JsonObject, after: str, limit: int) -> list[str]:
        """The ids ``selection`` takes, in id order: the next ``limit`` after ``after``."""
        query = _selected(select(FailureRow.id), selection).where(FailureRow.id > after)
        with self.session() as s:
            return list(s.execute(query.order_by(FailureRow.id).limit(limit)).scalars())


_T = TypeVar("_T")


def _selected(query: Select[_T], selection: JsonObject) -> Select[_T]:
    """Stored failures by time (``from``, ``until``), verdict (``unmatched_only``) and ``rule``.

    Failures recorded by replays are never selected, nor rejected submissions
    (they have no facts).
    """
    query = query.outerjoin(VerdictRow, VerdictRow.failure_id == FailureRow.id).where(
        not_(FailureRow.source.like("replay:%")),
        or_(VerdictRow.status.is_(None), VerdictRow.status != "rejected"),
        FailureRow.received_at <= datetime.fromisoformat(selection["until"]),
    )
    if selection.get("from"):
        query = query.where(FailureRow.received_at >= datetime.fromisoformat(selection["from"]))
    if selection.get("unmatched_only"):
        query = query.where(VerdictRow.status.in_(UNKNOWN))
    if selection.get("rule"):
        rule = selection["rule"]
        tried = exists().where(AttemptRow.failure_id == FailureRow.id, AttemptRow.rule == rule)
        query = query.where(or_(VerdictRow.rule == rule, tried))
    return query


def _item(row: ReplayItemRow) -> ItemRecord:
    named = {f.name: getattr(row, f.name) for f in fields(ItemRecord) if f.name != "key"}
    return ItemRecord(key=row.item_key, **named)
