"""What came in, what was tried, and why it ended as it did: ``theow failures`` and the console."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from theow_client.jsontypes import JsonObject
from theow_workers.core.query import error_lines
from theow_workers.core.summary import summarize
from theow_workers.store.explore import ExploreStore
from theow_workers.store.failure_list import (
    ALL,
    LIVE,
    REPLAY,
    SOURCES,
    FailureFilter,
    UnknownSource,
    Window,
    failure_rows,
    from_source,
)
from theow_workers.store.schema import AttemptRow, ExplorationRow, FailureRow, VerdictRow

# Where failures came from (live, replay, all): named in ``failure_list``, read here by the CLI.
__all__ = ["ALL", "LIVE", "REPLAY", "SOURCES", "UnknownSource", "detail", "from_source", "recent"]


def recent(
    store: ExploreStore,
    status: str | None = None,
    since: timedelta | None = None,
    limit: int = 50,
    source: str = LIVE,
) -> list[JsonObject]:
    """The newest failures of ``source`` (live, replay or all); UnknownSource for another.

    The first page of the one failure list (``failure_list.failure_rows``), in the
    CLI's words: the console and the JSON API read the same list.
    """
    where = FailureFilter(outcome=status or "", source=source)
    window = Window(since=datetime.now(UTC) - since if since is not None else None)
    rows, _ = failure_rows(store, where, None, limit, window)
    return [
        {
            "id": r["id"],
            "received_at": r["received_at"].isoformat(),
            "problem_type": r["problem_type"],
            "source": r["source"],
            "status": r["outcome"],
            "rule": r["rule"],
            "wrapper": r["wrapper"],
            "reason": r["reason"],
        }
        for r in rows
    ]


def detail(store: ExploreStore, failure_id: str) -> JsonObject | None:
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
