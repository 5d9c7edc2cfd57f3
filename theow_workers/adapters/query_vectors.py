"""A failure's query vector, shared by a fleet's workers through Redis.

Ranking rules that tie on specificity and evidence position needs the failure
embedded (MiniLM, 10-20 ms of CPU). A fleet sends the same failure many times,
from many jobs to many worker processes, so the vector is kept by the hash of
its text, the failure's error text with its volatile parts normalized
(``core.resolve.fingerprint.similarity_text``): in this process (float32, least recently
used first out) and in Redis for ``ttl`` seconds (``theow:vector:<model>:<hash>``).
A repeat then costs no model call on any worker, even one started since.

Redis is a cache here: an error reading or writing it is a miss, the vector
is computed and the resolve goes on.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from theow_client import names
from theow_workers.core.ports import Embedder

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger("theow.vectors")

TTL = 7 * 24 * 3600
CACHE_SIZE = 8192  # vectors a process keeps: 1.5 KB each


class QueryVectors:
    def __init__(
        self, redis: Redis, embedder: Embedder, ttl: int = TTL, size: int = CACHE_SIZE
    ) -> None:
        self.redis, self.embedder, self.ttl, self.size = redis, embedder, ttl, size
        self._local: OrderedDict[str, array[float]] = OrderedDict()
        self._lock = threading.Lock()
        # What each lookup cost, for metrics and benchmarks.
        self.hits_local = self.hits_shared = self.embedded = 0

    def key(self, text: str) -> str:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return names.key_query_vector(self.embedder.model_name, digest)

    def vector(self, text: str) -> array[float]:
        """The text's unit vector: from this process, else Redis, else the model."""
        key = self.key(text)
        with self._lock:
            kept = self._local.get(key)
            if kept is not None:
                self._local.move_to_end(key)
                self.hits_local += 1
                return kept
        vector = self._shared(key)
        if vector is not None:
            self.hits_shared += 1
        else:
            vector = array("f", self.embedder.embed([text])[0])
            self.embedded += 1
            self._share(key, vector)
        with self._lock:
            self._local[key] = vector
            while len(self._local) > self.size:
                self._local.popitem(last=False)
        return vector

    def _shared(self, key: str) -> array[float] | None:
        try:
            data = self.redis.get(key)
        except Exception as exc:  # a cache: Redis down is a miss, not a failed resolve
            log.warning("query vector cache unavailable: %s", exc)
            return None
        if not isinstance(data, bytes) or len(data) != 4 * self.embedder.dim:
            return None
        return array("f", data)

    def _share(self, key: str, vector: Sequence[float]) -> None:
        try:
            self.redis.set(key, array("f", vector).tobytes(), ex=self.ttl)
        except Exception as exc:
            log.warning("query vector not shared: %s", exc)
