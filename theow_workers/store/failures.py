"""What came in, what was tried, and why it ended as it did: ``theow failures`` and the console."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from theow_workers.core.query import error_lines
from theow_workers.core.summary import summarize
from theow_workers.store.explore import ExploreStore
from theow_workers.store.figures import REPLAY_SOURCE
from theow_workers.store.schema import AttemptRow, ExplorationRow, FailureRow, VerdictRow

# Where failures came from: ``live`` (build agents, the demo, anything but a replay),
# ``replay`` (a replay's, source ``replay:<job>``) or ``all``.
LIVE, REPLAY, ALL = "live", "replay", "all"
SOURCES = (LIVE, REPLAY, ALL)


class UnknownSource(ValueError):
    def __init__(self, given: str) -> None:
        super().__init__(f"source {given!r}: use {', '.join(SOURCES)}")


def from_source(source: str) -> Any:
    """The condition on failures that keeps those of ``source`` (None: all of them)."""
    if source == LIVE:
        return FailureRow.source.not_like(REPLAY_SOURCE)
    if source == REPLAY:
        return FailureRow.source.like(REPLAY_SOURCE)
    if source == ALL:
        return None
    raise UnknownSource(source)


def recent(
    store: ExploreStore,
    status: str | None = None,
    since: timedelta | None = None,
    limit: int = 50,
    source: str = LIVE,
) -> list[dict[str, Any]]:
    """The newest failures of ``source`` (live, replay or all); UnknownSource for another."""
    query = (
        select(FailureRow, VerdictRow)
        .outerjoin(VerdictRow, VerdictRow.failure_id == FailureRow.id)
        .order_by(FailureRow.received_at.desc())
        .limit(limit)
    )
    condition = from_source(source)
    if condition is not None:
        query = query.where(condition)
    if status is not None:
        query = query.where(VerdictRow.status == status)
    if since is not None:
        query = query.where(FailureRow.received_at >= datetime.now(UTC) - since)
    with store.session() as s:
        return [
            {
                "id": failure.id,
                "received_at": failure.received_at.isoformat(),
                "problem_type": failure.problem_type,
                "source": failure.source,
                "status": verdict.status if verdict else None,
                "rule": verdict.rule if verdict else None,
                "wrapper": verdict.wrapper if verdict else None,
                "reason": verdict.reason if verdict else None,
            }
            for failure, verdict in s.execute(query).all()
        ]


def detail(store: ExploreStore, failure_id: str) -> dict[str, Any] | None:
    with store.session() as s:
        failure = s.get(FailureRow, failure_id)
        if failure is None:
            return None
        verdict = s.get(VerdictRow, failure_id)
        attempts = s.execute(
            select(AttemptRow).where(AttemptRow.failure_id == failure_id).order_by(AttemptRow.id)
        ).scalars()
        explorations = s.execute(
            select(ExplorationRow).where(ExplorationRow.failure_id == failure_id)
        ).scalars()
        return {
            "id": failure.id,
            "received_at": failure.received_at.isoformat(),
            "source": failure.source,
            "fingerprint": failure.fingerprint,
            "facts": failure.facts,
            "notes": failure.notes,
            "error_lines": error_lines(summarize(failure.facts)),
            "verdict": None
            if verdict is None
            else {
                "status": verdict.status,
                "rule": verdict.rule,
                "mode": verdict.mode,
                "actions": verdict.actions,
                "outputs": verdict.outputs,
                "reason": verdict.reason,
                "evidence": verdict.evidence,
                "also": verdict.also or [],
                "seen_in_passing": verdict.seen_in_passing or [],
                "where": verdict.where_lines or [],
                "wrapper": verdict.wrapper,
                "explanation": verdict.explanation,
            },
            "attempts": [
                {
                    "rule": a.rule,
                    "params": a.params,
                    "outcome": a.outcome,
                    "error": a.error,
                    "duration_ms": a.duration_ms,
                    "delivery": a.delivery,
                    "evidence": a.evidence,
                }
                for a in attempts
            ],
            "explorations": [
                {
                    "id": e.id,
                    "outcome": e.outcome,
                    "reason": e.reason,
                    "proposal_id": e.proposal_id,
                    "models": e.models,
                    "turns": e.turns,
                    "tokens_in": e.tokens_in,
                    "tokens_out": e.tokens_out,
                    "cost": e.cost,
                }
                for e in explorations
            ],
        }
