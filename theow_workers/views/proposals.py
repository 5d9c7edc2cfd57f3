"""The proposal screens: ``theow review list``, the console's review queue and its reviewed list."""

from __future__ import annotations

from theow_client.jsontypes import JsonObject
from theow_workers.views.ports import ProposalEntry, Reads, aware

REVIEWED = 20  # the reviewed proposals the queue page lists


def origin(entry: ProposalEntry) -> tuple[str, str | None]:
    """(origin, by whom): ``taught`` by a person (``theow teach``), else ``explorer``."""
    e = entry.exploration
    if e is not None and e.outcome == "taught":
        return "taught", e.session_id.removeprefix("taught:") or None
    return "explorer", None


def summary(entry: ProposalEntry) -> JsonObject:
    """A proposal as ``theow review list --json`` shows it (``review.proposals.summary``)."""
    source, taught_by = origin(entry)
    e = entry.exploration
    return {
        "id": entry.id,
        "origin": source,
        "taught_by": taught_by,
        "rule": entry.rule_name,
        "status": entry.status,
        "failure_id": entry.failure_id,
        "created_at": entry.created_at.isoformat() if entry.created_at else None,
        "files": entry.files,
        "tokens_in": e.tokens_in if e else 0,
        "tokens_out": e.tokens_out if e else 0,
        "cost": round(e.cost, 6) if e else 0.0,
        "reviewed_by": entry.reviewed_by,
        "reviewed_at": entry.reviewed_at.isoformat() if entry.reviewed_at else None,
        "review_reason": entry.review_reason,
    }


def proposal_list(reads: Reads, status: str | None = None) -> list[JsonObject]:
    """``theow review list``: proposals of ``status`` (None: all), oldest first."""
    return [summary(p) for p in reads.proposals.by_status(status)]


def review_queue(reads: Reads) -> list[JsonObject]:
    """The console's queue: pending proposals with their session's tokens and cost, newest first."""
    rows: list[JsonObject] = []
    for p in reads.proposals.queue():
        e = p.exploration
        rows.append(
            {
                "id": p.id,
                "rule": p.rule_name,
                "created_at": aware(p.created_at),
                "failure_id": p.failure_id,
                "files": p.files,
                "tokens_in": e.tokens_in if e else 0,
                "tokens_out": e.tokens_out if e else 0,
                "cost": e.cost if e else 0.0,
                "models": e.models if e else [],
            }
        )
    return rows


def recently_reviewed(reads: Reads, limit: int = REVIEWED) -> list[JsonObject]:
    """The console's reviewed proposals, last reviewed first."""
    return [
        {
            "id": p.id,
            "rule": p.rule_name,
            "status": p.status,
            "reviewed_by": p.reviewed_by,
            "reviewed_at": aware(p.reviewed_at),
            "reason": p.review_reason,
        }
        for p in reads.proposals.reviewed(limit)
    ]
