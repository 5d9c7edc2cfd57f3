"""The failure screens: the one failure list (CLI, console, JSON API) and one failure.

Every list of failures is ``failure_list``: ``theow failures list`` shows its
first page (``cli_rows``), the console's ``/failures`` pages it by time
(``console_page``) and ``GET /api/v1/failures`` by cursor (``api_page``).
One failure is ``failure_detail`` (``theow failures show --json``, the
console's failure page, ``GET /api/v1/failures/{id}``); its verdict's ``fixes``
are the fixes its actions suggest or made, one line each. Each failure whose
run the ledger knows has its ``origin`` (whose it is: ``change``, ``main``,
``flaky``, ``infra``, ``unknown``); one failure shows it with ``origin_then``
(as decided at the verdict), the culprit, the fix and the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from theow_client.jsontypes import JsonObject
from theow_client.verdict import fixes_in
from theow_workers.core.logs.summary import summarize
from theow_workers.core.resolve.fingerprint import error_lines
from theow_workers.views.ports import (
    ANY_TIME,
    LIVE,
    SOURCES,
    Cursor,
    FailureDetail,
    FailureFilter,
    Reads,
    UnknownSource,
    Window,
)

PAGE = 50


def checked(where: FailureFilter) -> FailureFilter:
    """``where`` itself; UnknownSource when its source is not one of SOURCES."""
    if where.source not in SOURCES:
        raise UnknownSource(where.source)
    return where


@dataclass(frozen=True)
class FailureList:
    """A page of the failure list: one dict a row (``FailureSummary``'s fields), newest first."""

    rows: list[JsonObject]
    next: Cursor | None  # None: the last page


def failure_list(
    reads: Reads,
    where: FailureFilter,
    after: Cursor | None = None,
    limit: int = PAGE,
    window: Window = ANY_TIME,
) -> FailureList:
    """The one failure list. Raises UnknownSource for an unknown ``where.source``."""
    page = reads.failures.page(checked(where), after, limit, window)
    return FailureList([asdict(r) for r in page.rows], page.next)


def cli_rows(
    reads: Reads,
    status: str | None = None,
    since: timedelta | None = None,
    limit: int = PAGE,
    source: str = LIVE,
    origin: str | None = None,
) -> list[JsonObject]:
    """``theow failures list``: the newest failures of ``source``, in the CLI's words."""
    where = FailureFilter(outcome=status or "", source=source, origin=origin or "")
    window = Window(since=datetime.now(UTC) - since if since is not None else None)
    listed = failure_list(reads, where, None, limit, window)
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
            "origin": r["origin"],
        }
        for r in listed.rows
    ]


def console_page(
    reads: Reads, where: FailureFilter, before: datetime | None = None, limit: int = PAGE
) -> tuple[list[JsonObject], datetime | None]:
    """The console's ``/failures``: a page and the time cursor of the next (or None).

    Paged by time alone, as the console always did (``Cursor(before)``).
    """
    after = Cursor(before) if before is not None else None
    listed = failure_list(reads, where, after, limit)
    return listed.rows, (listed.next.at if listed.next is not None else None)


def api_page(
    reads: Reads, where: FailureFilter, after: Cursor | None, limit: int, window: Window
) -> JsonObject:
    """``GET /api/v1/failures``: the rows (the outcome named ``status``) and the next cursor."""
    listed = failure_list(reads, where, after, limit, window)
    rows = [
        {**{k: v for k, v in r.items() if k != "outcome"}, "status": r["outcome"]}
        for r in listed.rows
    ]
    return {"failures": rows, "next": listed.next.encode() if listed.next else None}


def failure_detail(reads: Reads, failure_id: str) -> JsonObject | None:
    """One failure: its facts, error lines, verdict, attempts and explorations (None: no such)."""
    found = reads.failures.detail(failure_id)
    return None if found is None else shown(found)


def shown(failure: FailureDetail) -> JsonObject:
    v = failure.verdict
    return {
        "id": failure.id,
        "received_at": failure.received_at.isoformat(),
        "source": failure.source,
        "fingerprint": failure.fingerprint,
        "facts": failure.facts,
        "notes": failure.notes,
        "error_lines": error_lines(summarize(failure.facts)),
        # Whose failure it is (None: it came without its run's metadata); as it stands, and
        # as it was decided at its verdict (``origin_then``).
        "origin": asdict(failure.origin) if failure.origin is not None else None,
        "verdict": None
        if v is None
        else {
            "status": v.status,
            "rule": v.rule,
            "mode": v.mode,
            "actions": v.actions,
            "outputs": v.outputs,
            # The answer in plain words: what the actions suggest or made (``pip install …``).
            "fixes": list(fixes_in(v.outputs)),
            "reason": v.reason,
            "evidence": v.evidence,
            "also": v.also,
            "seen_in_passing": v.seen_in_passing,
            "where": v.where,
            "wrapper": v.wrapper,
            "explanation": v.explanation,
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
            for a in failure.attempts
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
            for e in failure.explorations
        ],
    }
