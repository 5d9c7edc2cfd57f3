"""What the web console's list pages read: paginated, indexed queries over the SQL store.

Detail pages reuse the CLI's queries (``store.failures.detail``,
``review.stats.meow``, ``replay.report.build``); the queries here are the ones
a terminal never needed: a page of failures filtered by repo, job, rule, mode
and outcome, per-rule activity, and per-day series for the insight plots.
Every list is bounded (``PAGE`` rows, keyset pagination on ``received_at``)
so a page costs the same with 100 or 100,000 failures stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import func, literal_column, select

from theow_workers.store.explore import ExploreStore
from theow_workers.store.failures import LIVE, from_source
from theow_workers.store.figures import LLM_OUTCOMES, MATCHED
from theow_workers.store.schema import ExplorationRow, FailureRow, ProposalRow, VerdictRow

PAGE = 50
RECENT_MATCHES = 20
GROUPS = 10
# A rule that matched before and not within this window has "stopped matching".
QUIET = timedelta(days=14)


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
    outcome: str = ""
    q: str = ""  # a failure id or its prefix
    source: str = LIVE  # live, replay or all (failures.SOURCES)

    def active(self) -> dict[str, str]:
        """The filters that differ from a bare /failures (live failures, any of the rest)."""
        return {k: v for k, v in self.__dict__.items() if v and not (k == "source" and v == LIVE)}


def _common(condition: Any) -> Any:
    """Tell SQLite's planner a condition holds for many rows.

    Without it, ``status = 'unmatched'`` picks the status index and sorts
    every unmatched failure to show the newest 50; walking ``received_at``
    newest first and stopping at 50 is what stays fast with 100,000.
    """
    return func.likelihood(condition, literal_column("0.5"))


def failures_page(
    store: ExploreStore, where: FailureFilter, before: datetime | None = None, limit: int = PAGE
) -> tuple[list[dict[str, Any]], datetime | None]:
    """One page of failures, newest first, and the cursor of the next page (or None).

    Raises UnknownSource for a ``where.source`` other than live, replay or all.
    """
    repo = FailureRow.facts["repo"].as_string()
    job = FailureRow.facts["job"].as_string()
    query = (
        select(FailureRow.id, FailureRow.received_at, FailureRow.source, FailureRow.problem_type,
               repo, job, VerdictRow.status, VerdictRow.rule, VerdictRow.mode)
        .outerjoin(VerdictRow, VerdictRow.failure_id == FailureRow.id)
        .order_by(FailureRow.received_at.desc())
        .limit(limit + 1)
    )  # fmt: skip
    if before is not None:
        query = query.where(FailureRow.received_at < before)
    from_this_source = from_source(where.source)
    if from_this_source is not None:
        query = query.where(from_this_source)
    if where.repo:
        query = query.where(repo == where.repo)
    if where.job:
        query = query.where(job == where.job)
    if where.rule:
        query = query.where(VerdictRow.rule == where.rule)
    common = _common if store.sql.engine.dialect.name == "sqlite" else (lambda c: c)
    if where.mode:
        query = query.where(common(VerdictRow.mode == where.mode))
    if where.outcome:
        query = query.where(common(VerdictRow.status == where.outcome))
    if where.q:
        query = query.where(FailureRow.id.startswith(where.q.strip(), autoescape=True))
    with store.session() as s:
        rows = s.execute(query).all()
    page = [
        {"id": fid, "received_at": aware(at), "source": source, "problem_type": ptype,
         "repo": r or "", "job": j or "", "outcome": status, "rule": rule, "mode": mode}
        for fid, at, source, ptype, r, j, status, rule, mode in rows[:limit]
    ]  # fmt: skip
    more = len(rows) > limit
    return page, (page[-1]["received_at"] if more and page else None)


def rule_activity(store: ExploreStore) -> dict[str, dict[str, Any]]:
    """Per rule: matches (verdicts naming it) and the last one."""
    query = (
        select(VerdictRow.rule, func.count(), func.max(VerdictRow.decided_at))
        .where(VerdictRow.rule.is_not(None))
        .group_by(VerdictRow.rule)
    )
    with store.session() as s:
        return {
            str(rule): {"hits": int(n), "last_match": aware(last)}
            for rule, n, last in s.execute(query).all()
        }


def rule_activity_of(store: ExploreStore, rule: str) -> dict[str, Any]:
    query = select(func.count(), func.max(VerdictRow.decided_at)).where(VerdictRow.rule == rule)
    with store.session() as s:
        n, last = s.execute(query).one()
    return {"hits": int(n), "last_match": aware(last)}


def rule_matches(
    store: ExploreStore, rule: str, limit: int = RECENT_MATCHES
) -> list[dict[str, Any]]:
    query = (
        select(VerdictRow.failure_id, VerdictRow.status, VerdictRow.decided_at, VerdictRow.evidence)
        .where(VerdictRow.rule == rule)
        .order_by(VerdictRow.decided_at.desc())
        .limit(limit)
    )
    with store.session() as s:
        return [
            {"failure_id": fid, "status": st, "decided_at": aware(at), "evidence": ev}
            for fid, st, at, ev in s.execute(query).all()
        ]


def queue(store: ExploreStore) -> list[dict[str, Any]]:
    """Pending proposals with their session's tokens and cost, newest first."""
    query = (
        select(ProposalRow.id, ProposalRow.rule_name, ProposalRow.created_at, ProposalRow.failure_id,
               ProposalRow.diffs, ExplorationRow.tokens_in, ExplorationRow.tokens_out,
               ExplorationRow.cost, ExplorationRow.models)
        .join(ExplorationRow, ExplorationRow.id == ProposalRow.exploration_id)
        .where(ProposalRow.status == "pending")
        .order_by(ProposalRow.created_at.desc())
    )  # fmt: skip
    with store.session() as s:
        return [
            {"id": pid, "rule": name, "created_at": aware(at), "failure_id": fid,
             "files": [d["path"] for d in diffs or []], "tokens_in": tin or 0,
             "tokens_out": tout or 0, "cost": cost or 0.0, "models": models or []}
            for pid, name, at, fid, diffs, tin, tout, cost, models in s.execute(query).all()
        ]  # fmt: skip


def reviewed(store: ExploreStore, limit: int = 20) -> list[dict[str, Any]]:
    query = (
        select(ProposalRow.id, ProposalRow.rule_name, ProposalRow.status, ProposalRow.reviewed_by,
               ProposalRow.reviewed_at, ProposalRow.review_reason)
        .where(ProposalRow.status != "pending")
        .order_by(ProposalRow.reviewed_at.desc())
        .limit(limit)
    )  # fmt: skip
    with store.session() as s:
        return [
            {"id": pid, "rule": name, "status": st, "reviewed_by": by,
             "reviewed_at": aware(at), "reason": reason}
            for pid, name, st, by, at, reason in s.execute(query).all()
        ]  # fmt: skip


def _days(start: date, days: int) -> list[date]:
    return [start + timedelta(days=i) for i in range(days)]


def _day(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])


def series(store: ExploreStore, days: int = 30) -> dict[str, Any]:
    """Per day over the last ``days``: failures, matched, hit rate, LLM sessions, cost."""
    today = datetime.now(UTC).date()
    first = today - timedelta(days=days - 1)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    day_v = func.date(VerdictRow.decided_at)
    day_x = func.date(ExplorationRow.finished_at)
    with store.session() as s:
        verdicts = s.execute(
            select(day_v, VerdictRow.status, func.count())
            .where(VerdictRow.decided_at >= start)
            .group_by(day_v, VerdictRow.status)
        ).all()
        explorations = s.execute(
            select(day_x, ExplorationRow.outcome, func.count(), func.sum(ExplorationRow.cost))
            .where(ExplorationRow.finished_at >= start)
            .group_by(day_x, ExplorationRow.outcome)
        ).all()
    axis = _days(first, days)
    total = dict.fromkeys(axis, 0)
    matched = dict.fromkeys(axis, 0)
    sessions = dict.fromkeys(axis, 0)
    cost = dict.fromkeys(axis, 0.0)
    for day, status, n in verdicts:
        d = _day(day)
        if d in total:
            total[d] += int(n)
            matched[d] += int(n) if status in MATCHED else 0
    for day, outcome, n, dollars in explorations:
        d = _day(day)
        if d in sessions:
            sessions[d] += int(n) if outcome in LLM_OUTCOMES else 0
            cost[d] += float(dollars or 0.0)
    return {
        "days": axis,
        "failures": [total[d] for d in axis],
        "matched": [matched[d] for d in axis],
        "hit_rate": [matched[d] / total[d] if total[d] else None for d in axis],
        "sessions": [sessions[d] for d in axis],
        "cost": [round(cost[d], 6) for d in axis],
    }


def unmatched_groups(store: ExploreStore, limit: int = GROUPS) -> list[dict[str, Any]]:
    """The largest root causes (same fingerprint) no rule explains, with one failure each."""
    query = (
        select(FailureRow.fingerprint, func.count(), func.max(FailureRow.id),
               func.max(FailureRow.received_at))
        .join(VerdictRow, VerdictRow.failure_id == FailureRow.id)
        .where(VerdictRow.status.in_(("unmatched", "unexplained", "exploring")))
        .group_by(FailureRow.fingerprint)
        .order_by(func.count().desc())
        .limit(limit)
    )  # fmt: skip
    with store.session() as s:
        return [
            {"fingerprint": fp, "size": int(n), "example": fid, "last": aware(last)}
            for fp, n, fid, last in s.execute(query).all()
        ]
