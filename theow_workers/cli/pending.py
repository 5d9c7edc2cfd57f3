"""What ``theow failures show`` says of a failure that has no verdict yet: what is true of it."""

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
