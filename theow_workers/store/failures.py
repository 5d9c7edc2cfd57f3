"""What came in, what was tried, and why it ended as it did, read on an ExploreStore.

The screens read the views (``views.failures``) on the read model
(``store.reads.SqlReads``); ``recent`` and ``detail`` are those views on a
store, for the callers that hold one.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update
from sqlalchemy.engine import Engine

from theow_client.jsontypes import JsonObject
from theow_workers.store.explore import ExploreStore
from theow_workers.store.failure_list import (
    ALL,
    LIVE,
    REPLAY,
    SOURCES,
    UnknownSource,
    from_source,
)
from theow_workers.store.reads import SqlReads
from theow_workers.store.schema import FailureRow
from theow_workers.views.failures import cli_rows, failure_detail

# Where failures came from (live, replay, all): named in ``views.ports``, read here by the CLI.
__all__ = [
    "ALL",
    "LIVE",
    "REPLAY",
    "SOURCES",
    "UnknownSource",
    "detail",
    "from_source",
    "label_agent",
    "recent",
]


def recent(
    store: ExploreStore,
    status: str | None = None,
    since: timedelta | None = None,
    limit: int = 50,
    source: str = LIVE,
) -> list[JsonObject]:
    """The newest failures of ``source`` (live, replay, demo or all); UnknownSource for another.

    ``theow failures list``'s rows (``views.failures.cli_rows``).
    """
    return cli_rows(SqlReads(store), status, since, limit, source)


def detail(store: ExploreStore, failure_id: str) -> JsonObject | None:
    """One failure as ``theow failures show --json`` prints it (``views.failures.failure_detail``)."""
    return failure_detail(SqlReads(store), failure_id)


def label_agent(engine: Engine, agent: str, source: str) -> int:
    """Store every failure ``agent`` sent as of ``source``; how many there were.

    The workers record a verified agent's failures as ``agent:<name>``; ``theow demo``
    labels its own agent's ``demo`` afterwards, which keeps them out of live lists and figures.
    """
    with engine.begin() as conn:
        done = conn.execute(
            update(FailureRow).where(FailureRow.agent == agent).values(source=source)
        )
    return int(done.rowcount)
