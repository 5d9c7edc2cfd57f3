"""explain's cache per cause in Redis, shared by every worker, and its single-flight lock.

A cause's explanation is kept under ``names.key_explanation``: an answer the
model gave for ``EXPLAIN_TTL`` (a malformed one for a day, so a cause the model
could not answer is asked again tomorrow, not on every failure), a failed call
(a 429, a timeout, the budget) for ``retry_after`` seconds, so a burst of one
cause's failures does not ask again and again. While one worker asks the
model, it holds the cause's lock (``names.key_explain_flight``); a second
worker blocks on it and then reads the first's answer.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

from redis import Redis
from redis.exceptions import LockError

from theow_client import names
from theow_workers.core.ports import EXPLAINED, MALFORMED, Explanation

MALFORMED_TTL = 24 * 3600


class RedisExplanations:
    """The ExplanationCache port on Redis.

    >>> cache = RedisExplanations(redis, hold=120, retry_after=300)  # doctest: +SKIP
    >>> with cache.flight(cause, wait=30) as held:                    # doctest: +SKIP
    ...     ...

    ``hold``: seconds the lock outlives a worker killed while holding it.
    """

    def __init__(self, redis: Redis, hold: float, retry_after: float = 300.0) -> None:
        self.redis = redis
        self.hold = hold
        self.retry_after = retry_after

    def get(self, cause: str) -> Explanation | None:
        raw = self.redis.get(names.key_explanation(cause))
        if raw is None:
            return None
        try:
            return Explanation.from_dict(json.loads(raw))
        except ValueError:
            return None

    def put(self, cause: str, explanation: Explanation) -> None:
        ttl = {EXPLAINED: names.EXPLAIN_TTL, MALFORMED: MALFORMED_TTL}.get(
            explanation.state, self.retry_after
        )
        text = json.dumps(explanation.to_dict())
        self.redis.set(names.key_explanation(cause), text, ex=max(1, int(ttl)))

    @contextlib.contextmanager
    def flight(self, cause: str, wait: float) -> Iterator[bool]:
        lock = self.redis.lock(
            names.key_explain_flight(cause), timeout=self.hold, blocking_timeout=max(wait, 0.01)
        )
        if not lock.acquire():
            yield False
            return
        try:
            yield True
        finally:
            with contextlib.suppress(LockError):  # expired while held: nothing to release
                lock.release()
