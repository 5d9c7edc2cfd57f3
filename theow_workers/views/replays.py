"""The replay screens: the console's replay list and ``GET /api/v1/replays``."""

from __future__ import annotations

from theow_client.jsontypes import JsonObject
from theow_workers.views.ports import Reads, ReplayJob

SHOWN = 50  # the replay jobs a list shows


def replay_list(reads: Reads, limit: int = SHOWN) -> list[ReplayJob]:
    """The newest replay jobs, newest first (the console's ``/replays``)."""
    return reads.replays.recent(limit)


def api_replays(reads: Reads, limit: int = SHOWN) -> JsonObject:
    """``GET /api/v1/replays``: the newest jobs as JSON, newest first."""
    return {"replays": [j.to_dict() for j in reads.replays.recent(limit)]}
