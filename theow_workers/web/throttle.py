"""How fast the console's login may be guessed at: per client refused, overall slowed.

Measured before: 2,000 guesses in 11 s from one client. Now:

- **Per client** (an address; an IPv6 client is its /64, which one machine
  usually holds whole): the first ``FREE_FAILURES`` wrong passwords cost
  ``WRONG_PASSWORD_DELAY`` each. Each failure after them refuses that client
  for a delay that doubles (1 s, 2 s, 4 s … up to ``MAX_DELAY``); attempts in
  that time are answered 429 with ``Retry-After`` and no password is checked.
  A correct password clears the client's record; an hour without a failure
  forgets it. A guesser gets about four tries an hour once the delay is at
  its cap.
- **Overall**: never a lock-out, so that many addresses guessing at once
  cannot keep the reviewers out. When more than ``BUSY_FAILURES`` failures
  came in the last minute, each wrong password is answered after
  ``BUSY_DELAY`` instead. A correct password is never delayed.

**Tokens.** The same throttle, a second instance, counts failed token lookups
(the JSON API's and the intake's bearer tokens, ``api.authorize``) per
address: past ``TOKEN_FREE_FAILURES`` unknown or revoked tokens, that address
is answered 429 without a lookup, for the same doubling delay. A token lookup
costs no delay (a token is not guessable; the lookups are what is bounded), and
a live token clears its address's record, so one revoked agent on a shared
runner does not keep the others out.

Kept in the console's memory, like its sessions (one process). Whose address a
request is: ``proxies.client``.

>>> t = LoginThrottle(clock=lambda: 100.0)
>>> [t.failed("10.0.0.1") for _ in range(FREE_FAILURES)][-1]
0.5
>>> t.retry_after("10.0.0.1"), t.retry_after("10.0.0.2")
(0.0, 0.0)
>>> _ = t.failed("10.0.0.1"); t.retry_after("10.0.0.1")
1.0
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
TOKEN_FREE_FAILURES = 20  # a spooling client retrying a revoked token, a typo or two
FIRST_DELAY = 1.0
MAX_DELAY = 900.0
FORGET_AFTER = 3600.0
CLIENT_LIMIT = 10_000  # addresses remembered; beyond it the least recent is dropped
WRONG_PASSWORD_DELAY = 0.5
BUSY_FAILURES = 30  # per minute, from all clients
BUSY_DELAY = 3.0


@dataclass
class _Client:
    failures: int = 0
    blocked_until: float = 0.0
    last: float = 0.0
    told: bool = False  # the refusal was logged once for this block


def client_key(address: str) -> str:
    """The unit a client is counted in: its address, or its /64 for IPv6.

    >>> client_key("2001:db8::1"), client_key("192.0.2.7")
    ('2001:db8::/64', '192.0.2.7')
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 6 and ip.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip.ipv4_mapped or ip) if ip.version == 6 else str(ip)


class LoginThrottle:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, free_failures: int = FREE_FAILURES
    ) -> None:
        self._clock = clock
        self.free_failures = free_failures
        self._clients: dict[str, _Client] = {}
        self._recent: deque[float] = deque(maxlen=BUSY_FAILURES * 10)  # failure times, all
        self._lock = threading.Lock()

    def retry_after(self, address: str) -> float:
        """Seconds this client is refused for (0: its password may be checked)."""
        with self._lock:
            client = self._clients.get(client_key(address))
            return max(0.0, client.blocked_until - self._clock()) if client else 0.0

    def first_refusal(self, address: str) -> bool:
        """True once per block: the refusals after it are not logged again."""
        with self._lock:
            client = self._clients.get(client_key(address))
            if client is None or client.told:
                return False
            client.told = True
            return True

    def failed(self, address: str) -> float:
        """Record a wrong password; returns how long to wait before answering it."""
        now = self._clock()
        with self._lock:
            key = client_key(address)
            client = self._clients.pop(key, None)  # re-inserted: the dict stays oldest-first
            if client is None or now - client.last > FORGET_AFTER:
                client = _Client()
            client.failures += 1
            client.last = now
            if client.failures > self.free_failures:
                extra = client.failures - self.free_failures - 1
                client.blocked_until = now + min(MAX_DELAY, FIRST_DELAY * 2 ** min(extra, 20))
                client.told = False
            self._clients[key] = client
            while len(self._clients) > CLIENT_LIMIT:
                del self._clients[next(iter(self._clients))]
            self._recent.append(now)
            while self._recent and self._recent[0] < now - 60:
                self._recent.popleft()
            return BUSY_DELAY if len(self._recent) > BUSY_FAILURES else WRONG_PASSWORD_DELAY

    def failures(self, address: str) -> int:
        with self._lock:
            client = self._clients.get(client_key(address))
            return client.failures if client else 0

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._clients.pop(client_key(address), None)
