"""Whether the running workers resolve with a rule just written, in one line a person reads.

After ``theow review approve`` writes a rule, each worker notices the file
within its poll (``THEOW_RULES_POLL_SECONDS``), loads the new rules version
and compiles it, and only then resolves with it. Each worker process says
which version it serves (``heartbeat.ServedReport``); this waits, bounded,
until every running resolver worker serves the version now on disk, and says
what is true then:

- ``rule NAME live on 2 worker(s)``
- ``rule NAME written; no resolver worker is running to load it (…)``
- ``rule NAME written; workers have not loaded it yet (1 of 2 after 10 s; …)``
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from theow_client import names
from theow_client.config import safe_url
from theow_workers.heartbeat import Rollout, live_on

if TYPE_CHECKING:
    from redis import Redis

    from theow_workers.config import Settings

LIVE_WAIT = 10.0  # seconds `approve` waits for the workers to load a rule
POLL = 0.25


@dataclass(frozen=True)
class Live:
    """What became of a rule written: live on every running worker, or why not yet."""

    live: bool
    line: str


def wait_live(
    settings: Settings,
    rules: Sequence[str],
    version: str,
    timeout: float = LIVE_WAIT,
    redis: Redis | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Live:
    """Wait up to ``timeout`` s until every resolver worker serves ``version`` (the rules
    version on disk, ``rules`` among them); one line saying how it stands then."""
    import redis as redis_py

    what = f"rule {', '.join(rules)}" if len(rules) == 1 else f"rules {', '.join(rules)}"
    client = redis or redis_py.Redis.from_url(settings.redis_url, socket_timeout=2)
    started = clock()
    try:
        while True:
            rollout = live_on(client, version)
            if rollout.live:
                return Live(True, f"{what} live on {len(rollout.workers)} worker(s)")
            if not rollout.workers:
                return Live(False, f"{what} written; {_no_worker()}")
            if clock() - started >= timeout:
                return Live(False, f"{what} written; {_behind(settings, client, rollout, timeout)}")
            time.sleep(POLL)
    except redis_py.RedisError as exc:
        return Live(
            False,
            f"{what} written; could not ask the workers whether they serve it "
            f"({type(exc).__name__} at {safe_url(settings.redis_url)})",
        )
    finally:
        if redis is None:
            client.close()


def _no_worker() -> str:
    return (
        "no resolver worker is running to load it "
        "(`theow up`, or `theow worker` on your fleet; `theow doctor` checks)"
    )


def _behind(settings: Settings, client: Redis, rollout: Rollout, timeout: float) -> str:
    """Why the workers do not serve it yet, and what to do, as far as is known."""
    serving = f"{len(rollout.serving)} of {len(rollout.workers)} worker(s) serve it"
    error = client.get(names.KEY_RULES_ERROR)
    if error:
        return (
            f"workers have not loaded it yet ({serving} after {timeout:g} s; a worker "
            "finds the rules directories invalid: `theow rules check`, `theow doctor`)"
        )
    layers = ", ".join(str(layer) for layer in settings.rule_layers)
    return (
        f"workers have not loaded it yet ({serving} after {timeout:g} s). A worker reads "
        f"{layers} every {settings.rules_poll_seconds:g} s and then compiles the rules; one on "
        "another machine needs the file in its own rules directory (`theow doctor`: rules.served)"
    )
