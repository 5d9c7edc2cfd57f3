"""Messages refused at the broker edge: set aside bounded, counted, and read back.

A refused message costs one log line, one counter increment and one entry in
``names.KEY_DEAD_LETTERS`` (capped at ``DEAD_LETTER_CAP``, expiring
``DEAD_LETTER_TTL`` after the last one), in one transaction. What is kept of
the message is its first ``DEAD_LETTER_HEAD`` characters with secrets masked:
enough for an operator to see what it was and who could have sent it, never
a way to store a sender's megabytes.

    $ theow dead-letters            # the newest first
    $ theow dead-letters --json
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from theow_client import names
from theow_client.jsontypes import JsonObject
from theow_workers.core.logs.redact import redact_text
from theow_workers.edge.envelope import Refusal

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger("theow.edge")


@dataclass(frozen=True)
class EdgeCounts:
    refused: dict[tuple[str, str], int]  # (task, reason) -> count, since the broker's start
    kept: int  # dead letters in the list now (at most the cap)

    @property
    def total(self) -> int:
        return sum(self.refused.values())


def head(raw: bytes) -> str:
    """What a dead letter keeps of the message: its start, as text, secrets masked."""
    text = raw[: names.DEAD_LETTER_HEAD * 4].decode("utf-8", errors="replace")
    return redact_text(text[: names.DEAD_LETTER_HEAD])


def set_aside(redis: Redis, queue: str, raw: bytes, refusal: Refusal) -> None:
    """Log, count and keep ``raw`` refused off ``queue``; never raises (the worker goes on)."""
    log.warning(
        "refused a message on queue %s (%d bytes, task %s): %s: %s; kept in %s",
        queue,
        len(raw),
        refusal.task,
        refusal.reason,
        refusal.detail,
        names.KEY_DEAD_LETTERS,
    )
    try:
        entry = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "queue": queue,
            "task": refusal.task,
            "reason": refusal.reason,
            "detail": refusal.detail,
            "size": len(raw),
            "head": head(raw),
        }
        with redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(names.KEY_REFUSED_AT_EDGE, f"{refusal.task} {refusal.reason}", 1)
            pipe.lpush(names.KEY_DEAD_LETTERS, json.dumps(entry))
            pipe.ltrim(names.KEY_DEAD_LETTERS, 0, names.DEAD_LETTER_CAP - 1)
            pipe.expire(names.KEY_DEAD_LETTERS, names.DEAD_LETTER_TTL)
            pipe.execute()
    except Exception as exc:  # the refusal stands; keeping it is best effort
        log.warning("could not keep the refused message from %s: %s", queue, exc)


def counts(redis: Redis) -> EdgeCounts:
    """How many messages were refused at the edge, by task and reason, and how many are kept."""
    refused: dict[tuple[str, str], int] = {}
    raw: dict[Any, Any] = redis.hgetall(names.KEY_REFUSED_AT_EDGE)
    for field, count in raw.items():
        task, _, reason = _text(field).partition(" ")
        refused[(task, reason)] = int(count)
    kept = int(redis.llen(names.KEY_DEAD_LETTERS))
    return EdgeCounts(refused, kept)


def newest(redis: Redis, limit: int = 50) -> list[JsonObject]:
    """The newest ``limit`` dead letters (at most the cap), newest first."""
    limit = max(0, min(limit, names.DEAD_LETTER_CAP))
    entries: list[Any] = redis.lrange(names.KEY_DEAD_LETTERS, 0, limit - 1)
    found: list[JsonObject] = []
    for raw in entries:
        try:
            entry = json.loads(raw)
        except ValueError:  # not written by a worker: shown as what it is
            entry = {"head": redact_text(_text(raw)[: names.DEAD_LETTER_HEAD])}
        if isinstance(entry, dict):
            found.append(entry)
    return found


def _text(value: object) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
