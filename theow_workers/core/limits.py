"""An in-memory rate limiter for one process: the stub of the shared Redis one.

It implements :class:`theow_workers.core.llm.RateLimiter` with a sliding
one-minute window per model (requests and tokens), the back-off a 429 sets,
and the stop a per-day quota sets. Workers share the Redis limiter; this one
serves direct use (``theow explore`` in a terminal) and tests.

>>> limiter = InMemoryLimiter(requests_per_minute=2)
>>> limiter.acquire("gemini-2.5-flash", tokens=100, max_wait=0)
>>> limiter.acquire("gemini-2.5-flash", tokens=100, max_wait=0)
>>> limiter.acquire("gemini-2.5-flash", tokens=100, max_wait=0)
Traceback (most recent call last):
...
theow_workers.core.llm.QuotaExhausted: gemini-2.5-flash: requests per minute: would wait 60.0s, more than 0.0s

Warning: a request larger than ``tokens_per_minute`` is let through alone
once the window is empty, rather than refused forever.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from theow_workers.core.llm import QuotaExhausted

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
