"""In-memory twins of the ports (``core.ports``): real behaviour, no servers.

Every in-memory implementation is here: embedder, rule index, store, explorer
state, deliveries and claims, the model-call limits, each job's normal and the
explanation cache. Used by unit tests, by ``theow rules test`` (a dry run needs
no Milvus, no SQL) and by direct use (``theow explore`` in a terminal). ``HashingEmbedder`` is a bag-of-words stand-in for MiniLM where the
model's meaning is not what a test is about.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TypeVar

from theow_client.jsontypes import JsonObject
from theow_client.verdict import Status, Verdict
from theow_workers.core.llm.model import BudgetReached, QuotaExhausted
from theow_workers.core.logs.normal import JobNormal, mine
from theow_workers.core.ports import (
    CLIENT_PENDING,
    AttemptRecord,
    Embedder,
    Explanation,
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


# --- model-call limits: twins of adapters.redis_state's RedisLimiter and RedisSpend ---

WINDOW = 60.0


@dataclass
class _Model:
    sent: deque[list[float]] = field(default_factory=deque)  # [time, tokens] per request
    resume_at: float = 0.0  # per-minute back-off
    stopped_until: float = 0.0  # per-day quota
    stop_reason: str = ""


class InMemoryLimiter:
    """Requests/min and tokens/min per model; ``None`` means unlimited.

    It implements :class:`theow_workers.core.ports.RateLimiter` with a sliding
    one-minute window per model (requests and tokens), the back-off a 429 sets,
    and the stop a per-day quota sets. Workers share the Redis limiter; this one
    serves direct use (``theow explore`` in a terminal) and tests.

    >>> limiter = InMemoryLimiter(requests_per_minute=2)
    >>> limiter.acquire("gemini-2.5-flash", tokens=100, max_wait=0)
    >>> limiter.acquire("gemini-2.5-flash", tokens=100, max_wait=0)
    >>> limiter.acquire("gemini-2.5-flash", tokens=100, max_wait=0)
    Traceback (most recent call last):
    ...
    theow_workers.core.llm.model.QuotaExhausted: gemini-2.5-flash: requests per minute: would wait 60.0s, more than 0.0s

    Warning: a request larger than ``tokens_per_minute`` is let through alone
    once the window is empty, rather than refused forever.
    """

    def __init__(
        self,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._models: dict[str, _Model] = {}

    def acquire(self, model: str, tokens: int, max_wait: float) -> None:
        deadline = self._clock() + max_wait
        while True:
            with self._lock:
                now = self._clock()
                state = self._state(model, now)
                if state.stopped_until > now:
                    raise QuotaExhausted(
                        model, state.stop_reason, state.stopped_until - now, daily=True
                    )
                wait, why = self._wait(state, tokens, now)
                if wait <= 0:
                    state.sent.append([now, float(tokens)])
                    return
                if now + wait > deadline:
                    raise QuotaExhausted(
                        model,
                        f"{why}: would wait {wait:.1f}s, more than {max(deadline - now, 0):.1f}s",
                        wait,
                        daily=False,
                    )
            self._sleep(wait)

    def settle(self, model: str, estimated: int, actual: int) -> None:
        with self._lock:
            state = self._models.get(model)
            if state is None:
                return
            for entry in reversed(state.sent):
                if entry[1] == estimated:
                    entry[1] = float(actual)
                    return

    def back_off(self, model: str, seconds: float, daily: bool, reason: str) -> None:
        with self._lock:
            now = self._clock()
            state = self._state(model, now)
            if daily:
                state.stopped_until = max(state.stopped_until, now + seconds)
                state.stop_reason = reason
            else:
                state.resume_at = max(state.resume_at, now + seconds)

    def _state(self, model: str, now: float) -> _Model:
        state = self._models.setdefault(model, _Model())
        while state.sent and state.sent[0][0] <= now - WINDOW:
            state.sent.popleft()
        return state

    def _wait(self, state: _Model, tokens: int, now: float) -> tuple[float, str]:
        """Seconds until a request of ``tokens`` fits, and which limit holds it."""
        waits = [(state.resume_at - now, "backing off after a 429")]
        rpm = self.requests_per_minute
        if rpm is not None and len(state.sent) >= rpm:
            oldest = state.sent[len(state.sent) - rpm][0]
            waits.append((oldest + WINDOW - now, "requests per minute"))
        tpm = self.tokens_per_minute
        if tpm is not None and state.sent:
            used = sum(entry[1] for entry in state.sent)
            excess = used + tokens - tpm
            if excess > 0:
                # The window frees tokens as its oldest requests age out.
                freed, until = 0.0, now
                for at, spent in state.sent:
                    freed, until = freed + spent, at + WINDOW
                    if freed >= excess:
                        break
                waits.append((until - now, "tokens per minute"))
        wait, why = max(waits)
        return wait, why


MICRO = 1_000_000  # spend is counted in micro-dollars: whole numbers add up exactly
DAY_SECONDS = 24 * 3600


def micro(dollars: float) -> int:
    """Whole micro-dollars, rounded up: a reservation never falls short of its cost."""
    return max(0, math.ceil(round(dollars * MICRO, 6)))


def day_and_rest(now: float) -> tuple[str, float]:
    """The UTC day of ``now`` (epoch seconds) and the seconds left in it.

    >>> day_and_rest(86_400 * 3 + 3600)
    ('1970-01-04', 82800.0)
    """
    day = datetime.fromtimestamp(now, UTC)
    return day.strftime("%Y-%m-%d"), float(DAY_SECONDS - (now % DAY_SECONDS))


def budget_reason(cap: float, spent: int, until: float) -> str:
    """Why a call was not sent, and until when (epoch seconds)."""
    at = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"the daily LLM budget of ${cap:g} is reached (${spent / MICRO:.4f} spent or reserved"
        f" today); no model call is sent until {at} (THEOW_LLM_DAILY_BUDGET)"
    )


class InMemorySpend:
    """The daily spend cap for one process: the stub of ``adapters.redis_state.RedisSpend``.

    >>> spend = InMemorySpend(0.01, clock=lambda: 0.0)
    >>> ticket = spend.reserve(0.008)
    >>> spend.settle(ticket, 0.002)
    >>> spend.reserve(0.009)
    Traceback (most recent call last):
    ...
    theow_workers.core.llm.model.BudgetReached: budget: the daily LLM budget of $0.01 is reached ($0.0020 spent or reserved today); no model call is sent until 1970-01-02 00:00 UTC (THEOW_LLM_DAILY_BUDGET)
    """

    def __init__(self, cap: float, *, clock: Callable[[], float] = time.time) -> None:
        self.cap = cap
        self._clock = clock
        self._lock = threading.Lock()
        self._spent: dict[str, int] = {}

    def reserve(self, dollars: float) -> str:
        day, rest = day_and_rest(self._clock())
        amount = micro(dollars)
        with self._lock:
            spent = self._spent.get(day, 0)
            if spent + amount > micro(self.cap):
                until = self._clock() + rest
                raise BudgetReached(budget_reason(self.cap, spent, until), rest)
            self._spent[day] = spent + amount
        return f"{day}:{amount}"

    def settle(self, ticket: str, dollars: float) -> None:
        day, _, reserved = ticket.partition(":")
        with self._lock:
            self._spent[day] = self._spent.get(day, 0) + micro(dollars) - int(reserved)

    def spent(self) -> float:
        day, _ = day_and_rest(self._clock())
        with self._lock:
            return self._spent.get(day, 0) / MICRO


# --- each job's normal: the twin of adapters.normals.RedisNormals ---------------------


class MemoryNormals:
    """Each job's normal in memory: the twin of ``RedisNormals`` (tests, ``theow rules eval``)."""

    def __init__(self) -> None:
        self._templates: dict[str, list[str]] = {}

    def templates(self, job: str) -> list[str]:
        return list(self._templates.get(job, ()))

    def learn(self, job: str, lines: Iterable[str], now: float | None = None) -> int:
        self._templates[job] = mine(lines, self._templates.get(job, ()))
        return len(self._templates[job])

    def normal(self, job: str) -> JobNormal | None:
        templates = self._templates.get(job)
        return JobNormal.from_templates(templates, job) if templates else None


# --- explanations per cause: the twin of adapters.explanations' Redis cache ---------


@contextlib.contextmanager
def held_flight() -> Iterator[bool]:
    """A single-flight that is always free: the in-memory cache's (one process)."""
    yield True


class InMemoryExplanations:
    """The cache's in-memory twin (one process, for tests and direct use)."""

    def __init__(self) -> None:
        self.known: dict[str, Explanation] = {}

    def get(self, cause: str) -> Explanation | None:
        return self.known.get(cause)

    def put(self, cause: str, explanation: Explanation) -> None:
        self.known[cause] = explanation

    def flight(self, cause: str, wait: float) -> contextlib.AbstractContextManager[bool]:
        return held_flight()
