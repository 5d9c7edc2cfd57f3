"""In-memory implementations of the ports: real behaviour, no servers.

Used by unit tests and by ``theow rules test`` (a dry run needs no Milvus,
no SQL). ``HashingEmbedder`` is a bag-of-words stand-in for MiniLM where the
model's meaning is not what a test is about.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from theow_client.jsontypes import JsonObject
from theow_client.verdict import Status, Verdict
from theow_workers.core.ports import (
    CLIENT_PENDING,
    AttemptRecord,
    Embedder,
    FailureRecord,
    Hit,
    IndexEntry,
    RuleStats,
    SyncReport,
    counted,
    settled_status,
    wait_for_owner,
    with_outputs,
)

T = TypeVar("T")

_WORD = re.compile(r"[a-z0-9_]+")


class HashingEmbedder:
    """Token hashing into a fixed number of dimensions, L2-normalized."""

    model_name = "hashing-bow"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            vector = [0.0] * self.dim
            # A text without a word still gets a unit vector, as MiniLM gives it one.
            for word in _WORD.findall(text.lower()) or [text]:
                slot = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
                vector[slot % self.dim] += 1.0
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            vectors.append([v / norm for v in vector])
        return vectors


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a)) or 1.0
    nb = math.sqrt(sum(y * y for y in b)) or 1.0
    return dot / (na * nb)


class InMemoryIndex:
    def __init__(self) -> None:
        self._entries: dict[str, tuple[IndexEntry, list[float]]] = {}

    def sync(self, entries: Sequence[IndexEntry], embedder: Embedder) -> SyncReport:
        wanted = {e.id: e for e in entries}
        changed = [
            e
            for e in entries
            if e.id not in self._entries or self._entries[e.id][0].content_hash != e.content_hash
        ]
        added = sum(1 for e in changed if e.id not in self._entries)
        vectors = embedder.embed([e.text for e in changed]) if changed else []
        for entry, vector in zip(changed, vectors, strict=True):
            self._entries[entry.id] = (entry, vector)
        removed = [i for i in self._entries if i not in wanted]
        for i in removed:
            del self._entries[i]
        return SyncReport(
            added=added,
            updated=len(changed) - added,
            removed=len(removed),
            unchanged=len(entries) - len(changed),
        )

    def search(
        self,
        vector: Sequence[float],
        *,
        kind: str = "rule",
        limit: int = 10,
        facts: dict[str, str] | None = None,
        names: Sequence[str] | None = None,
    ) -> list[Hit]:
        allowed = set(names) if names is not None else None
        if names is not None:
            limit = max(limit, len(names))  # every named entry is scored, as in Milvus
        hits = []
        for entry, stored in self._entries.values():
            if entry.kind != kind or (allowed is not None and entry.name not in allowed):
                continue
            # Excluded only by a fact it pins to another value; one it pins that the
            # failure lacks does not exclude it.
            if any(k in entry.equals and entry.equals[k] != v for k, v in (facts or {}).items()):
                continue
            hits.append(Hit(entry.name, cosine(vector, stored)))
        hits.sort(key=lambda h: h.similarity, reverse=True)
        return hits[:limit]

    def vectors(self, names: Sequence[str], *, kind: str = "rule") -> dict[str, list[float]]:
        wanted = set(names)
        return {
            entry.name: list(stored)
            for entry, stored in self._entries.values()
            if entry.kind == kind and entry.name in wanted
        }


class InMemoryStore:
    """The Store port in a dict, atomic under one lock like the SQL store's transactions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures: dict[str, FailureRecord] = {}
        self.attempts: list[AttemptRecord] = []
        self.verdicts: dict[str, Verdict] = {}
        self.stats: dict[str, RuleStats] = {}

    def record_failure(self, failure: FailureRecord) -> Verdict | None:
        with self._lock:
            self.failures.setdefault(failure.id, failure)
            return self.verdicts.get(failure.id)

    def record_outcome(self, verdict: Verdict, attempts: Sequence[AttemptRecord] = ()) -> Verdict:
        with self._lock:
            self.attempts.extend(attempts)
            for rule, success in counted(attempts):
                self._bump(rule, success)
            return self.verdicts.setdefault(verdict.failure_id, verdict)

    def verdict(self, failure_id: str) -> Verdict | None:
        return self.verdicts.get(failure_id)

    def rule_stats(self) -> dict[str, RuleStats]:
        return dict(self.stats)

    # One step at a time, as the SQL store offers them

    def add_failure(self, failure: FailureRecord) -> bool:
        with self._lock:
            if failure.id in self.failures:
                return False
            self.failures[failure.id] = failure
            return True

    def add_attempt(self, attempt: AttemptRecord) -> None:
        with self._lock:
            self.attempts.append(attempt)

    def add_verdict(self, verdict: Verdict) -> Verdict:
        return self.record_outcome(verdict)

    def count_attempt(self, rule: str, success: bool) -> None:
        with self._lock:
            self._bump(rule, success)

    def settle_client_attempt(
        self, failure_id: str, rule: str, worked: bool, error: str, outputs: list[JsonObject]
    ) -> bool:
        """What the build agent reported for a ``client_pending`` attempt, as the SQL store does."""
        with self._lock:
            pending = [
                n
                for n, a in enumerate(self.attempts)
                if (a.failure_id, a.rule, a.outcome) == (failure_id, rule, CLIENT_PENDING)
            ]
            if not pending:
                return False
            n = pending[-1]
            self.attempts[n] = replace(
                self.attempts[n],
                outcome="success" if worked else "error",
                error=error,
                params=with_outputs(self.attempts[n].params, outputs),
            )
            verdict = self.verdicts.get(failure_id)
            if verdict is not None and verdict.rule == rule and verdict.status == Status.SUGGESTED:
                status, reason = settled_status(worked, error)
                self.verdicts[failure_id] = replace(
                    verdict, status=status, reason=reason or verdict.reason
                )
            self._bump(rule, worked)
            return True

    def _bump(self, rule: str, success: bool) -> None:
        old = self.stats.get(rule, RuleStats())
        self.stats[rule] = RuleStats(old.successes + int(success), old.failures + int(not success))


class InMemoryExploreState:
    """Single-flight, finished explorations, session budgets and the session cache, in one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.flights: dict[str, str] = {}
        self.done: dict[str, JsonObject] = {}
        self.sessions: dict[str, int] = {}
        self.cache: dict[str, JsonObject] = {}

    def take_flight(self, fingerprint: str, failure_id: str, ttl: int) -> str | None:
        with self._lock:
            owner = self.flights.setdefault(fingerprint, failure_id)
            return None if owner == failure_id else owner

    def land(self, fingerprint: str) -> None:
        with self._lock:
            self.flights.pop(fingerprint, None)

    def finish(self, fingerprint: str, record: JsonObject) -> None:
        self.done[fingerprint] = record

    def finished(self, fingerprint: str) -> JsonObject | None:
        return self.done.get(fingerprint)

    def take_session(self, session_id: str, limit: int, ttl: int) -> int:
        with self._lock:
            used = self.sessions.get(session_id, 0)
            if used >= limit:
                return -1
            self.sessions[session_id] = used + 1
            return used + 1

    def remember(self, proposal_id: str, vector: list[float], rule_yaml: str) -> None:
        self.cache[proposal_id] = {
            "vector": vector,
            "rule_yaml": rule_yaml,
            "proposal_id": proposal_id,
        }

    def cached(self) -> list[JsonObject]:
        return list(self.cache.values())


class InMemoryDeliveries:
    """Claims and delivery counts for the workers (threads) of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owners: dict[str, str] = {}  # key -> the token of the claim holding it
        self.counts: dict[str, int] = {}

    def claim(self, key: str) -> InMemoryClaim:
        return InMemoryClaim(self, key)

    def count(self, key: str) -> int:
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            return self.counts[key]

    def uncount(self, key: str) -> None:
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) - 1


class InMemoryClaim:
    def __init__(self, deliveries: InMemoryDeliveries, key: str) -> None:
        self.deliveries, self.key = deliveries, key
        self.token = uuid.uuid4().hex
        self.held = False

    def try_take(self) -> bool:
        with self.deliveries._lock:
            self.held = self.deliveries.owners.setdefault(self.key, self.token) == self.token
            return self.held

    def wait(self, outcome: Callable[[], T | None], timeout: float) -> T | None:
        return wait_for_owner(self.key, self.try_take, outcome, timeout)

    def release(self) -> None:
        with self.deliveries._lock:
            if self.deliveries.owners.get(self.key) == self.token:
                del self.deliveries.owners[self.key]
            self.held = False

    def __enter__(self) -> InMemoryClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
