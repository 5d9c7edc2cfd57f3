"""Each job's normal, kept in Redis: templates mined from its recent passing runs.

One sorted set per job (``theow:normal:<job>``, named in
``theow_client.names``): template → when it was last seen. Learning a passing
run merges its lines into the job's templates (``core.logs.normal.mine``), stamps
them with the time, drops templates not seen within ``ttl`` and keeps the
``MAX_TEMPLATES`` most recently seen; the key expires ``ttl`` after the job's
last learned run. So the normal follows the last few passing runs and stays
bounded per job, however many jobs there are. Two workers learning runs of
one job at once each add their templates (one may miss the other's merge
into a wildcard): a normal that is a little too literal, never one too broad.

Reading a job's normal is one ``ZRANGE`` of that job's key, cached in the
process for ``cache_seconds``: resolve latency does not depend on how many
jobs are known.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from theow_client import names
from theow_workers.core.logs.normal import MAX_TEMPLATES, JobNormal, mine_run

CACHE_JOBS = 1024  # jobs whose normal a process keeps in memory


class RedisNormals:
    def __init__(self, redis: Any, ttl: int, cache_seconds: float = 30.0) -> None:
        self.redis, self.ttl, self.cache_seconds = redis, ttl, cache_seconds
        self._cache: OrderedDict[str, tuple[float, JobNormal | None]] = OrderedDict()
        self._lock = threading.Lock()

    def templates(self, job: str) -> list[str]:
        raw = self.redis.zrange(names.key_normal(job), 0, -1)  # least recently seen first
        return [t.decode() if isinstance(t, bytes) else str(t) for t in raw]

    def learn(self, job: str, lines: Iterable[str], now: float | None = None) -> int:
        """Merge a passing run's lines into the job's normal; the number of templates kept."""
        now = time.time() if now is None else now
        key = names.key_normal(job)
        known = {
            (t.decode() if isinstance(t, bytes) else str(t)): float(score)
            for t, score in self.redis.zrange(key, 0, -1, withscores=True)
        }
        templates, seen = mine_run(lines, known)
        # What this run printed is stamped now; the rest keeps its age and
        # expires ``ttl`` after the job last printed it.
        scores = {t: now if t in seen else known.get(t, now) for t in templates}
        pipe = self.redis.pipeline()
        pipe.delete(key)  # templates merged into a wildcard are gone from the miner too
        if scores:
            pipe.zadd(key, scores)
        pipe.zremrangebyscore(key, "-inf", now - self.ttl)
        pipe.zremrangebyrank(key, 0, -MAX_TEMPLATES - 1)
        pipe.expire(key, self.ttl)
        pipe.incr(names.key_normal_runs(job))
        pipe.expire(names.key_normal_runs(job), self.ttl)
        pipe.zcard(key)
        return int(pipe.execute()[-1])

    def sample(self, job: str, seconds: int) -> bool:
        """Whether this passing run of ``job`` is the one learned this ``seconds``-long interval.

        The worker's ``SET NX EX`` (``names.key_passing_sample``): agents may
        only ask whether their own job was sampled, never take or hold a sample.
        """
        key = names.key_passing_sample(job)
        return bool(self.redis.set(key, "1", nx=True, ex=max(1, int(seconds))))

    def runs(self, job: str) -> int:
        """Passing runs of the job learned within the TTL."""
        return int(self.redis.get(names.key_normal_runs(job)) or 0)

    def normal(self, job: str) -> JobNormal | None:
        """The job's normal, or None when no passing run of it was learned."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(job)
            if cached is not None and now - cached[0] < self.cache_seconds:
                self._cache.move_to_end(job)
                return cached[1]
        templates = self.templates(job)
        normal = JobNormal.from_templates(templates, job) if templates else None
        with self._lock:
            self._cache[job] = (now, normal)
            self._cache.move_to_end(job)
            while len(self._cache) > CACHE_JOBS:
                self._cache.popitem(last=False)
        return normal
