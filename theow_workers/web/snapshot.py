"""Aggregates over every stored row, recomputed in the background and served from memory.

The insight page's totals and plots and the catalogue's per-rule hits are
``GROUP BY`` queries over all verdicts, attempts and explorations: about
half a second with 100,000 failures in SQLite. Pages show the last result
with its time ("as of 14:02:11") and a refresh starts when it is older than
``ttl``: pages stay fast, numbers are at most a minute or so behind. Only the
first request after start waits for the computation.

>>> calls = []
>>> snap = Snapshot(lambda: calls.append(1) or len(calls), ttl=60)
>>> snap.get().value, snap.get().value
(1, 1)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

T = TypeVar("T")
TTL = 60.0


@dataclass(frozen=True)
class Taken(Generic[T]):
    value: T
    at: datetime  # when it was computed


class Snapshot(Generic[T]):
    def __init__(self, compute: Callable[[], T], ttl: float = TTL) -> None:
        self.compute = compute
        self.ttl = ttl
        self._taken: Taken[T] | None = None
        self._stamp = 0.0
        self._lock = threading.Lock()
        self._refreshing = False

    def get(self) -> Taken[T]:
        with self._lock:
            taken, fresh = self._taken, time.monotonic() - self._stamp < self.ttl
            start = taken is not None and not fresh and not self._refreshing
            if start:
                self._refreshing = True
        if taken is None:
            return self._refresh()
        if start:
            threading.Thread(target=self._refresh, name="theow-web-snapshot", daemon=True).start()
        return taken

    def invalidate(self) -> None:
        """Next ``get`` starts a refresh (after an approval, say)."""
        with self._lock:
            self._stamp = 0.0

    def _refresh(self) -> Taken[T]:
        try:
            taken = Taken(self.compute(), datetime.now(UTC))
            with self._lock:
                self._taken, self._stamp = taken, time.monotonic()
            return taken
        finally:
            with self._lock:
                self._refreshing = False
