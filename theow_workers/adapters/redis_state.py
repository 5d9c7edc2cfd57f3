"""Explorer state shared by every worker through Redis.

* ``RedisLimiter``: the global requests/min and tokens/min limit per model
  (``ratelimit.lua``), the shared back-off after a 429, and the stop after a
  per-day 429.
* ``RedisExploreState``: single-flight per root cause, the record of finished
  explorations, the semantic session cache, and session budgets
  (``session_limit.lua``).
* ``RedisSpend``: the daily spend cap every model call reserves from (``spend.lua``).

Every key is named in ``theow_client.names``.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from theow_client import names
from theow_client.jsontypes import JsonObject
from theow_workers.adapters.memory import MICRO, budget_reason, day_and_rest, micro
from theow_workers.core.llm.model import BudgetReached, QuotaExhausted

if TYPE_CHECKING:
    from redis import Redis
    from redis.commands.core import Script

log = logging.getLogger("theow.limits")

HERE = Path(__file__).resolve().parent
WINDOW_MS = 60_000
DONE_TTL = 7 * 24 * 3600
CACHE_MAX = 2000


def _script(redis: Redis, name: str) -> Script:
    return redis.register_script((HERE / name).read_text())


def _text(value: bytes | str) -> str:
    """A value read from Redis as text (the clients here read bytes; typed as either)."""
    return value.decode() if isinstance(value, bytes) else value


class RedisLimiter:
    """Requests/min and tokens/min per model, for every worker at once.

    >>> limiter = RedisLimiter(redis, requests_per_minute=60, tokens_per_minute=1_000_000)  # doctest: +SKIP
    >>> limiter.acquire("gemini-2.5-flash", tokens=12_000, max_wait=120)                   # doctest: +SKIP

    Warning: tokens are reserved from an estimate before the request and
    corrected with ``settle`` after it; a window can briefly hold more tokens
    than the limit when estimates run low.
    """

    def __init__(self, redis: Redis, requests_per_minute: int, tokens_per_minute: int) -> None:
        self.redis = redis
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self._acquire = _script(redis, "ratelimit.lua")
        self._settle = _script(redis, "settle.lua")
        self._ids: dict[tuple[str, int], str] = {}

    def _keys(self, model: str) -> list[str]:
        return [names.key_llm(model, p) for p in ("requests", "tokens", "backoff", "stopped")]

    def acquire(self, model: str, tokens: int, max_wait: float) -> None:
        deadline = time.monotonic() + max_wait
        request_id = uuid.uuid4().hex
        while True:
            code, wait_ms = self._acquire(
                keys=self._keys(model), args=[self.rpm, self.tpm, tokens, request_id, WINDOW_MS]
            )
            if code == 0:
                self._ids[(model, tokens)] = request_id
                return
            if code == 2:
                reason = (
                    self.redis.get(names.key_llm(model, "stopped")) or b"per-day quota exhausted"
                )
                raise QuotaExhausted(model, _text(reason), int(wait_ms) / 1000, daily=True)
            wait = int(wait_ms) / 1000
            if time.monotonic() + wait > deadline:
                raise QuotaExhausted(
                    model,
                    f"rate limit: would wait {wait:.1f}s, more than {max_wait:g}s",
                    wait,
                    daily=False,
                )
            log.info("rate limit for %s: waiting %.2fs", model, wait)
            time.sleep(wait + random.uniform(0, 0.05))  # jitter: workers do not wake in lockstep

    def settle(self, model: str, estimated: int, actual: int) -> None:
        request_id = self._ids.pop((model, estimated), None)
        if request_id is None or actual == estimated:
            return
        self._settle(
            keys=[names.key_llm(model, "tokens")],
            args=[f"{request_id}:{estimated}", f"{request_id}:{actual}"],
        )

    def back_off(self, model: str, seconds: float, daily: bool, reason: str) -> None:
        ms = max(1, int(seconds * 1000))
        if daily:
            log.warning(
                "LLM %s: per-day quota exhausted; exploring stops for %.0fs: %s",
                model,
                seconds,
                reason,
            )
            self.redis.set(names.key_llm(model, "stopped"), reason[:500], px=ms)
            return
        log.info("LLM %s: 429, every worker backs off %.1fs", model, seconds)
        key = names.key_llm(model, "backoff")
        current = self.redis.pttl(key)
        if current is None or int(current) < ms:
            self.redis.set(key, reason[:500], px=ms)

    def stopped(self, model: str) -> str | None:
        value = self.redis.get(names.key_llm(model, "stopped"))
        return _text(value) if value else None


class RedisExploreState:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._session_limit = _script(redis, "session_limit.lua")

    def take_flight(self, fingerprint: str, failure_id: str, ttl: int) -> str | None:
        """Become the one explorer of this root cause; else return who is."""
        key = names.key_explore_flight(fingerprint)
        if self.redis.set(key, failure_id, nx=True, ex=ttl):
            return None
        owner = self.redis.get(key)
        return _text(owner) if owner else None

    def land(self, fingerprint: str) -> None:
        self.redis.delete(names.key_explore_flight(fingerprint))

    def finish(self, fingerprint: str, record: JsonObject) -> None:
        self.redis.set(names.key_explore_done(fingerprint), json.dumps(record), ex=DONE_TTL)

    def finished(self, fingerprint: str) -> JsonObject | None:
        value = self.redis.get(names.key_explore_done(fingerprint))
        return json.loads(value) if value else None

    def take_session(self, session_id: str, limit: int, ttl: int) -> int:
        """The session's number under ``session_id``, or -1 when the budget is used up."""
        return int(
            self._session_limit(keys=[names.key_session_budget(session_id)], args=[limit, ttl])
        )

    def remember(self, proposal_id: str, vector: list[float], rule_yaml: str) -> None:
        entry = json.dumps({"vector": vector, "rule_yaml": rule_yaml, "proposal_id": proposal_id})
        self.redis.hset(names.KEY_EXPLORE_CACHE, proposal_id, entry)
        if self.redis.hlen(names.KEY_EXPLORE_CACHE) > CACHE_MAX:
            oldest = self.redis.hkeys(names.KEY_EXPLORE_CACHE)[: CACHE_MAX // 10]
            self.redis.hdel(names.KEY_EXPLORE_CACHE, *oldest)

    def cached(self) -> list[JsonObject]:
        return [json.loads(v) for v in self.redis.hvals(names.KEY_EXPLORE_CACHE)]


class RedisSpend:
    """Dollars per UTC day for every model call of the fleet, explorer and explain together.

    >>> spend = RedisSpend(redis, cap=5.0)            # doctest: +SKIP
    >>> ticket = spend.reserve(0.02)                  # doctest: +SKIP
    >>> spend.settle(ticket, 0.0031)                  # doctest: +SKIP

    A reservation is atomic (``spend.lua``): however many workers reserve at
    once, what is reserved and spent never passes the cap. A call is settled
    at its real cost after it returns; one whose cost is unknown (a timeout)
    keeps its reservation.

    Warning: the day follows this machine's clock (UTC); workers whose clocks
    disagree by minutes start the next day minutes apart.
    """

    def __init__(self, redis: Redis, cap: float, clock: Callable[[], float] = time.time) -> None:
        self.redis = redis
        self.cap = cap
        self._clock = clock
        self._reserve = _script(redis, "spend.lua")

    def reserve(self, dollars: float) -> str:
        now = self._clock()
        day, rest = day_and_rest(now)
        amount = micro(dollars)
        cap = micro(self.cap)
        why = budget_reason(self.cap, cap, now + rest)
        code, spent = self._reserve(
            keys=[names.key_llm_spend(day), names.key_llm_budget_reached(day)],
            args=[cap, amount, int(rest) + 1, why],
        )
        if int(code) != 0:
            reason = budget_reason(self.cap, int(spent), now + rest)
            # The script set the marker; this names what was spent when it was refused.
            self.redis.set(names.key_llm_budget_reached(day), reason, ex=int(rest) + 1)
            log.warning("LLM call not sent: %s", reason)
            raise BudgetReached(reason, rest)
        return f"{day}:{amount}"

    def settle(self, ticket: str, dollars: float) -> None:
        day, _, reserved = ticket.partition(":")
        change = micro(dollars) - int(reserved)
        if change:
            self.redis.incrby(names.key_llm_spend(day), change)

    def status(self) -> tuple[float, str | None]:
        """Dollars spent or reserved today, and why calls stop (None while the budget holds)."""
        day, _ = day_and_rest(self._clock())
        spent = self.redis.get(names.key_llm_spend(day))
        reached = self.redis.get(names.key_llm_budget_reached(day))
        return int(spent or 0) / MICRO, _text(reached) if reached else None


def spend_cap(redis: Redis, cap: float) -> RedisSpend | None:
    """The fleet's daily cap (``llm_daily_budget`` dollars), or None when there is none (0)."""
    return RedisSpend(redis, cap) if cap > 0 else None
