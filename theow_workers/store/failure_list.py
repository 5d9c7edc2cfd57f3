"""The one list of failures: the console's failure page and the JSON API both read it.

Newest first, keyset-paginated on ``(received_at, id)``: a cursor is the last
row's pair, and the next page is every row strictly after it in that order.
Rows that existed when a walk began are each seen exactly once, however many
failures arrive meanwhile (a new failure sorts before the first page, or lands
where the walk has not been yet), and two failures received in the same
microsecond are never split across a page boundary and lost.

The console passes its old ``before`` time alone (``Cursor(at, None)``), which
reads exactly as it did: ``received_at < at``.

>>> Cursor.decode(Cursor(datetime(2026, 1, 2, tzinfo=UTC), "f-1").encode())
Cursor(at=datetime.datetime(2026, 1, 2, 0, 0, tzinfo=datetime.timezone.utc), id='f-1')
>>> Cursor.decode("not a cursor") is None
True
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, func, literal_column, or_, select

from theow_client.jsontypes import JsonObject
from theow_workers.store.explore import ExploreStore
from theow_workers.store.figures import REPLAY_SOURCE
from theow_workers.store.schema import FailureRow, VerdictRow

CURSOR_CHARS = 400  # a cursor is a time and an id: anything longer is not one of ours

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
    outcome: str = ""  # the verdict's status
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


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the last row's receipt time and id (id None: time only)."""

    at: datetime
    id: str | None = None

    def encode(self) -> str:
        raw = json.dumps([self.at.isoformat(), self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor | None:
        """The cursor ``text`` encodes, or None when it is not one ``encode`` wrote."""
        if not text or len(text) > CURSOR_CHARS:
            return None
        try:
            at, fid = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            when = datetime.fromisoformat(at)
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
            return None
        if fid is not None and not isinstance(fid, str):
            return None
        return cls(when if when.tzinfo else when.replace(tzinfo=UTC), fid)


@dataclass(frozen=True)
class Window:
    """Received at or after ``since`` and before ``until`` (either may be open)."""

    since: datetime | None = None
    until: datetime | None = None


def failure_page(
    store: ExploreStore,
    where: FailureFilter,
    after: Cursor | None = None,
    limit: int = 50,
    window: Window = Window(),
) -> tuple[list[JsonObject], Cursor | None]:
    """One page of failures, newest first, and the cursor of the next page (None: the last).

    Raises UnknownSource for a ``where.source`` other than live, replay or all.
    """
    repo = FailureRow.facts["repo"].as_string()
    job = FailureRow.facts["job"].as_string()
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
    with store.session() as s:
        common = _common if s.get_bind().dialect.name == "sqlite" else (lambda c: c)
        if where.mode:
            query = query.where(common(VerdictRow.mode == where.mode))
        if where.outcome:
            query = query.where(common(VerdictRow.status == where.outcome))
        rows = s.execute(query).all()
    page = [
        {
            "id": fid,
            "received_at": aware(at),
            "source": source,
            "problem_type": ptype,
            "repo": r or "",
            "job": j or "",
            "outcome": status,
            "rule": rule,
            "mode": mode,
            "reason": reason,
            "wrapper": wrapper,
        }
        for fid, at, source, ptype, r, j, status, rule, mode, reason, wrapper in rows[:limit]
    ]
    if len(rows) <= limit or not page:
        return page, None
    last = page[-1]
    return page, Cursor(last["received_at"], last["id"])
