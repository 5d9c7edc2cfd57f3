"""In-memory twins of the shared Redis limits: the rate limiter and the daily spend cap.

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

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from theow_workers.core.llm.model import BudgetReached, QuotaExhausted

WINDOW = 60.0


@dataclass
class _Model:
    sent: deque[list[float]] = field(default_factory=deque)  # [time, tokens] per request
    resume_at: float = 0.0  # per-minute back-off
    stopped_until: float = 0.0  # per-day quota
    stop_reason: str = ""


class InMemoryLimiter:
    """Requests/min and tokens/min per model; ``None`` means unlimited."""

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
