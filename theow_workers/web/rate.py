"""How often one token may call the JSON API: a token bucket per token name.

Each token gets ``per_minute`` requests a minute, refilled continuously, with
bursts up to ``burst``; a request over it is answered 429 with
``Retry-After`` (``api.py``). The API's read routes and the agents' intake
count in separate buckets, so a dashboard polling hard never slows a build's
submission. Kept in the web process's memory like its sessions and login
throttle (``throttle.py``): the console is one process.

>>> t = [0.0]
>>> buckets = TokenBuckets(per_minute=60, burst=2, clock=lambda: t[0])
>>> buckets.take("ci-1"), buckets.take("ci-1"), buckets.take("ci-1")
(0.0, 0.0, 1.0)
>>> buckets.take("ci-2")  # another token, another bucket
0.0
>>> t[0] = 1.0; buckets.take("ci-1")
0.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

TOKENS_REMEMBERED = 10_000  # buckets kept; beyond it the least recently used is dropped


class TokenBuckets:
    def __init__(
        self, per_minute: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = max(per_minute, 1e-9) / 60.0
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, name: str) -> float:
        """Take one request from ``name``'s bucket: 0.0 when allowed, else seconds to wait."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.pop(name, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._buckets[name] = (tokens, now)  # re-inserted: the dict stays oldest-first
            while len(self._buckets) > TOKENS_REMEMBERED:
                del self._buckets[next(iter(self._buckets))]
            return wait
