"""What ``theow failures show`` says of a failure that has no verdict yet, or is not recorded yet.

A worker records a failure when it takes it off the resolve queue; until
then the store does not know it, and ``theow-client`` may already have
printed its id (``its verdict later: theow failures show ID``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from theow_client.jsontypes import JsonObject

if TYPE_CHECKING:
    from theow_workers.config import Settings


def pending(settings: Settings, info: JsonObject) -> str:
    """What is true of a failure with no verdict: resolving, waiting for a worker, or an example."""
    import redis

    from theow_workers.heartbeat import held

    if info["source"] == "taught":
        return "none: an example `theow teach --from` filed; it is not resolved"
    received = datetime.fromisoformat(str(info["received_at"]))
    if received.tzinfo is None:  # SQLite keeps no zone: stored in UTC
        received = received.replace(tzinfo=UTC)
    age = _ago((datetime.now(UTC) - received).total_seconds())
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=2)
    try:
        return held(client, str(info["id"])).why(age)
    except redis.RedisError as exc:
        return (
            f"pending: received {age}; whether a worker holds it is unknown ({type(exc).__name__})"
        )
    finally:
        client.close()


def _ago(seconds: float) -> str:
    """``3 s ago``, ``4 min ago``, ``2 h ago``, ``3 d ago``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def not_recorded(settings: Settings, given: str) -> str:
    """Why no failure ``given`` is stored: still queued, with or without a worker to take it."""
    import redis

    from theow_client import names
    from theow_workers.heartbeat import consumers

    unknown = f"no failure {given!r} (see `theow failures list`)"
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=2)
    try:
        waiting = int(client.llen(names.QUEUE_RESOLVE))
        workers = consumers(client, names.QUEUE_RESOLVE)
    except redis.RedisError:
        return unknown
    finally:
        client.close()
    if not waiting:
        return unknown
    queued = f"no failure {given!r} recorded yet; {waiting} failure(s) wait in the resolve queue"
    if not workers:
        return (
            f"{queued} and no resolver worker is running to take them "
            "(`theow up`, or `theow worker` on your fleet; `theow doctor` checks)"
        )
    return f"{queued} for {', '.join(workers)}: a worker records a failure as it takes it"
