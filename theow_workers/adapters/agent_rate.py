"""How many runs an agent may report a minute, for every worker at once: a token bucket per
agent in Redis (``token_bucket.lua``).

The web intake bounds what an agent sends it with in-memory buckets
(``web.rate.TokenBuckets``: one process); a ``theow.run`` message reaches
whichever worker takes it, so its bucket is in Redis, with the same arithmetic
and the same answer: ``take(name)`` is 0.0 when allowed, else the seconds to
wait (and nothing is taken).

>>> runs = RedisBuckets(redis, per_minute=600, burst=100)  # doctest: +SKIP
>>> runs.take("ci-acme")                                   # doctest: +SKIP
0.0
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from theow_client import names
from theow_workers.adapters.redis_state import _script

if TYPE_CHECKING:
    from redis import Redis

RUN_BURST = 100  # runs an agent may report at once: a matrix of jobs finishing together


def run_burst(per_minute: int) -> int:
    """The burst of ``THEOW_RUNS_PER_MINUTE``: ``RUN_BURST``, or the rate when it is lower."""
    return max(1, min(RUN_BURST, per_minute))


def over_rate(agent: str, per_minute: int, wait: float) -> str:
    """Why an agent's run was refused, in one line.

    >>> over_rate("ci-acme", 600, 0.2)
    "agent 'ci-acme' reported more than 600 runs a minute (THEOW_RUNS_PER_MINUTE); this run is not recorded, the next is taken in 1 s"
    """
    return (
        f"agent {agent!r} reported more than {per_minute} runs a minute "
        f"(THEOW_RUNS_PER_MINUTE); this run is not recorded, the next is taken in "
        f"{max(1, math.ceil(wait))} s"
    )[:500]


class RedisBuckets:
    """``per_minute`` calls a minute per name, ``burst`` at once (``names.key_run_rate``)."""

    def __init__(self, redis: Redis, per_minute: float, burst: int) -> None:
        self.rate = max(per_minute, 1e-9) / 60_000.0  # tokens a millisecond
        self.burst = max(1, burst)
        # Kept until the bucket would be full again: an idle agent leaves no key behind.
        self.ttl_ms = min(2**31, math.ceil(self.burst / self.rate) + 1000)
        self._take = _script(redis, "token_bucket.lua")

    def take(self, name: str) -> float:
        """Take one call from ``name``'s bucket: 0.0 when allowed, else seconds to wait."""
        wait_ms = self._take(
            keys=[names.key_run_rate(name)], args=[self.rate, self.burst, self.ttl_ms]
        )
        return int(wait_ms) / 1000.0
