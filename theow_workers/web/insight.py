"""What the insight page shows, read from the store (``pages.insight``)."""

from __future__ import annotations

from theow_client.jsontypes import JsonObject
from theow_workers.store import console as queries
from theow_workers.store.explore import ExploreStore
from theow_workers.store.reads import SqlReads
from theow_workers.views.stats import meow
from theow_workers.web.groups import BasisCache, unknown_groups


def insight_data(store: ExploreStore, bases: BasisCache | None = None) -> JsonObject:
    """Everything the insight page shows: totals, per-day series, groups of unknown failures.

    The groups are a replay's groups (``web.groups``); ``bases`` keeps each
    failure's basis between refreshes.
    """
    groups = unknown_groups(store, bases if bases is not None else BasisCache())
    return {"stats": meow(SqlReads(store)), "days": queries.series(store), "groups": groups}
