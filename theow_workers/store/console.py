"""What the web console's rule and insight pages read: bounded, indexed queries over the SQL store.

The failure list, one failure, the review queue and the totals are the read
model's (``store.reads``, rendered by ``theow_workers.views``, as the CLI and
the JSON API render them); the queries here are the ones a terminal never
needed: per-rule activity, per-day series for the insight plots, and the
newest failures no rule explains (which the insight page groups as a replay
does: ``web.groups``). Every list is bounded, so a page costs the same with
100 or 100,000 failures stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import func, select

from theow_client.jsontypes import JsonObject
from theow_client.verdict import Status
from theow_workers.store.explore import ExploreStore
from theow_workers.store.failure_list import _common, aware
from theow_workers.store.figures import LLM_OUTCOMES, MATCHED, NOT_DEMO
from theow_workers.store.schema import ExplorationRow, FailureRow, VerdictRow

PAGE = 50
RECENT_MATCHES = 20
GROUPS = 10
# The newest failures no rule explains that the insight page groups (grouping reads their logs).
UNKNOWN_SCAN = 1000
UNKNOWN = (str(Status.UNMATCHED), str(Status.UNEXPLAINED), str(Status.EXPLORING))
# A rule that matched before and not within this window has "stopped matching".
QUIET = timedelta(days=14)


@dataclass(frozen=True)
class UnknownFailure:
    id: str
    fingerprint: str
    received_at: datetime | None


def rule_activity(store: ExploreStore) -> dict[str, JsonObject]:
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


def rule_activity_of(store: ExploreStore, rule: str) -> JsonObject:
    query = select(func.count(), func.max(VerdictRow.decided_at)).where(VerdictRow.rule == rule)
    with store.session() as s:
        n, last = s.execute(query).one()
    return {"hits": int(n), "last_match": aware(last)}


def rule_matches(store: ExploreStore, rule: str, limit: int = RECENT_MATCHES) -> list[JsonObject]:
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


def _days(start: date, days: int) -> list[date]:
    return [start + timedelta(days=i) for i in range(days)]


def _day(value: date | str) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])


def series(store: ExploreStore, days: int = 30) -> JsonObject:
    """Per day over the last ``days``: failures, matched, hit rate, LLM sessions, cost
    (the demo's failures left out, as in ``theow meow``)."""
    today = datetime.now(UTC).date()
    first = today - timedelta(days=days - 1)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    day_v = func.date(VerdictRow.decided_at)
    day_x = func.date(ExplorationRow.finished_at)
    with store.session() as s:
        verdicts = s.execute(
            select(day_v, VerdictRow.status, func.count())
            .join(FailureRow, FailureRow.id == VerdictRow.failure_id)
            .where(VerdictRow.decided_at >= start, NOT_DEMO)
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


def unknown_failures(store: ExploreStore, limit: int = UNKNOWN_SCAN) -> list[UnknownFailure]:
    """The newest failures no rule explains (unmatched, unexplained, exploring), newest first;
    not the demo's.

    Bounded: the insight page groups what a fleet met lately, never the whole table.
    """
    query = (
        select(FailureRow.id, FailureRow.fingerprint, FailureRow.received_at)
        .join(VerdictRow, VerdictRow.failure_id == FailureRow.id)
        .where(_common(VerdictRow.status.in_(UNKNOWN)), NOT_DEMO)
        .order_by(FailureRow.received_at.desc())
        .limit(limit)
    )
    with store.session() as s:
        return [UnknownFailure(fid, fp or "", aware(at)) for fid, fp, at in s.execute(query).all()]


def facts_of(store: ExploreStore, ids: list[str]) -> dict[str, JsonObject]:
    """The stored (redacted) facts of each failure id found, in one query per 500 ids."""
    found: dict[str, JsonObject] = {}
    with store.session() as s:
        for start in range(0, len(ids), 500):
            query = select(FailureRow.id, FailureRow.facts).where(
                FailureRow.id.in_(ids[start : start + 500])
            )
            found.update((fid, facts or {}) for fid, facts in s.execute(query).all())
    return found
