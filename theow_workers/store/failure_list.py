"""The one list of failures, in SQL: the CLI, the console's failure page and the JSON API read it
(``SqlReads.failures.page``, through ``views.failures.failure_list``).

Newest first, keyset-paginated on ``(received_at, id)``: a cursor is the last
row's pair, and the next page is every row strictly after it in that order.
Rows that existed when a walk began are each seen exactly once, however many
failures arrive meanwhile (a new failure sorts before the first page, or lands
where the walk has not been yet), and two failures received in the same
microsecond are never split across a page boundary and lost.

The console passes its old ``before`` time alone (``Cursor(at, None)``), which
reads exactly as it did: ``received_at < at``.

(``Cursor``, ``FailureFilter`` and ``Window`` are the read model's: ``views.ports``.)
"""

from __future__ import annotations

from datetime import UTC

from sqlalchemy import ColumnElement, and_, func, literal_column, or_, select

from theow_workers.store.explore import ExploreStore
from theow_workers.store.figures import NOT_DEMO, REPLAY_SOURCE
from theow_workers.store.schema import FailureRow, RunRow, VerdictRow
from theow_workers.views.ports import (
    ALL,
    ANY_TIME,
    DEMO,
    DEMO_SOURCE,
    LIVE,
    REPLAY,
    SOURCES,
    Cursor,
    FailureFilter,
    FailurePage,
    FailureSummary,
    UnknownSource,
    Window,
    aware,
)

__all__ = [
    "ALL",
    "LIVE",
    "REPLAY",
    "SOURCES",
    "Cursor",
    "FailureFilter",
    "UnknownSource",
    "Window",
    "aware",
    "failure_page",
    "from_source",
]


def from_source(source: str) -> ColumnElement[bool] | None:
    """The condition on failures that keeps those of ``source`` (None: all of them)."""
    if source == LIVE:
        return and_(FailureRow.source.not_like(REPLAY_SOURCE), NOT_DEMO)
    if source == REPLAY:
        return FailureRow.source.like(REPLAY_SOURCE)
    if source == DEMO:
        return FailureRow.source == DEMO_SOURCE
    if source == ALL:
        return None
    raise UnknownSource(source)


def _common(condition: ColumnElement[bool]) -> ColumnElement[bool]:
    """Tell SQLite's planner a condition holds for many rows.

    Without it, ``status = 'unmatched'`` picks the status index and sorts
    every unmatched failure to show the newest 50; walking ``received_at``
    newest first and stopping at 50 is what stays fast with 100,000.
    """
    return func.likelihood(condition, literal_column("0.5"))


def _as_is(condition: ColumnElement[bool]) -> ColumnElement[bool]:
    return condition


def failure_page(
    store: ExploreStore,
    where: FailureFilter,
    after: Cursor | None = None,
    limit: int = 50,
    window: Window = ANY_TIME,
) -> FailurePage:
    """One page of failures, newest first, and the cursor of the next page (None: the last).

    Raises UnknownSource for a ``where.source`` other than live, replay, demo or all.
    """
    repo = FailureRow.facts["repo"].as_string()
    job = FailureRow.facts["job"].as_string()
    # Whose failure it is, from the ledger's run of it (one row a failure; at most one read).
    origin = (
        select(RunRow.origin)
        .where(RunRow.failure_id == FailureRow.id)
        .limit(1)
        .correlate(FailureRow)
        .scalar_subquery()
    )
    query = (
        select(
            FailureRow.id,
            FailureRow.received_at,
            FailureRow.source,
            FailureRow.problem_type,
            repo,
            job,
            VerdictRow.status,
            VerdictRow.rule,
            VerdictRow.mode,
            VerdictRow.reason,
            VerdictRow.wrapper,
            origin,
        )
        .outerjoin(VerdictRow, VerdictRow.failure_id == FailureRow.id)
        .order_by(FailureRow.received_at.desc(), FailureRow.id.desc())
        .limit(limit + 1)
    )
    if after is not None and after.id is None:
        query = query.where(FailureRow.received_at < after.at)
    elif after is not None:
        query = query.where(
            or_(
                FailureRow.received_at < after.at,
                and_(FailureRow.received_at == after.at, FailureRow.id < after.id),
            )
        )
    if window.since is not None:
        query = query.where(FailureRow.received_at >= window.since)
    if window.until is not None:
        query = query.where(FailureRow.received_at < window.until)
    from_this_source = from_source(where.source)
    if from_this_source is not None:
        query = query.where(from_this_source)
    if where.repo:
        query = query.where(repo == where.repo)
    if where.job:
        query = query.where(job == where.job)
    if where.rule:
        query = query.where(VerdictRow.rule == where.rule)
    if where.q:
        query = query.where(FailureRow.id.startswith(where.q.strip(), autoescape=True))
    if where.origin:
        query = query.where(origin == where.origin)
    with store.session() as s:
        common = _common if s.get_bind().dialect.name == "sqlite" else _as_is
        if where.mode:
            query = query.where(common(VerdictRow.mode == where.mode))
        if where.outcome:
            query = query.where(common(VerdictRow.status == where.outcome))
        rows = s.execute(query).all()
    page = tuple(
        FailureSummary(
            id=fid,
            received_at=at if at.tzinfo else at.replace(tzinfo=UTC),
            source=source,
            problem_type=ptype,
            repo=r or "",
            job=j or "",
            outcome=status,
            rule=rule,
            mode=mode,
            reason=reason,
            wrapper=wrapper,
            origin=whose,
        )
        for fid, at, source, ptype, r, j, status, rule, mode, reason, wrapper, whose in rows[:limit]
    )
    if len(rows) <= limit or not page:
        return FailurePage(page, None)
    last = page[-1]
    return FailurePage(page, Cursor(last.received_at, last.id))
