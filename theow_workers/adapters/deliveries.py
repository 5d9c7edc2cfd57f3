"""Deliveries through Redis: one claim per key fleet-wide, delivery counts that outlive workers.

Keys (``theow_client.names``): ``key_resolving(key)`` holds the token of the
claim that owns ``key``, with a short TTL kept fresh while it is held;
``key_deliveries(key)`` counts the deliveries of ``key`` for a day.

>>> deliveries = RedisDeliveries(redis)  # doctest: +SKIP
>>> with deliveries.claim(failure_id) as claim:  # doctest: +SKIP
...     decided = claim.wait(lambda: store.verdict(failure_id), timeout=60)
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from theow_client import names
from theow_workers.core.ports import wait_for_owner

if TYPE_CHECKING:
    from redis import Redis

T = TypeVar("T")

log = logging.getLogger("theow.deliveries")

# Only the claim's owner may extend or end it: check the token and act in one step,
# so a claim that expired and was taken by another worker is never touched.
_EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""

DELIVERY_TTL = 24 * 3600


class RedisDeliveries:
    def __init__(
        self, redis: Redis, claim_ttl: float = 15.0, count_ttl: int = DELIVERY_TTL
    ) -> None:
        self.redis = redis
        self.claim_ttl = claim_ttl
        self.count_ttl = count_ttl

    def claim(self, key: str) -> RedisClaim:
        return RedisClaim(self.redis, key, self.claim_ttl)

    def count(self, key: str) -> int:
        counted = names.key_deliveries(key)
        pipe = self.redis.pipeline()
        pipe.incr(counted)
        pipe.expire(counted, self.count_ttl)
        count, _ = pipe.execute()
        return int(count)

    def uncount(self, key: str) -> None:
        self.redis.decr(names.key_deliveries(key))


class RedisClaim:
    """One worker at a time holds a key.

    The claim lives ``ttl`` seconds and is refreshed by a background thread
    while held, so a worker killed mid-task loses it within ``ttl`` and the
    redelivered message can take over.
    """

    def __init__(self, redis: Redis, key: str, ttl: float = 15.0) -> None:
        self.redis = redis
        self.name = key
        self.key = names.key_resolving(key)
        self.ttl_ms = int(ttl * 1000)
        self.token = uuid.uuid4().hex
        self.held = False
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None

    def try_take(self) -> bool:
        self.held = bool(self.redis.set(self.key, self.token, nx=True, px=self.ttl_ms))
        if self.held and self._refresher is None:
            self._refresher = threading.Thread(target=self._refresh, daemon=True)
            self._refresher.start()
        return self.held

    def wait(self, outcome: Callable[[], T | None], timeout: float) -> T | None:
        return wait_for_owner(self.name, self.try_take, outcome, timeout)

    def _refresh(self) -> None:
        extend = self.redis.register_script(_EXTEND)
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                if not extend(keys=[self.key], args=[self.token, self.ttl_ms]):
                    log.warning("claim on %s expired and was lost while held", self.name)
                    return
            except Exception as exc:  # the broker may come back before the claim expires
                log.warning("could not extend the claim on %s: %s", self.name, exc)

    def release(self) -> None:
        self._stop.set()
        if self.held:
            self.redis.register_script(_RELEASE)(keys=[self.key], args=[self.token])
            self.held = False

    def __enter__(self) -> RedisClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
